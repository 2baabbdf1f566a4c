"""A service that exists only for the tests (one job kind); processes host it via PRAXON_EXTRA_SERVICES."""
from __future__ import annotations

import hashlib
import time

import torch

from services.common.jobcontext import JobContext
from services.common.spec import JobKind, ServiceSpec


def run_counter(ctx: JobContext) -> dict:
    """Counts steps with a checkpoint after each; records where each run started, so a test can see a
    killed run resume from its checkpoint rather than from zero."""
    steps, delay = int(ctx.params["steps"]), float(ctx.params.get("step_seconds", 0.2))
    state = ctx.load_checkpoint() or {"step": 0, "starts": [], "digest": "seed"}
    state["starts"].append(state["step"])
    for step in range(state["step"], steps):
        ctx.check_cancelled()
        time.sleep(delay)
        state["digest"] = hashlib.sha256(f"{state['digest']}:{step}".encode()).hexdigest()
        state["step"] = step + 1
        ctx.save_checkpoint(state)
        ctx.progress(state["step"] / steps, f"step {state['step']}", step=state["step"])
    ctx.write_artifact("counter.txt", state["digest"].encode(), "text/plain")
    ctx.register_model("counter", {"w": torch.tensor([float(steps)])}, kind="test.counter", config={"steps": steps})
    return {"starts": state["starts"], "digest": state["digest"]}


def expected_digest(steps: int) -> str:
    digest = "seed"
    for step in range(steps):
        digest = hashlib.sha256(f"{digest}:{step}".encode()).hexdigest()
    return digest


SPEC = ServiceSpec(name="test", job_kinds={"test.counter": JobKind("default", "tests.job_kinds:run_counter")})
