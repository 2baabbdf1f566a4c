"""Schema validation of rendered objects, offline.

- built-in kinds: kubernetes-validate (the Kubernetes OpenAPI schemas as JSON Schema, strict = no unknown fields);
- KServe InferenceService / ServingRuntime: the kserve SDK's generated models (kserve.models, which reference the
  kubernetes client's models for pod fields), walked strictly: unknown fields, wrong types, missing required fields
  and values outside the allowed enums are errors;
- prometheus-operator ServiceMonitor: cloudcoil's pydantic models of the CRD (patterns, required fields), plus a
  round trip that catches unknown fields (the models ignore extras).
"""
from __future__ import annotations

import functools
import re
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils as kv_utils

# kubernetes-validate re-reads (and re-parses) its 4 MB definitions file for every object: cache it.
kv_utils.schema_contents = functools.lru_cache(maxsize=None)(kv_utils.schema_contents)

CRD_KINDS = {("serving.kserve.io/v1beta1", "InferenceService"), ("serving.kserve.io/v1alpha1", "ServingRuntime"),
             ("monitoring.coreos.com/v1", "ServiceMonitor")}


def k8s_validate(doc: dict, version: str) -> str | None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(str(p) for p in exc.path)
        return f"{doc['kind']}/{doc['metadata']['name']} at /{path}: {exc.message}"
    return None


# ------------------------------------------------------------------------------------------------ KServe
# kserve's models write list[X] / dict(str, X); the kubernetes client's write List[X] / Dict[str, X]
_LIST = re.compile(r"^[lL]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")
# Quantities are int-or-string in the API, typed str by the generated client.
_QUANTITY_FIELDS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}


def _model_class(name: str):
    import kserve.models
    import kubernetes.client.models

    for mod in (kserve.models, kubernetes.client.models):
        if hasattr(mod, name):
            return getattr(mod, name)
    raise LookupError(f"no model class {name} in kserve.models or kubernetes.client.models")


class OpenAPIError(ValueError):
    pass


def _build(value: Any, typ: str, path: str) -> Any:
    if value is None:
        return None
    if m := _LIST.match(typ):
        if not isinstance(value, list):
            raise OpenAPIError(f"{path}: expected a list ({typ}), got {type(value).__name__}")
        return [_build(v, m.group(1), f"{path}[{i}]") for i, v in enumerate(value)]
    if m := _DICT.match(typ):
        if not isinstance(value, dict):
            raise OpenAPIError(f"{path}: expected a map ({typ}), got {type(value).__name__}")
        inner = m.group(1) or m.group(2)
        return {k: _build(v, inner, f"{path}.{k}") for k, v in value.items()}
    if typ == "str":
        if not isinstance(value, str):
            raise OpenAPIError(f"{path}: expected a string, got {type(value).__name__} {value!r}")
        return value
    if typ == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise OpenAPIError(f"{path}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if typ == "bool":
        if not isinstance(value, bool):
            raise OpenAPIError(f"{path}: expected a boolean, got {type(value).__name__} {value!r}")
        return value
    if typ == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OpenAPIError(f"{path}: expected a number, got {type(value).__name__}")
        return value
    if typ in ("ResourceQuantity", "IntOrString"):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise OpenAPIError(f"{path}: expected a quantity, got {type(value).__name__}")
        return str(value)  # the API takes int-or-string; the client's model wants the string form
    if typ == "object":
        return value
    cls = _model_class(typ)
    if not isinstance(value, dict):
        raise OpenAPIError(f"{path}: expected an object ({typ}), got {type(value).__name__}")
    by_json = {j: a for a, j in cls.attribute_map.items()}
    kwargs = {}
    for key, v in value.items():
        if key not in by_json:
            raise OpenAPIError(f"{path}: unknown field {key!r} for {typ}")
        attr = by_json[key]
        typ_attr = cls.openapi_types[attr]
        if (typ, key) in _QUANTITY_FIELDS:
            typ_attr = "dict(str, ResourceQuantity)"
        kwargs[attr] = _build(v, typ_attr, f"{path}.{key}")
    try:
        return cls(**kwargs)  # the generated setters check required fields and allowed values
    except ValueError as exc:
        raise OpenAPIError(f"{path}: {typ}: {exc}") from None


def kserve_validate(doc: dict) -> str | None:
    cls_name = {"InferenceService": "V1beta1InferenceService", "ServingRuntime": "V1alpha1ServingRuntime"}[doc["kind"]]
    try:
        _build(doc, cls_name, f"{doc['kind']}/{doc['metadata']['name']}")
    except OpenAPIError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------------------------------------ ServiceMonitor
def _drop_none(x):
    if isinstance(x, dict):
        return {k: _drop_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_none(v) for v in x]
    return x


def servicemonitor_validate(doc: dict) -> str | None:
    from cloudcoil.models.prometheus_operator import v1
    from pydantic import ValidationError

    try:
        sm = v1.ServiceMonitor.model_validate(doc)
    except ValidationError as exc:
        return f"ServiceMonitor/{doc['metadata']['name']}: {exc}"
    back = _drop_none(sm.model_dump(by_alias=True, exclude_unset=True, mode="json"))
    if back != doc:
        return f"ServiceMonitor/{doc['metadata']['name']}: fields the CRD does not define: {_diff(doc, back)}"
    return None


def _diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}" for k in a if k not in b]
        for k in a:
            if k in b:
                out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=False)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def validate_all(docs: list[dict], k8s_versions: list[str]) -> list[str]:
    problems = []
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if key in CRD_KINDS:
            err = servicemonitor_validate(doc) if doc["kind"] == "ServiceMonitor" else kserve_validate(doc)
            if err:
                problems.append(err)
            continue
        for version in k8s_versions:
            err = k8s_validate(doc, version)
            if err:
                problems.append(f"[k8s {version}] {err}")
    return problems
