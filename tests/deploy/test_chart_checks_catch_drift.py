"""The checks in test_chart_render fail when the chart and the code drift apart (a check that cannot fail is a
defect): each test breaks one thing on purpose and expects the problem, named, in the report."""
import copy

import pytest

from services import catalog
from tests.deploy import checks
from tests.deploy.chartlib import (
    EXTERNAL,
    by_kind,
    deep_merge,
    fullname,
    render,
    render_regenerated,
    values_yaml,
)
from tests.deploy.validators import (
    k8s_validate,
    kserve_validate,
    servicemonitor_validate,
)

BASE = deep_merge(EXTERNAL, {"workers": {q: {"enabled": False} for q in catalog.queues() if q != "default"}})


@pytest.fixture(scope="module")
def base_docs():
    return render(BASE)


def test_an_env_name_no_setting_reads_is_reported():
    docs = render(deep_merge(BASE, {"services": {"platform": {"extraEnvVars": [
        {"name": "PRAXON_GRPC_PORT", "value": "50051"}]}}}))
    problems = checks.check_env(docs)
    assert any("sets PRAXON_GRPC_PORT" in p and "did you mean PRAXON_GRPC__PORT" in p for p in problems), problems


def test_a_secret_setting_given_in_plain_text_is_reported():
    docs = render(deep_merge(BASE, {"extraEnvVars": [{"name": "PRAXON_S3__SECRET_KEY", "value": "plain-Text-Key-1"}]}))
    problems = checks.check_env(docs)
    assert any("PRAXON_S3__SECRET_KEY is a SecretStr setting but comes from value" in p for p in problems), problems
    assert any("has a Secret value" in p or "PRAXON_S3__SECRET_KEY" in p for p in problems)


def test_a_loopback_default_left_unset_is_reported(base_docs):
    docs = copy.deepcopy(base_docs)
    cm = by_kind(docs, "ConfigMap")[0]
    del cm["data"]["PRAXON_S3__ENDPOINT"]
    problems = checks.check_env(docs)
    assert any("does not set PRAXON_S3__ENDPOINT" in p for p in problems), problems


def test_a_value_the_settings_reject_is_reported():
    docs = render(deep_merge(BASE, {"extraEnvVars": [{"name": "PRAXON_JOBS__LEASE_SECONDS", "value": "-3"}]}))
    assert any("does not validate as Settings" in p and "lease_seconds" in p for p in checks.check_env(docs))


def test_a_port_that_differs_from_the_settings_is_reported():
    # the process would listen on 7000 (env wins over the ConfigMap), the pod and probes say 50051
    docs = render(deep_merge(BASE, {"services": {"platform": {"extraEnvVars": [
        {"name": "PRAXON_GRPC__PORT", "value": "7000"}]}}}))
    problems = checks.check_ports(docs)
    assert any("the process listens on PRAXON_GRPC__PORT=7000" in p for p in problems), problems
    assert any("livenessProbe is not a gRPC probe on 7000" in p for p in problems), problems


def test_a_cli_command_that_does_not_exist_is_reported():
    docs = render(deep_merge(BASE, {"workers": {"default": {"livenessProbe": {
        "exec": {"command": ["praxon", "health", "--worker"]}, "periodSeconds": 30}}}}))
    problems = checks.check_commands(docs)
    assert any("livenessProbe runs `praxon health --worker`, not a praxon command" in p for p in problems), problems


def test_a_service_in_the_code_the_chart_catalog_lacks_is_reported(base_docs, monkeypatch):
    from services.common.spec import JobKind, ServiceSpec

    imaginary = ServiceSpec("imaginary", "services.imaginary.api:register",
                            job_kinds={"imaginary.x": JobKind("gpu-big", "services.imaginary.jobs:run")})
    monkeypatch.setattr(catalog, "SPECS", [*catalog.SPECS, imaginary])
    problems = checks.check_coverage(deep_merge(values_yaml(), BASE), base_docs)
    assert problems == [
        "service 'imaginary' is in services/catalog.py but not in helm/praxon/catalog.yaml: " + checks.REGENERATE,
        "queue 'gpu-big' is in services/catalog.py but not in helm/praxon/catalog.yaml: " + checks.REGENERATE]


