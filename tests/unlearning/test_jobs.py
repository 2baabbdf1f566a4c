"""The jobs end to end on InMemoryJobContext: train -> unlearn -> audit; resume; bad input."""
import json
from dataclasses import dataclass

import pytest
import torch

from services.common.errors import Cancelled, FailedPrecondition, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.common.state import loads_state
from services.unlearning import approximate, jobs
from services.unlearning.data import encode_dataset

from .helpers import blob_split, ctx_with_data

TRAIN = {"kind": "logreg_l2", "mu": 0.01, "r": 1e-3, "epsilon": 1.0, "delta": 1e-5, "seed": 0,
         "name": "guard-head", "checkpoint_every": 20}


def _trained(**extra):
    ctx, ds, ev, ids = ctx_with_data()
    ctx.params = dict(TRAIN, dataset_artifact_id=ds, eval_dataset_artifact_id=ev, **extra)
    out = jobs.run_training(ctx)
    return ctx, ds, ev, ids, out


def _report(ctx, aid):
    return json.loads(ctx.artifacts[aid][1])


def _private(ctx, res):
    """The pre-noise parameters a job kept in its private state artifact."""
    config = ctx.models[res["model_version_id"]][2]
    return loads_state(ctx.artifacts[config["state_artifact_id"]][1])["theta_private"]


@pytest.fixture(scope="module")
def trained():
    return _trained()


def test_training_registers_a_certified_noisy_model(trained):
    ctx, ds, ev, ids, out = trained
    info, tensors, config, lineage = ctx.models[out["model_version_id"]]
    assert set(tensors) == {"W", "b"} and tensors["W"].shape == (1, 20)
    assert config["kind"] == "logreg_l2" and config["state_artifact_id"] in ctx.artifacts
    assert ctx.artifacts[config["state_artifact_id"]][3]["visibility"] == "private"
    assert lineage["dataset_artifact_id"] == ds
    cert = out["certificate"]
    assert cert["certified"] and cert["final_grad_norm"] <= 0.01 * 1e-3
    assert out["metrics"]["eval_accuracy"] > 0.7
    assert _report(ctx, out["report_artifact_id"])["certificate"] == cert


def test_certified_unlearning_job(trained):
    ctx, ds, ev, ids, out = trained
    ctx.params = {"model_version_id": out["model_version_id"], "forget_record_ids": ids[:15],
                  "method": "certified_noisy_minimizer", "seed": 1, "eval_dataset_artifact_id": ev}
    res = jobs.run_unlearning(ctx)
    info, tensors, config, lineage = ctx.models[res["model_version_id"]]
    assert lineage["parent_version_ids"] == [out["model_version_id"]]
    assert config["excluded_record_ids"] == ids[:15]
    assert res["certified"] and res["regime"]["regime"] == "in_distribution" and res["regime"]["start"] == "warm"
    assert res["costs"]["descent_grad_evals"] < out["costs"]["grad_evals"]
    rep = _report(ctx, res["report_artifact_id"])
    assert rep["forget_count"] == 15 and rep["retain_count"] == 1485
    assert rep["mia_auc"]["before"] is not None and rep["mia_auc"]["after"] is not None
    # a second request cannot forget the same records again, but can forget others
    ctx.params = dict(ctx.params, model_version_id=res["model_version_id"])
    with pytest.raises(InvalidArgument) as e:
        jobs.run_unlearning(ctx)
    assert e.value.violations[0].field == "forget_record_ids"
    ctx.params["forget_record_ids"] = ids[15:20]
    res2 = jobs.run_unlearning(ctx)
    assert ctx.models[res2["model_version_id"]][2]["excluded_record_ids"] == ids[:20]
    assert res2["regime"]["start"] == "warm" and res2["regime"]["start_source"] == "private_state"

    # audit the unlearned version against retraining
    ctx.params = {"model_version_id": res2["model_version_id"], "runs": 400, "seed": 0,
                  "eval_dataset_artifact_id": ev, "original_model_version_id": out["model_version_id"]}
    a = jobs.run_audit(ctx)
    assert a["pre_noise_distance"] <= a["sensitivity_bound"]
    assert a["epsilon_audit"]["eps_lower"] <= a["claimed"]["epsilon"] and not a["epsilon_audit"]["violated"]
    assert abs(a["utility"]["eval_gap"]["accuracy"]) <= 0.01
    # forgotten records are tombstoned: the audit's reader no longer yields them, so membership inference on
    # them is measured by the unlearning job itself (before its tombstones commit), not by a later audit
    assert "mia_auc" not in a
    assert set(_report(ctx, res2["report_artifact_id"])["mia_auc"]) == {"before", "after"}
    assert a["unlearning_cost"]["grad_evals"] < a["retrain_cost"]["grad_evals"]


