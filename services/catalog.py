"""The one list of services. Adding a service is adding its folder (services/<name>/__init__.py exports SPEC) and
one line in SPECS; `praxon serve`, the worker, the CLI, the demo, the predictors and the chart tests read it.

Importing this module imports only the services' __init__ modules (no servicer, job, torch or grpc). It is where job
kinds are found (job_kind, job_kinds, queues: read from SPECS at each call, nothing installed elsewhere).
Settings.extra_services adds specs from elsewhere (tests, plugins)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from services import design, generation, moderation, platform, recommendation, unlearning
from services.common.spec import JobKind, ServiceSpec, resolve

if TYPE_CHECKING:  # (pydantic-settings is imported when settings are built, not by `praxon --help`)
    from services.common.settings import Settings as BaseSettings

SPECS: list[ServiceSpec] = [
    platform.SPEC,
    unlearning.SPEC,
    moderation.SPEC,
    recommendation.SPEC,
    design.SPEC,
    generation.SPEC,
]


def add(spec: ServiceSpec) -> None:
    """Host one more service in this process (a plugin, or a test's throwaway service)."""
    known = {s.name: s for s in SPECS}
    if spec.name in known:
        if known[spec.name] is not spec:
            raise ValueError(f"service {spec.name!r} is declared twice")
        return
    twice = sorted(set(spec.job_kinds) & set(job_kinds()))
    if twice:
        raise ValueError(f"job kind {twice[0]!r} of service {spec.name!r} is declared twice")
    SPECS.append(spec)


def load_extra(settings: BaseSettings) -> None:
    """Add the specs named by settings.extra_services ("module:SPEC")."""
    for ref in settings.extra_services:
        add(resolve(ref))


def names() -> list[str]:
    return [s.name for s in SPECS if s.servicers]


def get(name: str) -> ServiceSpec:
    for s in SPECS:
        if s.name == name:
            return s
    raise KeyError(name)


def predictors() -> dict[str, str]:
    return {name: ref for s in SPECS for name, ref in s.predictors.items()}


def job_kinds() -> dict[str, JobKind]:
    """Every job kind of the hosted services: kind -> JobKind."""
    return {name: kind for s in SPECS for name, kind in s.job_kinds.items()}


def job_kind(name: str) -> JobKind | None:
    """The JobKind named `name`, or None when no hosted service declares it."""
    for s in SPECS:
        if name in s.job_kinds:
            return s.job_kinds[name]
    return None


def model_adapter(config: dict):
    """The adapter (a service's SPEC.model_adapters) whose matches(config) accepts a model version's config, or
    None: how one service works on another's models without importing it."""
    for s in SPECS:
        for ref in s.model_adapters.values():
            adapter = resolve(ref)
            if adapter.matches(config):
                return adapter
    return None


def queues() -> tuple[str, ...]:
    """Every queue a known job kind runs on ("default" first): a queue per job class, so operators can size and
    place workers per class (GPU nodes for training, ...)."""
    return tuple(dict.fromkeys(["default", *(k.queue for k in job_kinds().values())]))


def settings_class() -> type[BaseSettings]:
    """Settings with every service's typed section (PRAXON_<SERVICE>__<FIELD>)."""
    from pydantic import Field, create_model

    from services.common.settings import Settings as BaseSettings

    sections = {s.name: (resolve(s.settings), Field(default_factory=resolve(s.settings))) for s in SPECS if s.settings}
    return create_model("Settings", __base__=BaseSettings, **sections)


def settings(**overrides) -> BaseSettings:
    """The process's Settings, from PRAXON_* environment variables (and overrides)."""
    s = settings_class()(**overrides)
    load_extra(s)
    return s