def test_the_generator_adds_a_new_service_without_chart_lines(monkeypatch):
    """Adding a service to the catalog is all it takes: the generated catalog.yaml and schema name it, and the
    templates then render its Deployment and Service from serviceDefaults."""
    from services.common.spec import ServiceSpec

    monkeypatch.setattr(catalog, "SPECS", [*catalog.SPECS, ServiceSpec("imaginary", "services.imaginary.api:register")])
    docs = render_regenerated(BASE)
    made = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("Deployment", f"{fullname()}-imaginary"), ("Service", f"{fullname()}-imaginary")} <= made, sorted(made)
    deployment = next(d for d in docs if d["metadata"]["name"] == f"{fullname()}-imaginary" and d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["serve", "imaginary"]


def test_a_chart_entry_for_a_service_or_queue_the_code_lacks_is_refused_or_reported(base_docs, monkeypatch):
    # the schema (generated from the catalog) refuses the entry when the chart is rendered
    with pytest.raises(Exception, match="search"):
        render(deep_merge(BASE, {"services": {"search": {"enabled": True}}}))
    with pytest.raises(Exception, match="gpu-big"):
        render(deep_merge(BASE, {"workers": {"gpu-big": {"enabled": True}}}))
    # and the coverage check names it, for values that reach it some other way (a stale schema)
    merged = deep_merge(values_yaml(), {"services": {"search": {"enabled": True}}, "workers": {"gpu-big": {}}})
    coverage = checks.check_coverage(merged, base_docs)
    assert any(p.startswith("chart entry services.search is not a service") for p in coverage), coverage
    assert any(p.startswith("chart entry workers.gpu-big is not a queue") for p in coverage), coverage
    # a service or queue the code drops: reported against the generated catalog.yaml, and in the commands
    names, known = catalog.names(), catalog.queues()
    monkeypatch.setattr(catalog, "names", lambda: [n for n in names if n != "platform"])
    monkeypatch.setattr(catalog, "queues", lambda: tuple(q for q in known if q != "default"))
    assert any("helm/praxon/catalog.yaml lists queue 'default'" in p for p in checks.check_coverage(merged, base_docs))
    commands = checks.check_commands(base_docs)
    assert any("service 'platform' is not a service of services/catalog.py" in p for p in commands), commands
    assert any("queue 'default' is not a queue of any job kind in services/catalog.py" in p for p in commands), commands


def test_an_unregistered_predictor_kind_is_reported():
    docs = render(deep_merge(BASE, {"kserve": {"enabled": True, "inferenceServices": [
        {"name": "x", "predictor": "no-such-predictor", "tenant": "t", "model": "m", "minReplicas": 1,
         "maxReplicas": 1}]}}))
    assert any("predictor 'no-such-predictor' is not a predictor of services/catalog.py" in p
               for p in checks.check_commands(docs))


def test_policy_violations_are_reported(base_docs):
    docs = copy.deepcopy(base_docs)
    dep = next(d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == f"{fullname()}-platform")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    pod["securityContext"]["runAsNonRoot"] = False
    c["securityContext"]["runAsUser"] = 0
    del c["securityContext"]["runAsNonRoot"]
    del c["resources"]["requests"]["cpu"]
    del c["readinessProbe"]
    c["image"] = "ghcr.io/praxon/praxon:latest"
    cm = by_kind(docs, "ConfigMap")[0]
    cm["data"]["LEAK"] = "db=" + EXTERNAL["database"]["url"]
    report = "\n".join(p for check in checks.POLICIES for p in check(docs))
    for expected in ("runAsNonRoot is not true", "runAsUser is 0", "no cpu request", "no readinessProbe",
                     "uses the tag 'latest'", "key LEAK contains a Secret value"):
        assert expected in report, expected


def test_the_schema_validators_reject_bad_objects(base_docs):
    svc = copy.deepcopy(next(d for d in by_kind(base_docs, "Service")))
    svc.pop("_source")
    svc["spec"]["ports"][0]["port"] = "grpc-port"
    assert "grpc-port" in k8s_validate(svc, "1.35.0")
    dep = copy.deepcopy(by_kind(base_docs, "Deployment")[0])
    dep.pop("_source")
    dep["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    assert "livenessProbes" in k8s_validate(dep, "1.35.0")  # strict: unknown fields are errors

    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "m"},
            "spec": {"predictor": {"minReplicas": 1, "maxReplica": 2}}}
    assert "unknown field 'maxReplica'" in kserve_validate(isvc)
    isvc["spec"]["predictor"] = {"minReplicas": "one"}
    assert "expected an integer" in kserve_validate(isvc)
    rt = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "metadata": {"name": "r"},
          "spec": {"supportedModelFormats": [{"name": "f"}], "containers": [{"image": "i:1"}]}}
    assert "V1Container" in kserve_validate(rt)  # a container's name is required
    sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "s"},
          "spec": {"selector": {}, "endpoints": [{"port": "metrics", "intervall": "30s"}]}}
    assert "intervall" in servicemonitor_validate(sm)
    sm["spec"]["endpoints"] = [{"port": "metrics", "interval": "thirty"}]
    assert "interval" in servicemonitor_validate(sm)
