"""What a service declares about itself: its `ServiceSpec`, exported by `services/<name>/__init__.py` and listed once
in `services/catalog.py`. The server, the worker, the CLI, the demo, the predictors and the chart tests all read that
one list, so adding a service is adding its folder and one line there.

Everything a spec names is a "module:attribute" string, imported only by the process that needs it: the CLI
never imports a servicer (nor torch), the gRPC server never imports a job, a worker never imports a servicer."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


def resolve(ref: str) -> Any:
    """"package.module:attribute" -> the attribute (imports the module)."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected 'package.module:attribute', got {ref!r}")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class JobKind:
    """A kind of long job, declared in its service's spec (services/catalog.py's list is where kinds are found).

    queue      the Celery queue that runs it
    target     "module:function" doing the work, called with a JobContext whose `params` is the typed object
    params     "module:Model" (a services.common.params.JobParams): the job's parameters, validated once, by
               JobStore.submit (a value the job would reject is an INVALID_ARGUMENT naming the field there, never a
               failed job); None: a free-form dict (the tests' throwaway kinds)
    on_finish  "module:function" called as on_finish(conn, job_row) by the job store inside the transaction of every
               terminal transition of a job of this kind (SUCCEEDED, FAILED, CANCELLED: finish, cancel); if it
               raises, the transition rolls back with it. What a service does when its jobs end lives here, in its
               own code, not in a trigger on the shared jobs table."""

    queue: str
    target: str
    params: str | None = None
    on_finish: str | None = None

    def params_model(self) -> type | None:
        return None if self.params is None else resolve(self.params)

    def finish_hook(self) -> Any:
        return None if self.on_finish is None else resolve(self.on_finish)


@dataclass(frozen=True)
class DemoStep:
    """One step of `praxon demo`: a title, and a function called with a services.common.client.Target."""

    title: str
    target: str


@dataclass(frozen=True)
class ServiceSpec:
    """One service: everything the platform needs to host it.

    name        the service's name (`praxon serve NAME`, the chart's services.NAME, the settings section)
    servicers   "module:register": register(server, app) adds the gRPC servicers and returns their full names
    job_kinds   job kind -> JobKind (kinds are named "<service>.<job>"; queue, target, params model, on_finish hook)
    predictors  predictor name -> "module:build": build(settings, tenant_id, model_ref) -> kserve.Model
    cli         module exporting add_commands(subparsers, client_opts) (imports no torch at module level)
    demo        the service's `praxon demo` step, if any
    settings    "module:Model": a pydantic model read from PRAXON_<NAME>__<FIELD> as `settings.<name>`
    model_adapters  adapter name -> "module:attr": model kinds of this service that other services may work on
                without importing it (an object with `name`, `matches(config)` and the kind's operations; e.g.
                moderation's guard heads, which unlearning certifies deletions from); catalog.model_adapter finds one
    migrations  "package": the service's tables are the NNNN_name.sql files in that package's migrations/ folder,
                applied by `praxon migrate` in version order together with common's and every other service's"""

    name: str
    servicers: str | None = None
    job_kinds: dict[str, JobKind] = field(default_factory=dict)
    predictors: dict[str, str] = field(default_factory=dict)
    cli: str | None = None
    demo: DemoStep | None = None
    settings: str | None = None
    model_adapters: dict[str, str] = field(default_factory=dict)
    migrations: str | None = None

    def __post_init__(self) -> None:
        for kind in self.job_kinds:
            if not kind.startswith(self.name + "."):
                raise ValueError(f"job kind {kind!r} of service {self.name!r} must start with {self.name + '.'!r}")


def service_settings(settings: Any, spec_name: str, model: type) -> Any:
    """The typed settings section of a service: `settings.<name>` when the process's Settings carries it (every
    process built by services.catalog.settings() does), else the model's defaults."""
    section = getattr(settings, spec_name, None)
    return section if isinstance(section, model) else model()
