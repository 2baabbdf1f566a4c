"""The platform self-test job: checkpointed steps, an artifact and a model version. It exercises every
part of the job system (claim, lease, progress, cancellation, checkpoint/resume, outputs) end to end."""
from __future__ import annotations

import hashlib
import time

import torch

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext, run_steps


class SelfTest:
    """Checkpointed steps of a deterministic hash chain: resuming from a checkpoint gives the same final digest as
    running straight through."""

    def __init__(self, steps: int, step_seconds: float):
        self.total, self.step_seconds = steps, step_seconds

    def setup(self, ctx: JobContext) -> None:
        self.digest = hashlib.sha256(ctx.job_id.encode()).hexdigest()
        self.values = torch.zeros(self.total)

    def step(self, i: int) -> dict[str, float]:
        time.sleep(self.step_seconds)
        self.digest = hashlib.sha256(f"{self.digest}:{i}".encode()).hexdigest()
        self.values[i] = int(self.digest[:8], 16) / 2**32
        return {"step": i + 1}

    def state(self) -> dict:
        return {"digest": self.digest, "values": self.values}

    def load_state(self, state: dict) -> None:
        self.digest, self.values = state["digest"], state["values"]

    def result(self, ctx: JobContext) -> dict:
        report = f"selftest {ctx.job_id}: {self.total} steps, digest {self.digest}\n".encode()
        artifact_id = ctx.write_artifact("selftest-report.txt", report, "text/plain")
        model = ctx.register_model("selftest", {"values": self.values}, kind="selftest",
                                   config={"steps": self.total}, metrics={"mean_value": float(self.values.mean())})
        return {"digest": self.digest, "steps": self.total, "report_artifact_id": artifact_id,
                "model_version_id": model.model_version_id}


def run_selftest(ctx: JobContext) -> dict:
    steps = int(ctx.params.get("steps", 10))
    step_seconds = float(ctx.params.get("step_seconds", 0.1))
    if not 1 <= steps <= 10_000:
        raise InvalidArgument("steps", "must be between 1 and 10000")
    return run_steps(ctx, SelfTest(steps, step_seconds), message=lambda done, total: f"step {done}/{total}")