def test_forget_set_artifact(trained):
    ctx, ds, ev, ids, out = trained
    fs = ctx.add_artifact(json.dumps({"record_ids": ids[100:110]}).encode(), name="forget.json")
    ctx.params = {"model_version_id": out["model_version_id"], "forget_set_artifact_id": fs,
                  "method": "certified_noisy_minimizer"}
    res = jobs.run_unlearning(ctx)
    excluded = ctx.models[res["model_version_id"]][2]["excluded_record_ids"]
    # this request's records, plus any tombstoned by earlier requests (the reader drops them too)
    assert excluded[-10:] == ids[100:110] and set(excluded) == ctx.forgotten_records(ds)


@pytest.mark.parametrize("bad,field", [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1}, "epsilon"), ({"delta": 1.0}, "delta"),
    ({"delta": 0}, "delta"), ({"forget_record_ids": ["rec-1", "nope"]}, "forget_record_ids"),
    ({"forget_record_ids": []}, "forget_record_ids"), ({"method": "magic"}, "method"),
])
def test_bad_input(trained, bad, field):
    ctx, ds, ev, ids, out = trained
    ctx.params = dict({"model_version_id": out["model_version_id"], "forget_record_ids": ids[:3],
                       "method": "certified_noisy_minimizer"}, **bad)
    with pytest.raises(InvalidArgument) as e:
        jobs.run_unlearning(ctx)
    assert e.value.violations[0].field == field


def test_non_convex_kind_needs_uncertified_method(trained):
    ctx, ds, ev, ids, out = trained
    m = approximate.MLPClassifier(20, [8], 2)
    fresh = ctx.add_artifact(ctx.artifacts[ds][1], name="copy")  # no tombstones from the other tests
    info = ctx.register_model("pd", approximate.module_tensors(m), kind="preferdiff",
                              config={"kind": "preferdiff", "dataset_artifact_id": fresh})
    ctx.params = {"model_version_id": info.model_version_id, "forget_record_ids": ids[:3],
                  "method": "certified_noisy_minimizer"}
    with pytest.raises(FailedPrecondition, match="model kind 'preferdiff' is non-convex: use method noisy_finetune"):
        jobs.run_unlearning(ctx)
    ctx.params["method"] = "noisy_finetune"
    with pytest.raises(FailedPrecondition, match="no torch module builder"):
        jobs.run_unlearning(ctx)


def test_robust_certified_requires_robust_training(trained):
    ctx, ds, ev, ids, out = trained
    ctx.params = {"model_version_id": out["model_version_id"], "forget_record_ids": ids[:3],
                  "method": "robust_certified"}
    with pytest.raises(FailedPrecondition, match="not trained robustly"):
        jobs.run_unlearning(ctx)


def test_killed_unlearning_job_resumes_to_the_same_result(trained):
    ctx0, ds, ev, ids, out = trained
    params = {"model_version_id": out["model_version_id"], "forget_record_ids": ids[200:215],
              "method": "certified_noisy_minimizer", "seed": 4, "checkpoint_every": 10}
    full = InMemoryJobContext(params=params, artifacts=dict(ctx0.artifacts), models=dict(ctx0.models))
    ref = jobs.run_unlearning(full)
    ctx = InMemoryJobContext(params=params, artifacts=dict(ctx0.artifacts), models=dict(ctx0.models),
                             cancel_after_progress=3)
    with pytest.raises(Cancelled):
        jobs.run_unlearning(ctx)
    assert ctx.checkpoints_saved >= 3 and len(ctx.models) == len(ctx0.models)
    assert loads_state(ctx.checkpoint)["state"]["descent"]["gd"]["step"] == 30
    ctx.cancel_after_progress = None
    res = jobs.run_unlearning(ctx)
    # the same descent; the published noise is a fresh secret draw of each (uninterrupted) job
    torch.testing.assert_close(_private(ctx, res), _private(full, ref))
    assert res["certificate"] == ref["certificate"]
    assert res["costs"]["grad_evals"] == ref["costs"]["grad_evals"]


class _KilledAtPublish(InMemoryJobContext):
    """Dies (like a worker under kill -9) at its first attempt to publish, after the noise was drawn."""
    kills_left: int = 1

    def register_model(self, *a, **kw):
        if self.kills_left:
            self.kills_left -= 1
            raise SystemExit("killed")
        return super().register_model(*a, **kw)


