"""The platform self-test job: checkpointed steps, an artifact and a model version. It exercises every
part of the job system (claim, lease, progress, cancellation, checkpoint/resume, outputs) end to end."""
from __future__ import annotations

import hashlib
import time

import torch

from services.common.errors import InvalidArgument
from services.common.jobcontext import JobContext


def run_selftest(ctx: JobContext) -> dict:
    steps = int(ctx.params.get("steps", 10))
    step_seconds = float(ctx.params.get("step_seconds", 0.1))
    if not 1 <= steps <= 10_000:
        raise InvalidArgument("steps", "must be between 1 and 10000")
    state = ctx.load_checkpoint() or {"step": 0, "digest": hashlib.sha256(ctx.job_id.encode()).hexdigest(),
                                      "values": torch.zeros(steps)}
    for step in range(state["step"], steps):
        ctx.check_cancelled()
        time.sleep(step_seconds)
        # A deterministic chain: resuming from a checkpoint gives the same final digest as running straight.
        state["digest"] = hashlib.sha256(f"{state['digest']}:{step}".encode()).hexdigest()
        state["values"][step] = int(state["digest"][:8], 16) / 2**32
        state["step"] = step + 1
        ctx.save_checkpoint(state)
        ctx.progress(state["step"] / steps, f"step {state['step']}/{steps}", step=state["step"])
    report = f"selftest {ctx.job_id}: {steps} steps, digest {state['digest']}\n".encode()
    artifact_id = ctx.write_artifact("selftest-report.txt", report, "text/plain")
    model = ctx.register_model("selftest", {"values": state["values"]}, kind="selftest",
                               config={"steps": steps}, metrics={"mean_value": float(state["values"].mean())})
    return {"digest": state["digest"], "steps": steps, "report_artifact_id": artifact_id,
            "model_version_id": model.model_version_id}
