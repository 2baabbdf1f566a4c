"""Rows of the shared tables -> their proto messages (praxon.common.v1, praxon.models.v1)."""
from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from praxon.common.v1 import common_pb2
from praxon.models.v1 import models_pb2
from services.common.errors import InvalidArgument

JOB_STATES = {name: getattr(common_pb2, f"JOB_STATE_{name}") for name in
              ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")}
STATE_NAMES = {v: k for k, v in JOB_STATES.items()}


def ts(value) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def struct(data: dict[str, Any] | None) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    if data:
        out.update(json.loads(json.dumps(data, default=str)))
    return out


def from_struct(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def enum_of(table: dict[int, Any], value: int, field: str) -> Any:
    """The domain value for a proto enum number; unknown or unlisted numbers are the caller's error."""
    if value not in table:
        raise InvalidArgument(field, f"unknown value {value}")
    return table[value]


def state_filter(states, field: str = "states") -> list[str]:
    out = []
    for i, s in enumerate(states):
        if s not in STATE_NAMES:
            raise InvalidArgument(f"{field}[{i}]", f"unknown job state {s}")
        out.append(STATE_NAMES[s])
    return out


def artifact(row: dict) -> common_pb2.ArtifactRef:
    return common_pb2.ArtifactRef(id=str(row["id"]), name=row["name"], sha256=row["sha256"],
                                  size_bytes=row["size_bytes"], content_type=row["content_type"],
                                  producing_job_id=str(row["producing_job_id"] or ""),
                                  create_time=ts(row["created_at"]))


def job(row: dict, artifacts: list[dict] = (), models: list[dict] = ()) -> common_pb2.Job:
    msg = common_pb2.Job(
        id=str(row["id"]), kind=row["kind"], state=JOB_STATES[row["state"]], progress=row["progress"],
        message=row["message"] or "", params=struct(row["params"]), attempts=row["attempts"],
        cancel_requested=row["cancel_requested"], idempotency_key=row["idempotency_key"] or "",
        artifacts=[artifact(a) for a in artifacts],
        models=[common_pb2.ModelRef(name=m["name"], version=m["version"]) for m in models],
        create_time=ts(row["created_at"]), start_time=ts(row["started_at"]), end_time=ts(row["finished_at"]),
        parent_job_id=str(row.get("parent_job_id") or ""))
    if row["result"] is not None:
        msg.result.CopyFrom(struct(row["result"]))
    if row["error_reason"]:
        msg.error.CopyFrom(common_pb2.JobError(reason=row["error_reason"], message=row["error_message"] or ""))
    return msg


def event(row: dict) -> common_pb2.JobEvent:
    return common_pb2.JobEvent(job_id=str(row["job_id"]), sequence=row["seq"], state=JOB_STATES[row["state"]],
                               progress=row["progress"], message=row["message"],
                               metrics={k: float(v) for k, v in row["metrics"].items()}, time=ts(row["created_at"]))


# A model version's config can carry whole files (a language model's tokenizer.json: 33 MB for Gemma's 262k words);
# the API answers with their size instead, so a version always fits in a message (the files stay in the registry).
MAX_CONFIG_STRING = 64 * 1024


def _bounded(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_CONFIG_STRING:
        return f"<{len(value.encode())} bytes, not returned>"
    if isinstance(value, dict):
        return {k: _bounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v) for v in value]
    return value


def model_version(row: dict, weights: dict | None, aliases: list[str], parents: list[str]) -> models_pb2.ModelVersion:
    return models_pb2.ModelVersion(
        id=str(row["id"]), name=row["name"], version=row["version"] or 0, kind=row["kind"], aliases=aliases,
        config=struct(_bounded(row["config"])), metrics={k: float(v) for k, v in row["metrics"].items()},
        weights=artifact(weights) if weights else None, producing_job_id=str(row["producing_job_id"] or ""),
        parent_version_ids=parents, dataset_artifact_id=str(row["dataset_artifact_id"] or ""),
        create_time=ts(row["created_at"]))
