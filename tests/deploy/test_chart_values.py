"""values.yaml is documented and schema-checked; bad values fail with a message that names the value."""
import re

import helm_python
import pytest

from tests.deploy.chartlib import (
    CHART,
    EXTERNAL,
    by_kind,
    chart,
    deep_merge,
    render,
    secret_values,
    values_yaml,
)

ISVC = {"name": "rec", "predictor": "recommendation", "tenant": "t", "model": "m", "minReplicas": 1, "maxReplicas": 2}


@pytest.mark.parametrize(("values", "message"), [
    ({"config": {"grpc": {"port": "50051"}}}, "at '/config/grpc/port': got string, want integer"),
    ({"services": {"platform": {"replicaCount": -1}}},
     "at '/services/platform/replicaCount': minimum: got -1, want 0"),
    ({"workers": {"training": {"replicaCount": -2}}}, "at '/workers/training/replicaCount': minimum: got -2, want 0"),
    ({"replicaCount": 3}, "at '': additional properties 'replicaCount' not allowed"),
    ({"services": {"platform": {"replicas": 2}}}, "at '/services/platform': additional properties 'replicas' not allowed"),
    ({"workers": {"default": {"concurrency": "2"}}}, "at '/workers/default/concurrency': got string, want integer"),
    ({"workers": {"training": {"gpu": {"enabled": True, "count": 0}}}},
     "at '/workers/training/gpu/count': minimum: got 0, want 1"),
    ({"kserve": {"inferenceServices": [{**ISVC, "minReplicas": -1}]}},
     "at '/kserve/inferenceServices/0/minReplicas': minimum: got -1, want 0"),
    ({"kserve": {"inferenceServices": [{**ISVC, "maxReplicas": 0}]}},
     "at '/kserve/inferenceServices/0/maxReplicas': minimum: got 0, want 1"),
    ({"kserve": {"inferenceServices": [{k: v for k, v in ISVC.items() if k != "model"}]}},
     "at '/kserve/inferenceServices/0': missing property 'model'"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "at '/podSecurityContext/runAsNonRoot': value must be true"),
    ({"image": {"tag": "latest"}}, "at '/image/tag'"),
    ({"redis": {"image": {"tag": "latest"}}}, "at '/redis/image/tag'"),
    ({"objectStorage": {"multipartBytes": 1024}}, "at '/objectStorage/multipartBytes': minimum: got 1,024"),
    ({"database": {"url": "mysql://x"}}, "at '/database/url'"),
])
def test_bad_values_are_rejected_by_the_schema(values, message):
    with pytest.raises(helm_python.HelmValuesError) as exc:
        chart().validate_schema(values)
    assert message in str(exc.value)
    with pytest.raises(helm_python.HelmValuesError) as exc:  # install/template validate the same way
        render(values)
    assert message in str(exc.value)


@pytest.mark.parametrize(("values", "message"), [
    ({"postgresql": {"enabled": False}},
     "database: set database.url or database.existingSecret (external PostgreSQL), or postgresql.enabled=true"),
    ({"redis": {"enabled": False}}, "broker: set broker.url or broker.existingSecret"),
    ({"minio": {"enabled": False}}, "objectStorage: set objectStorage.endpoint"),
    ({"minio": {"enabled": False}, "objectStorage": {"endpoint": "s3:9000"}},
     "objectStorage: set objectStorage.existingSecret, or both objectStorage.accessKey and objectStorage.secretKey"),
    ({"database": {"url": "postgresql://a@b/c"}}, "database: set either postgresql.enabled (bundled) or"),
])
def test_missing_or_doubled_connections_fail_with_what_to_set(values, message):
    with pytest.raises(helm_python.HelmRenderError) as exc:
        render(values)
    assert message in str(exc.value)


def _leaves(node, path=""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, f"{path}.{k}" if path else k)
    else:
        yield path


def _params() -> list[str]:
    return re.findall(r"^## @param (\S+) \S", (CHART / "values.yaml").read_text(), flags=re.MULTILINE)


def test_every_value_is_documented():
    params = _params()
    assert len(params) == len(set(params)), "a value is documented twice"
    undocumented = [leaf for leaf in _leaves(values_yaml())
                    if not any(leaf == p or leaf.startswith(p + ".") for p in params)]
    assert undocumented == [], "add `## @param <path> <description>` lines to helm/praxon/values.yaml"
    leaves = list(_leaves(values_yaml()))
    stale = [p for p in params if not any(leaf == p or leaf.startswith(p + ".") for leaf in leaves)]
    assert stale == [], "documented values that values.yaml does not have"


def _resolve(schema: dict, node: dict, parts: list[str]) -> bool:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    if not parts:
        return bool(node.get("description") or node.get("type") or node.get("const") is not None)
    head, rest = parts[0], parts[1:]
    if head in node.get("properties", {}):
        return _resolve(schema, node["properties"][head], rest)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return _resolve(schema, extra, rest)
    return node.get("type") == "object" and extra is None  # an open object (e.g. a securityContext)


def test_every_value_is_in_the_schema():
    schema = chart().schema
    missing = [leaf for leaf in _leaves(values_yaml()) if not _resolve(schema, schema, leaf.split("."))]
    assert missing == []


def test_the_schema_file_is_what_the_generator_writes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_schema", CHART.parent / "tools" / "gen_schema.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (CHART / "values.schema.json").read_text() == gen.render(), \
        "run `.venv/bin/python helm/tools/gen_schema.py` and commit values.schema.json"
    assert (CHART / "catalog.yaml").read_text() == gen.render_catalog(), \
        "run `.venv/bin/python helm/tools/gen_schema.py` and commit catalog.yaml"


def test_bundled_credentials_are_generated_once_and_shared():
    docs = render({})
    secrets = secret_values(docs)
    name = "rel-praxon-credentials"
    pg, redis = secrets[(name, "postgres-password")], secrets[(name, "redis-password")]
    assert len(pg) == 24 and len(redis) == 24 and pg != redis
    assert f":{pg}@rel-praxon-postgresql:5432/" in secrets[(name, "database-url")]
    assert f"redis://:{redis}@rel-praxon-redis:6379/0" == secrets[(name, "broker-url")]
    # the bundled stores read the same keys the praxon pods read
    refs = {(e["name"], e["valueFrom"]["secretKeyRef"]["key"]) for s in by_kind(docs, "StatefulSet")
            for e in s["spec"]["template"]["spec"]["containers"][0]["env"] if "valueFrom" in e}
    assert {("POSTGRES_PASSWORD", "postgres-password"), ("REDIS_PASSWORD", "redis-password"),
            ("MINIO_ROOT_USER", "s3-access-key"), ("MINIO_ROOT_PASSWORD", "s3-secret-key")} <= refs


def test_external_urls_go_to_the_secret_only():
    docs = render(deep_merge(EXTERNAL, {}))
    secrets = secret_values(docs)
    assert secrets[("rel-praxon-credentials", "database-url")] == EXTERNAL["database"]["url"]
    assert secrets[("rel-praxon-credentials", "broker-url")] == EXTERNAL["broker"]["url"]
    cm = by_kind(docs, "ConfigMap")[0]["data"]
    assert cm["PRAXON_S3__ENDPOINT"] == "s3.example.internal:443" and cm["PRAXON_S3__SECURE"] == "true"
