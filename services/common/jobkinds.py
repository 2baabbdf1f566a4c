"""The job kinds this process knows: which queue runs each and which function does the work. Filled from the
service specs by services.catalog (common names no service); JobStore and the worker runner look kinds up here."""
from __future__ import annotations

from collections.abc import Mapping

from services.common.spec import JobKind

JOB_KINDS: dict[str, JobKind] = {}


def install(kinds: Mapping[str, JobKind]) -> None:
    for name, kind in kinds.items():
        known = JOB_KINDS.get(name)
        if known is not None and known != kind:
            raise ValueError(f"job kind {name!r} is declared twice ({known} and {kind})")
        JOB_KINDS[name] = kind


def queues() -> tuple[str, ...]:
    """Every queue a known job kind runs on ("default" first): a queue per job class, so operators can size and
    place workers per class (GPU nodes for training, ...)."""
    return tuple(dict.fromkeys(["default", *(k.queue for k in JOB_KINDS.values())]))
