"""Every job kind: which queue runs it and which function does the work ("module:function", imported
by the worker only). Services start jobs by kind; workers run them; tests may register their own."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobKind:
    queue: str
    target: str  # "package.module:function", called with a JobContext


# A queue per job class, so operators can size and place workers per class (GPU nodes for training...).
QUEUES = ("default", "training", "distillation", "calibration", "unlearning", "audit")

JOB_KINDS: dict[str, JobKind] = {
    "platform.selftest": JobKind("default", "services.platform.jobs:run_selftest"),
}


def register_kind(name: str, queue: str, target: str) -> None:
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; known: {', '.join(QUEUES)}")
    JOB_KINDS[name] = JobKind(queue, target)
