"""A service that exists only for the tests; processes host it via PRAXON_EXTRA_SERVICES. test.counter: a resumable
counter (free-form params); test.typed: a kind with a params model and an on_finish hook."""
from __future__ import annotations

import hashlib
import time

import torch
from pydantic import Field

from services.common.jobcontext import JobContext
from services.common.params import JobParams
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


class TypedParams(JobParams):
    steps: int = Field(ge=1, le=100)
    label: str = Field("", max_length=20)


def run_typed(ctx: JobContext) -> dict:
    """Reports what it was given: the typed object of its kind's model, validated at submit."""
    p = ctx.params
    return {"params_type": type(p).__name__, "steps": p.steps, "label": p.label}


HOOK_RAISES = "hook-raises"


def on_typed_finished(conn, job: dict) -> None:
    """test.typed's on_finish: appends what it saw to the job's message, in the finishing transaction (so a test
    sees it committed with the new state, or rolled back with it); with the label HOOK_RAISES it then raises."""
    conn.execute("UPDATE jobs SET message = message || %s WHERE id = %s",
                 (f" [on_finish saw {job['state']}]", job["id"]))
    if job["params"].get("label") == HOOK_RAISES:
        raise RuntimeError("on_finish failed")


SPEC = ServiceSpec(name="test", job_kinds={
    "test.counter": JobKind("default", "tests.job_kinds:run_counter"),
    "test.typed": JobKind("default", "tests.job_kinds:run_typed", params="tests.job_kinds:TypedParams",
                          on_finish="tests.job_kinds:on_typed_finished"),
})
