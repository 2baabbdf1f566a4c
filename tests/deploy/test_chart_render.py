"""Render helm/praxon for several value profiles; validate every object; check it against the code."""
import helm_python
import kubernetes_validate
import pytest

from tests.deploy import checks
from tests.deploy.chartlib import (
    CHART,
    by_kind,
    containers,
    deep_merge,
    fullname,
    values_yaml,
)
from tests.deploy.conftest import ALL_PROFILES, kserve_kind
from tests.deploy.validators import validate_all

# The chart's minimum (Chart.yaml kubeVersion) and the newest schema kubernetes-validate ships.
K8S_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
PROFILE_NAMES = sorted(ALL_PROFILES)


@pytest.fixture
def registered_predictor():
    return kserve_kind()


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_objects_validate_against_kubernetes_and_crd_schemas(rendered, profile):
    docs = [{k: v for k, v in d.items() if k != "_source"} for d in rendered[profile]]
    assert docs
    assert validate_all(docs, K8S_VERSIONS) == []


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_manifests_match_the_code(rendered, profile, registered_predictor):
    docs = rendered[profile]
    values = deep_merge(values_yaml(), ALL_PROFILES[profile])
    problems = checks.check_coverage(values, docs)
    for check in checks.CONSISTENCY:
        problems += check(docs)
    assert problems == []


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_render_time_policies(rendered, profile):
    problems = []
    for check in checks.POLICIES:
        problems += check(rendered[profile])
    assert problems == []


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_helm_lint_strict(profile):
    report = helm_python.lint(str(CHART), ALL_PROFILES[profile], strict=True, namespace="praxon-test",
                              kube_version="v" + K8S_VERSIONS[-1])
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_profiles_render_what_they_promise(rendered):
    kinds = {p: {d["kind"] for d in docs} for p, docs in rendered.items()}
    # KServe on/off
    assert {"InferenceService", "ServingRuntime"} <= kinds["kserve"]
    assert not {"InferenceService", "ServingRuntime"} & kinds["defaults"]
    isvcs = {d["metadata"]["name"]: d for d in by_kind(rendered["kserve"], "InferenceService")}
    assert isvcs["rec-acme"]["spec"]["predictor"]["minReplicas"] == 1
    assert isvcs["rec-acme"]["spec"]["predictor"]["maxReplicas"] == 4
    assert isvcs["rec-acme-gpu"]["spec"]["predictor"]["minReplicas"] == 0
    assert isvcs["rec-acme-gpu"]["spec"]["predictor"]["model"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert len(by_kind(rendered["kserve"], "ServingRuntime")) == 1  # one runtime per predictor kind
    # bundled stores on by default, off in the external profiles
    assert len(by_kind(rendered["defaults"], "StatefulSet")) == 3
    for p in ("minimal", "gpu-workers", "existing-secrets", "autoscaling"):
        assert by_kind(rendered[p], "StatefulSet") == []
    # GPU workers: the GPU limit, the CUDA image, placement
    gpu = {c.owner["metadata"]["name"]: c for c in containers(rendered["gpu-workers"]) if c.kind == "worker"}
    training = gpu[f"{fullname()}-worker-training"]
    assert training.spec["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert training.spec["image"].endswith("-cuda")
    assert training.pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert training.pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert training.owner["spec"]["strategy"]["type"] == "Recreate"
    assert "nvidia.com/gpu" not in (gpu[f"{fullname()}-worker-calibration"].spec["resources"].get("limits") or {})
    assert f"{fullname()}-worker-audit" not in gpu
    # HPA replaces the replica count; PDBs; ServiceMonitor
    assert by_kind(rendered["autoscaling"], "HorizontalPodAutoscaler")[0]["spec"]["maxReplicas"] == 10
    dep = next(d for d in by_kind(rendered["autoscaling"], "Deployment") if d["metadata"]["name"].endswith("platform"))
    assert "replicas" not in dep["spec"]
    assert by_kind(rendered["minimal"], "PodDisruptionBudget") == []
    assert by_kind(rendered["defaults"], "PodDisruptionBudget")
    assert by_kind(rendered["bundled"], "ServiceMonitor")[0]["spec"]["endpoints"][0]["port"] == "metrics"
    assert by_kind(rendered["defaults"], "ServiceMonitor") == []


def test_existing_secrets_are_referenced_and_no_credentials_secret_is_rendered(rendered):
    docs = rendered["existing-secrets"]
    assert by_kind(docs, "Secret") == []
    refs = {(e["name"], e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for c in containers(docs) if c.is_praxon for e in c.spec["env"] if "valueFrom" in e}
    assert refs == {("PRAXON_DATABASE_URL", "praxon-db", "uri"), ("PRAXON_BROKER_URL", "praxon-broker", "broker-url"),
                    ("PRAXON_S3__ACCESS_KEY", "praxon-s3", "access-key"),
                    ("PRAXON_S3__SECRET_KEY", "praxon-s3", "secret-key")}
    for c in containers(docs):
        assert {"secretRef": {"name": "praxon-extra"}} in c.spec["envFrom"], c.where


def test_migrations_hook_runs_before_install_only_when_it_can(rendered):
    def events(profile):
        return by_kind(rendered[profile], "Job")[0]["metadata"]["annotations"]["helm.sh/hook"]

    # everything from existing Secrets and external servers: migrate before the new release's pods start
    assert events("existing-secrets") == "pre-install,pre-upgrade"
    # the chart's own Secret / the bundled PostgreSQL exist only after install
    assert events("defaults") == "post-install,pre-upgrade"
    assert events("gpu-workers") == "post-install,pre-upgrade"
    assert by_kind(rendered["minimal"], "Job") == []


def test_network_policies_keep_stores_to_praxon_pods(rendered):
    docs = rendered["bundled"]
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in docs if d["kind"] in ("Deployment", "Job", "StatefulSet")}
    for store in ("postgresql", "redis", "minio"):
        np = next(n for n in by_kind(docs, "NetworkPolicy") if n["metadata"]["name"] == f"{fullname()}-{store}")
        allowed = np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
        let_in = {name for name, labels in pods.items() if allowed.items() <= labels.items()}
        from services import catalog
        services = tuple(f"-{name}" for name in catalog.names())
        assert let_in == {name for name in pods if "-worker-" in name or name.endswith((*services, "-migrate"))}
    workers = next(n for n in by_kind(docs, "NetworkPolicy") if n["metadata"]["name"].endswith("-workers"))
    assert workers["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in workers["spec"]
    # allowExternal=false: only labelled clients reach the gRPC port
    svc_np = next(n for n in by_kind(rendered["existing-secrets"], "NetworkPolicy")
                  if n["metadata"]["name"].endswith("-services"))
    assert svc_np["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": {f"{fullname()}-client": "true"}}}]