@pytest.mark.parametrize("job", ["train", "unlearn"])
def test_a_job_killed_after_drawing_its_noise_publishes_that_draw_once(trained, job):
    ctx0, ds, ev, ids, out = trained
    if job == "train":
        params, run = dict(TRAIN, dataset_artifact_id=ds), jobs.run_training
    else:
        params, run = {"model_version_id": out["model_version_id"], "forget_record_ids": ids[300:310],
                       "method": "certified_noisy_minimizer"}, jobs.run_unlearning
    ctx = _KilledAtPublish(params=params, artifacts=dict(ctx0.artifacts), models=dict(ctx0.models),
                           tombstones={k: set(v) for k, v in ctx0.tombstones.items()})
    with pytest.raises(SystemExit):
        run(ctx)
    kept = loads_state(ctx.checkpoint)["state"]["unit_noise"]
    n_models = len(ctx.models)
    res = run(ctx)
    assert len(ctx.models) == n_models + 1  # one release
    published = ctx.models[res["model_version_id"]][1]
    theta = torch.cat([published["W"].reshape(-1), published["b"].reshape(-1)]).double()
    sigma = res["certificate"]["sigma"]
    torch.testing.assert_close(theta, (_private(ctx, res) + sigma * kept).to(theta.dtype))


@dataclass
class _CancelledAtCheck(InMemoryJobContext):
    """Cancelled at its (checks + 1)-th check_cancelled call: run_steps checks before every step, so the job stops
    after `checks` steps, with the checkpoint of the last one saved."""
    checks: int = 0

    def check_cancelled(self):
        self.checks -= 1
        if self.checks < 0:
            raise Cancelled("job cancelled")


@pytest.mark.parametrize("chunks", [1, 3])
def test_training_interrupted_after_a_chunk_resumes_to_the_uninterrupted_descent(chunks):
    ctx0, ds, ev, ids = ctx_with_data()
    params = dict(TRAIN, dataset_artifact_id=ds, checkpoint_every=5)
    full = InMemoryJobContext(params=params, artifacts=dict(ctx0.artifacts))
    ref = jobs.run_training(full)
    assert ref["certificate"]["steps"] > 5 * (chunks + 1)  # the descent takes more chunks than the kill point
    # chunks cost nothing extra: one full gradient per iteration plus the final stopping test
    assert ref["costs"]["grad_evals"] == (ref["certificate"]["steps"] + 1) * len(ids)
    killed = _CancelledAtCheck(params=params, artifacts=dict(ctx0.artifacts), checks=chunks)
    with pytest.raises(Cancelled):
        jobs.run_training(killed)
    saved = loads_state(killed.checkpoint)
    assert saved["done"] == chunks and saved["state"]["descent"]["gd"]["step"] == 5 * chunks
    assert saved["state"]["unit_noise"] is None and not killed.models
    # a fresh worker: only the saved checkpoint carries over
    resumed = InMemoryJobContext(params=params, artifacts=dict(ctx0.artifacts), checkpoint=killed.checkpoint)
    res = jobs.run_training(resumed)
    assert torch.equal(_private(resumed, res), _private(full, ref))  # the same theta before noise
    assert res["costs"]["grad_evals"] == ref["costs"]["grad_evals"]
    assert res["certificate"] == ref["certificate"]
    # it resumed (did not start over): only the remaining chunks ran
    steps_of = lambda c: [m for _, m, _ in c.events if m.startswith("erm: step")]  # noqa: E731
    assert len(steps_of(resumed)) == len(steps_of(full)) - chunks
    assert steps_of(resumed)[0] == f"erm: step {5 * (chunks + 1)}"


def test_two_trainings_with_identical_inputs_publish_different_weights():
    ctx0, ds, ev, ids = ctx_with_data()
    runs = []
    for _ in range(2):  # two jobs: each has its own (empty) checkpoint
        ctx = InMemoryJobContext(params=dict(TRAIN, dataset_artifact_id=ds), artifacts=dict(ctx0.artifacts))
        runs.append((ctx, jobs.run_training(ctx)))
    (ca, a), (cb, b) = runs
    torch.testing.assert_close(_private(ca, a), _private(cb, b))
    assert not torch.equal(ca.models[a["model_version_id"]][1]["W"], cb.models[b["model_version_id"]][1]["W"])


