"""run_steps: a job killed mid-run resumes from its checkpoint and ends where an uninterrupted run ends."""
import pytest
import torch

from services.common.errors import Cancelled
from services.common.jobcontext import InMemoryJobContext, run_steps


class Descent:
    """Gradient descent on a quadratic, one step per step: the loss curve is deterministic."""

    def __init__(self, total):
        self.total = total

    def setup(self, ctx):
        self.w = torch.tensor([3.0, -2.0])
        self.losses = []

    def step(self, i):
        loss = float((self.w ** 2).sum())
        self.w = self.w * 0.9
        self.losses.append(loss)
        return {"loss": loss}

    def state(self):
        return {"w": self.w, "losses": torch.tensor(self.losses)}

    def load_state(self, state):
        self.w, self.losses = state["w"], state["losses"].tolist()

    def result(self, ctx):
        info = ctx.register_model("quad", {"w": self.w}, kind="test", config={})
        return {"losses": self.losses, "model_version_id": info.model_version_id, "version": info.version}


def test_kill_and_resume_continues_the_loss_curve():
    full = InMemoryJobContext(params={})
    ref = run_steps(full, Descent(10), checkpoint_every=2)
    ctx = InMemoryJobContext(params={}, cancel_after_progress=5)
    with pytest.raises(Cancelled):
        run_steps(ctx, Descent(10), checkpoint_every=2)
    assert ctx.load_checkpoint()["done"] == 4 and not ctx.models  # nothing published by the killed run
    ctx.cancel_after_progress = None
    res = run_steps(ctx, Descent(10), checkpoint_every=2)
    torch.testing.assert_close(torch.tensor(res["losses"]), torch.tensor(ref["losses"]))
    assert [e[2]["loss"] for e in ctx.events[-6:]] == pytest.approx(ref["losses"][4:])
    assert 0 < ctx.events[0][0] < ctx.events[-1][0] <= 0.99
    assert res["version"] is None  # as in the worker: assigned when the job succeeds


def test_a_checkpoint_of_another_kind_is_not_resumed():
    ctx = InMemoryJobContext(params={}, kind="a")
    run_steps(ctx, Descent(3))
    ctx.kind = "b"
    assert len(run_steps(ctx, Descent(3))["losses"]) == 3 and len(ctx.events) == 6


def test_a_checkpoint_with_another_fingerprint_is_not_resumed():
    """A job's inputs that changed between the crash and the resume (e.g. packaged data replaced by an upgrade):
    the steps start over; the same fingerprint resumes."""
    for fingerprint, steps_after_resume in (("data-v1", 2), ("data-v2", 5)):
        ctx = InMemoryJobContext(params={}, cancel_after_progress=3)
        with pytest.raises(Cancelled):
            run_steps(ctx, Descent(5), fingerprint="data-v1")
        ctx.cancel_after_progress = None
        assert len(run_steps(ctx, Descent(5), fingerprint=fingerprint)["losses"]) == 5
        assert len(ctx.events) == 3 + steps_after_resume
