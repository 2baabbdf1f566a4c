"""The reliability limits (per-tenant job quotas, per-token request rate, auth caches, engine queue bounds) and
gRPC TLS/mTLS are set from values.yaml and reach each pod's environment as the PRAXON_* names the code reads; the
Settings a pod builds from that environment carry the values."""
import random

import pytest

from tests.deploy.chartlib import EXTERNAL, containers, container_env, deep_merge, render, settings_for


def _pod_settings(values: dict, kind: str = "service", name: str = ""):
    """(env, Settings, container) of the first praxon container of `kind` (and Deployment name suffix)."""
    docs = render(deep_merge(EXTERNAL, values))
    for c in containers(docs):
        if c.is_praxon and c.kind == kind and c.owner["metadata"]["name"].endswith(name):
            env, _ = container_env(c, docs)
            return env, settings_for(env), c
    raise AssertionError(f"no {kind} container {name!r} rendered")


@pytest.mark.parametrize("seed", [0, 1])
def test_limits_set_in_values_reach_the_settings_of_services_and_workers(seed):
    rng = random.Random(seed)
    want = {"rate": float(rng.randint(1, 500)), "burst": rng.randint(1, 900), "cache": float(rng.randint(1, 60)),
            "neg": float(rng.randint(1, 9)), "tenant": rng.randint(1, 999), "kind": rng.randint(1, 99),
            "mod": rng.randint(1, 9999), "rec": rng.randint(1, 9999), "gen": rng.randint(1, 999)}
    values = {"config": {
        "grpc": {"requestsPerSecondPerToken": want["rate"], "requestBurstPerToken": want["burst"],
                 "authCacheSeconds": want["cache"], "authNegativeCacheSeconds": want["neg"]},
        "jobs": {"maxActivePerTenant": want["tenant"], "maxActivePerTenantKind": want["kind"]},
        "serving": {"moderation": {"maxQueued": want["mod"]}, "recommendation": {"maxQueued": want["rec"]},
                    "generation": {"maxQueued": want["gen"]}}}}
    for kind in ("service", "worker"):
        env, st, _ = _pod_settings(values, kind)
        assert env["PRAXON_JOBS__MAX_ACTIVE_PER_TENANT"] == str(want["tenant"])
        assert (st.grpc.requests_per_second_per_token, st.grpc.request_burst_per_token) == (want["rate"], want["burst"])
        assert (st.grpc.auth_cache_seconds, st.grpc.auth_negative_cache_seconds) == (want["cache"], want["neg"])
        assert (st.jobs.max_active_per_tenant, st.jobs.max_active_per_tenant_kind) == (want["tenant"], want["kind"])
        assert (st.moderation.max_queued, st.recommendation.max_queued, st.generation.max_queued) == \
            (want["mod"], want["rec"], want["gen"])


def test_the_default_values_are_the_code_defaults():
    from tests.deploy.chartlib import settings_class

    _, st, _ = _pod_settings({})
    code = settings_class()()
    for section, field in [("grpc", "requests_per_second_per_token"), ("grpc", "request_burst_per_token"),
                           ("grpc", "auth_cache_seconds"), ("grpc", "auth_negative_cache_seconds"),
                           ("jobs", "max_active_per_tenant"), ("jobs", "max_active_per_tenant_kind"),
                           ("moderation", "max_queued"), ("recommendation", "max_queued"), ("generation", "max_queued")]:
        assert getattr(getattr(st, section), field) == getattr(getattr(code, section), field), (section, field)


@pytest.mark.parametrize("client_auth", [False, True])
def test_tls_from_a_secret_reaches_the_services_and_their_probes_stay_usable(client_auth):
    values = {"config": {"grpc": {"tls": {"enabled": True, "existingSecret": "grpc-cert", "clientAuth": client_auth}}}}
    env, st, c = _pod_settings(values, "service", "platform")
    mounts = {m["name"]: m["mountPath"] for m in c.spec["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in c.pod["volumes"] if "secret" in v}
    assert secrets["grpc-tls"] == "grpc-cert"
    assert st.grpc.tls_cert_file == mounts["grpc-tls"] + "/tls.crt"
    assert st.grpc.tls_key_file == mounts["grpc-tls"] + "/tls.key"
    assert st.grpc.tls_client_ca_file == (mounts["grpc-tls"] + "/ca.crt" if client_auth else "")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):  # kubelet gRPC probes are plaintext only
        assert "grpc" not in c.spec[probe] and c.spec[probe]["tcpSocket"]["port"] == "grpc"
    env_w, st_w, _ = _pod_settings(values, "worker")  # workers serve no gRPC: no certificate, no TLS env
    assert st_w.grpc.tls_cert_file == "" and "PRAXON_GRPC__TLS_CERT_FILE" not in env_w


def test_without_tls_the_services_are_plaintext_with_grpc_probes():
    _, st, c = _pod_settings({}, "service", "platform")
    assert st.grpc.tls_cert_file == "" and "grpc-tls" not in {v["name"] for v in c.pod["volumes"]}
    assert c.spec["livenessProbe"]["grpc"]["port"] == st.grpc.port


def test_tls_without_a_secret_fails_with_what_to_set():
    with pytest.raises(Exception, match="config.grpc.tls.existingSecret"):
        render(deep_merge(EXTERNAL, {"config": {"grpc": {"tls": {"enabled": True}}}}))