def test_killed_training_job_resumes_robust_and_erm_phases():
    ctx0, ds, ev, ids = ctx_with_data()
    params = dict(TRAIN, dataset_artifact_id=ds, capacity=15, checkpoint_every=10, robust_noise_std=1e-3,
                  robust_max_steps=300)
    full = InMemoryJobContext(params=params, artifacts=dict(ctx0.artifacts))
    ref = jobs.run_training(full)
    for kill_at, phase in ((2, "robust"), (33, "erm")):  # 30 robust-phase events, then ERM
        ctx = InMemoryJobContext(params=params, artifacts=dict(ctx0.artifacts), cancel_after_progress=kill_at)
        with pytest.raises(Cancelled):
            jobs.run_training(ctx)
        assert loads_state(ctx.checkpoint)["state"]["phase"] == phase
        ctx.cancel_after_progress = None
        res = jobs.run_training(ctx)
        torch.testing.assert_close(_private(ctx, res), _private(full, ref))
        assert res["costs"]["grad_evals"] == ref["costs"]["grad_evals"]
    # the robust model forgets arbitrary points with robust_certified, within its capacity
    full.params = {"model_version_id": ref["model_version_id"], "forget_record_ids": ids[:10],
                   "method": "robust_certified"}
    r1 = jobs.run_unlearning(full)
    cfg = full.models[r1["model_version_id"]][2]
    assert cfg["robust"]["removed"] == 10 and r1["certified"]
    full.params = {"model_version_id": r1["model_version_id"], "forget_record_ids": ids[10:20],
                   "method": "robust_certified"}
    with pytest.raises(FailedPrecondition, match="capacity exhausted"):
        jobs.run_unlearning(full)


def test_approximate_job_on_mlp_resumes():
    (X, y), (Xe, ye) = blob_split(600, 10, 3, n_eval=300)
    ctx = InMemoryJobContext(params={})
    ids = [f"r{i}" for i in range(600)]
    ds = ctx.add_artifact(encode_dataset(X.float() * 3, y, ids))
    ev = ctx.add_artifact(encode_dataset(Xe.float() * 3, ye))
    m = approximate.MLPClassifier(10, [16], 3)
    approximate.sgd(m, torch.nn.functional.cross_entropy, X.float() * 3, y, steps=200, lr=0.5, batch_size=64, seed=0)
    info = ctx.register_model("mlp", approximate.module_tensors(m), kind="mlp_classifier",
                              config={"kind": "mlp_classifier", "feature_dim": 10, "hidden": [16], "num_classes": 3,
                                      "dataset_artifact_id": ds})
    params = {"model_version_id": info.model_version_id, "forget_record_ids": ids[:30], "method": "noisy_finetune",
              "steps": 60, "lr": 0.1, "batch_size": 32, "noise_std": 1e-3, "seed": 2, "checkpoint_every": 10,
              "eval_dataset_artifact_id": ev}
    full = InMemoryJobContext(params=params, artifacts=dict(ctx.artifacts), models=dict(ctx.models))
    ref = jobs.run_unlearning(full)
    assert ref["certified"] is False and ref["costs"]["grad_evals"] == 60 * 32
    killed = InMemoryJobContext(params=params, artifacts=dict(ctx.artifacts), models=dict(ctx.models),
                                cancel_after_progress=2)
    with pytest.raises(Cancelled):
        jobs.run_unlearning(killed)
    killed.cancel_after_progress = None
    res = jobs.run_unlearning(killed)
    for k, v in full.models[ref["model_version_id"]][1].items():
        torch.testing.assert_close(killed.models[res["model_version_id"]][1][k], v)
    rep = json.loads(full.artifacts[ref["report_artifact_id"]][1])
    assert rep["certified"] is False and "uncertified" in rep["approximate"]["note"]
    assert set(rep["mia_auc"]) == {"before", "after"}


def test_moderation_frozen_linear_head_is_certified_with_a_given_mu():
    ctx, ds, ev, ids = ctx_with_data(num_classes=3)
    W, b = torch.zeros(3, 20), torch.zeros(3)
    info = ctx.register_model("guard", {"W": W, "b": b}, kind="frozen_linear",
                              config={"kind": "frozen_linear", "dataset_artifact_id": ds})
    ctx.params = {"model_version_id": info.model_version_id, "forget_record_ids": ids[:5],
                  "method": "certified_noisy_minimizer", "epsilon": 1.0, "delta": 1e-5}
    with pytest.raises(FailedPrecondition, match="mu"):
        jobs.run_unlearning(ctx)
    ctx.params["mu"] = 0.01
    res = jobs.run_unlearning(ctx)
    cfg = ctx.models[res["model_version_id"]][2]
    assert res["certified"] and res["regime"]["start_source"] == "published_weights"
    assert cfg["kind"] == "frozen_linear" and cfg["mu"] == 0.01 and cfg["num_classes"] == 3
    assert ctx.models[res["model_version_id"]][1]["W"].shape == (3, 20)
