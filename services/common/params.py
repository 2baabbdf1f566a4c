"""Typed job parameters: one pydantic model per job kind (services/<svc>/params.py), named by the kind's JobKind
(`params="module:Model"`). The job store validates a job's params with it at submit (JobStore.submit: a value the
job would reject is refused there, never a failed job), and the worker hands the job the typed object (ctx.params;
a job's own `parse_params(Model, ctx.params)` returns it as is). A servicer may validate first with the request's
field paths. `parse_params` turns pydantic's errors into one InvalidArgument whose field violations name the
request's own field paths ("params.lr", "histories[2].items"), so a caller sees the field it sent.

Conventions for the models: `model_config = JobParams.model_config` (unknown keys are errors, numbers must be
finite); field names equal the proto's field names; a field that a request carries under another path (a Struct
`extra_params`, a nested message) is mapped with `field_paths={"lr": "extra_params.lr"}` at the call site."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from services.common.errors import FieldViolation, InvalidArgument
from services.common.registry import NAME_RE

P = TypeVar("P", bound=BaseModel)


def _model_name(value: str) -> str:
    if not NAME_RE.match(value or ""):
        raise ValueError("1-128 characters: letters, digits, '.', '_' or '-', starting alphanumeric")
    return value


# The registry's one rule for model names, as a field type.
ModelName = Annotated[str, AfterValidator(_model_name)]


class JobParams(BaseModel):
    """Base of every job kind's parameters: strict about unknown keys, finite numbers only (NaN and infinity
    are rejected with the field, they never reach JSON columns)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _describe(err: dict[str, Any]) -> str:
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "extra_forbidden":
        return "unknown parameter"
    return msg.removeprefix("Value error, ")


def violations(exc: ValidationError, *, prefix: str = "", field_paths: Mapping[str, str] | None = None
               ) -> list[FieldViolation]:
    paths = dict(field_paths or {})
    out = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        path = _path(loc) or "params"
        head = str(loc[0]) if loc else ""
        if head in paths:
            path = paths[head] + path[len(head):]
        else:
            path = prefix + path
        out.append(FieldViolation(path, _describe(err)))
    return out


def parse_params(model: type[P], data: Mapping[str, Any] | BaseModel, *, prefix: str = "",
                 field_paths: Mapping[str, str] | None = None) -> P:
    """Validate `data` with `model`; on failure raise InvalidArgument naming each offending field as the request
    spells it (`prefix` + pydantic's location, or `field_paths[top-level name]` + the rest of it)."""
    if isinstance(data, model):
        return data
    raw = data.model_dump() if isinstance(data, BaseModel) else dict(data)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidArgument(violations=violations(exc, prefix=prefix, field_paths=field_paths)) from None


def params_json(params: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    """A job's params (the typed object a job receives, or a dict) as the JSON object submit stored: e.g. to key
    what a checkpoint is valid for."""
    if isinstance(params, BaseModel):
        return params.model_dump(mode="json", exclude_unset=True)
    return dict(params)
