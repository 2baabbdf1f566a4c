"""Render helm/praxon offline and check the manifests against the code they deploy.

Rendering uses helm-python-sdk (Helm v4's Go SDK as a C library, called with ctypes: no helm binary, no cluster).
The expectations come from the code, never from a copy of it:
  - env names: walked from the process Settings (services.catalog.settings_class(): services.common.settings.Settings
    plus every service's section, PRAXON_<SERVICE>__<FIELD>; prefix and nested delimiter from its model_config);
  - commands: parsed with services.cli.main.build_parser(), then checked against the services, queues and predictors of services/catalog.py;
  - ports: the Settings a container would build from its rendered environment, and the CLI's own defaults.
"""
from __future__ import annotations

import base64
import copy
import functools
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import yaml
from pydantic import BaseModel, SecretStr

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "praxon"
RELEASE, NAMESPACE = "rel", "praxon-test"
PRAXON_REPOSITORY = "praxon/praxon"  # image.repository in values.yaml: containers running the praxon CLI

EXTERNAL = {
    "postgresql": {"enabled": False}, "redis": {"enabled": False}, "minio": {"enabled": False},
    "database": {"url": "postgresql://praxon:db-Pa55word-xyz@pg.example.internal:5432/praxon"},
    "broker": {"url": "amqp://praxon:mq-Pa55word-xyz@rabbitmq.example.internal:5672/praxon"},
    "objectStorage": {"endpoint": "s3.example.internal:443", "secure": True,
                      "accessKey": "AKIAEXAMPLEKEY123", "secretKey": "s3-Secret-Key-xyz-123"},
}


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _gpu_workers() -> dict:
    gpu = {"enabled": True, "count": 1, "resourceName": "nvidia.com/gpu"}
    place = {"nodeSelector": {"nvidia.com/gpu.present": "true"},
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    return {"workers": {
        "training": {"gpu": {**gpu, "count": 2}, **place, "pdb": {"create": True, "maxUnavailable": 1},
                     "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "32Gi"}}},
        "distillation": {"gpu": gpu, **place},
        "unlearning": {"gpu": gpu, **place, "replicaCount": 2},
        "audit": {"enabled": False},
    }}


def _service_names() -> list[str]:
    from services import catalog

    return catalog.names()


def kserve_profile(predictor: str) -> dict:
    return {"kserve": {"enabled": True, "inferenceServices": [
        {"name": "rec-acme", "predictor": predictor, "tenant": "acme", "model": "recommender@production",
         "minReplicas": 1, "maxReplicas": 4, "scaleMetric": "cpu", "scaleTarget": 70},
        {"name": "rec-acme-gpu", "predictor": predictor, "tenant": "acme", "model": "recommender:3",
         "minReplicas": 0, "maxReplicas": 2, "gpu": {"enabled": True, "count": 1, "resourceName": "nvidia.com/gpu"},
         "nodeSelector": {"nvidia.com/gpu.present": "true"},
         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    ]}}


# name -> values. "kserve" is filled in by kserve_profile() with a predictor kind that exists (see conftest).
PROFILES: dict[str, dict] = {
    # the defaults: bundled PostgreSQL, Redis and MinIO (dev cluster)
    "defaults": {},
    # external stores from plain values, nothing optional
    "minimal": deep_merge(EXTERNAL, {"networkPolicy": {"enabled": False}, "migrations": {"enabled": False},
                                     "services": {name: {"replicaCount": 1, "pdb": {"create": False}}
                                                  for name in _service_names()},
                                     "workers": {q: {"enabled": False} for q in
                                                 ("training", "distillation", "calibration", "unlearning", "audit")}}),
    # bundled stores with fixed passwords, no persistence, ServiceMonitor and restricted egress
    "bundled": {"postgresql": {"auth": {"password": "pg-Fixed-Pa55-abc"}, "persistence": {"enabled": False}},
                "redis": {"auth": {"password": "redis-Fixed-Pa55-abc"}, "persistence": {"enabled": False}},
                "minio": {"auth": {"rootUser": "minio-admin-abc", "rootPassword": "minio-Fixed-Pa55-abc"},
                          "persistence": {"enabled": False}},
                "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus"}}},
                "networkPolicy": {"egress": {"restrict": True}, "metricsNamespaceSelector": {
                    "kubernetes.io/metadata.name": "monitoring"}}},
    "gpu-workers": deep_merge(EXTERNAL, _gpu_workers()),
    "existing-secrets": {
        "postgresql": {"enabled": False}, "redis": {"enabled": False}, "minio": {"enabled": False},
        "database": {"existingSecret": "praxon-db", "existingSecretKey": "uri"},
        "broker": {"existingSecret": "praxon-broker"},
        "objectStorage": {"endpoint": "minio.storage.svc:9000", "existingSecret": "praxon-s3"},
        "extraEnvVarsSecret": "praxon-extra",
        "config": {"grpc": {"tls": {"enabled": True, "existingSecret": "praxon-grpc-tls", "clientAuth": True}}},
        "networkPolicy": {"allowExternal": False, "egress": {"restrict": True, "extraTo": [
            {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 5432, "protocol": "TCP"}]}]}},
    },
    "autoscaling": deep_merge(EXTERNAL, {
        "services": {"platform": {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 10}}},
        "image": {"digest": "sha256:" + "ab" * 32},
        "commonLabels": {"team": "ml-platform"}, "commonAnnotations": {"owner": "ml-platform"},
        "global": {"imagePullSecrets": ["regcred"]},
        "config": {"grpc": {"port": 6000}, "metricsPort": 9100, "logLevel": "DEBUG"},
    }),
}


