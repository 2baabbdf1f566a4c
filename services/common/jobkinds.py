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
    "unlearning.train": JobKind("training", "services.unlearning.jobs:run_training"),
    "unlearning.unlearn": JobKind("unlearning", "services.unlearning.jobs:run_unlearning"),
    "unlearning.audit": JobKind("audit", "services.unlearning.jobs:run_audit"),
    "moderation.train_guard": JobKind("training", "services.moderation.jobs:run_guard_training"),
    "moderation.train_policy_scorer": JobKind("training", "services.moderation.jobs:run_policy_scorer_training"),
    "moderation.calibrate": JobKind("calibration", "services.moderation.jobs:run_calibration"),
    "moderation.distill": JobKind("distillation", "services.moderation.jobs:run_distillation"),
    "recommendation.import": JobKind("default", "services.recommendation.jobs:run_import"),
    "recommendation.train": JobKind("training", "services.recommendation.jobs:run_training"),
}


def register_kind(name: str, queue: str, target: str) -> None:
    if queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}; known: {', '.join(QUEUES)}")
    JOB_KINDS[name] = JobKind(queue, target)