# ------------------------------------------------------------------------------------------------ rendering
@functools.lru_cache(maxsize=1)
def chart():
    import helm_python

    return helm_python.Chart.load(str(CHART))


def render(values: dict, *, is_upgrade: bool = False) -> list[dict]:
    """Every rendered object (NOTES.txt left out), as dicts."""
    out = chart().render(values, name=RELEASE, namespace=NAMESPACE, is_install=not is_upgrade,
                         is_upgrade=is_upgrade)
    docs: list[dict] = []
    for path in sorted(out):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(out[path]):
            if doc:
                doc.setdefault("_source", path)
                docs.append(doc)
    return docs


def strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "_source"}


def render_regenerated(values: dict) -> list[dict]:
    """render() of a copy of the chart whose catalog.yaml and schema are written anew from services/catalog.py as it
    is now (helm/tools/gen_schema.py): what the chart deploys once a service is added and the generator run."""
    import importlib.util
    import shutil
    import tempfile

    import helm_python

    spec = importlib.util.spec_from_file_location("gen_schema", CHART.parent / "tools" / "gen_schema.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(shutil.copytree(CHART, Path(tmp) / "praxon"))
        (copy / "catalog.yaml").write_text(gen.render_catalog())
        (copy / "values.schema.json").write_text(gen.render())
        out = helm_python.Chart.load(str(copy)).render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [doc for path in sorted(out) if not path.endswith("NOTES.txt") for doc in yaml.safe_load_all(out[path])
            if doc]


def values_yaml() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def fullname() -> str:
    return f"{RELEASE}-praxon"


# ------------------------------------------------------------------------------------------------ from the code
@functools.cache
def settings_class() -> type[BaseModel]:
    """The Settings every praxon process builds (services.catalog.settings()): the common fields and every
    service's section."""
    from services import catalog

    return catalog.settings_class()


def settings_env_names() -> dict[str, type | None]:
    """Every environment variable the Settings read -> the leaf annotation (None for a whole nested model)."""
    Settings = settings_class()

    prefix = Settings.model_config.get("env_prefix", "")
    delim = Settings.model_config.get("env_nested_delimiter")
    names: dict[str, type | None] = {}

    def walk(model: type[BaseModel], stem: str) -> None:
        for fname, finfo in model.model_fields.items():
            name = f"{stem}{fname}".upper()
            ann = finfo.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                names[name] = None  # a nested model can also be given whole, as JSON
                if delim:
                    walk(ann, f"{name}{delim}")
            else:
                names[name] = ann

    walk(Settings, prefix)
    return names


def secret_env_names() -> set[str]:
    return {n for n, ann in settings_env_names().items() if ann is SecretStr}


def must_set_env_names() -> set[str]:
    """Names whose defaults only work on a developer machine (loopback addresses) or are credentials."""
    Settings = settings_class()

    out = set(secret_env_names())
    defaults = Settings.model_construct()
    env = settings_env_names()
    for name in env:
        obj: typing.Any = defaults
        for part in name.removeprefix(Settings.model_config["env_prefix"]).lower().split(
                Settings.model_config["env_nested_delimiter"]):
            obj = getattr(obj, part)
        if isinstance(obj, SecretStr):
            obj = obj.get_secret_value()
        if isinstance(obj, str) and ("127.0.0.1" in obj or "localhost" in obj):
            out.add(name)
    return out


# ------------------------------------------------------------------------------------------------ workloads
@dataclass
class Container:
    owner: dict  # the rendered object
    pod: dict  # the pod spec (or the KServe predictor / runtime spec)
    spec: dict  # the container
    kind: str  # service | worker | migrations | runtime | predictor | store
    args: list[str] = field(default_factory=list)  # praxon CLI args (KServe: runtime args + model args)

    @property
    def where(self) -> str:
        return f"{self.owner['kind']}/{self.owner['metadata']['name']} container {self.spec.get('name')}"

    @property
    def is_praxon(self) -> bool:
        image = self.spec.get("image", "")
        return PRAXON_REPOSITORY in image


def containers(docs: list[dict]) -> list[Container]:
    out: list[Container] = []
    runtimes = {d["metadata"]["name"]: d for d in by_kind(docs, "ServingRuntime")}
    for d in docs:
        kind = d["kind"]
        if kind in ("Deployment", "StatefulSet", "Job"):
            pod = d["spec"]["template"]["spec"]
            component = d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component", "")
            role = component if component in ("service", "worker", "migrations") else "store"
            for c in pod.get("initContainers", []) + pod["containers"]:
                out.append(Container(d, pod, c, role, list(c.get("command", [])[1:]) + list(c.get("args", []))))
        elif kind == "ServingRuntime":
            for c in d["spec"]["containers"]:
                # a template: KServe appends each InferenceService's args (checked merged, below)
                out.append(Container(d, d["spec"], c, "runtime", list(c.get("args", []))))
        elif kind == "InferenceService":
            pred = d["spec"]["predictor"]
            model = pred["model"]
            runtime = runtimes.get(model.get("runtime", ""))
            base = runtime["spec"]["containers"][0] if runtime else {}
            merged = {**base, **{k: v for k, v in model.items()
                                 if k not in ("modelFormat", "runtime", "storageUri", "args")}}
            # KServe appends the InferenceService's args to the runtime container's (MergeRuntimeContainers)
            merged["args"] = list(base.get("args", [])) + list(model.get("args", []))
            merged.setdefault("name", "kserve-container")
            out.append(Container(d, pred, merged, "predictor", merged["args"]))
    return out


def secret_values(docs: list[dict]) -> dict[tuple[str, str], str]:
    out = {}
    for s in by_kind(docs, "Secret"):
        for k, v in (s.get("stringData") or {}).items():
            out[(s["metadata"]["name"], k)] = str(v)
        for k, v in (s.get("data") or {}).items():
            out[(s["metadata"]["name"], k)] = base64.b64decode(v).decode()
    return out


PLACEHOLDER = "from-an-existing-secret"


def container_env(c: Container, docs: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> value, name -> where it came from) as the kubelet would build it from the rendered objects.
    Keys of user-provided ConfigMaps/Secrets (extraEnvVarsCM/Secret) are unknown here and left out."""
    cms = {m["metadata"]["name"]: m.get("data", {}) for m in by_kind(docs, "ConfigMap")}
    secrets = secret_values(docs)
    env: dict[str, str] = {}
    origin: dict[str, str] = {}
    for src in c.spec.get("envFrom", []):
        if "configMapRef" in src and src["configMapRef"]["name"] in cms:
            for k, v in cms[src["configMapRef"]["name"]].items():
                env[k], origin[k] = str(v), f"configMap {src['configMapRef']['name']}"
    for e in c.spec.get("env", []):
        name = e["name"]
        if "value" in e:
            env[name], origin[name] = str(e["value"]), "value"
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            env[name] = secrets.get((ref["name"], ref["key"]), PLACEHOLDER)
            origin[name] = f"secret {ref['name']}/{ref['key']}"
        else:
            env[name], origin[name] = PLACEHOLDER, "valueFrom"
    return env, origin


def settings_for(env: dict[str, str]):
    """The Settings a praxon process would build from this environment (validates every value, too)."""
    Settings = settings_class()

    fixed = dict(env)
    for name in secret_env_names():  # existing Secrets are not rendered: any well-formed value will do
        if fixed.get(name) == PLACEHOLDER:
            fixed[name] = "placeholder"
    with mock.patch.dict(os.environ, fixed, clear=True):
        return Settings(_env_file=None)
