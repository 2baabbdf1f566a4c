"""The flows part's jobs on InMemoryJobContext (no Celery): registered flows and predictors, guided sampling with
its artifacts and statistics, checkpoint/resume equal to an uninterrupted run, cancellation, bad parameters."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from services.common.errors import Cancelled, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.design.flows import geometry as so3
from services.design.flows.jobs import run_sampling, run_train_flow, run_train_predictor
from services.design.flows.models import build_flow


def _train(params: dict, kind: str = "design.flows.train") -> tuple[InMemoryJobContext, dict]:
    ctx = InMemoryJobContext(params=params, kind=kind)
    return ctx, run_train_flow(ctx)


def _sample(ctx: InMemoryJobContext, flow_id: str, geometry: str, dim: int, **kw) -> dict:
    ctx.params = {"flow_version_id": flow_id, "geometry": geometry, "dim": dim, **kw}
    ctx.kind, ctx.checkpoint, ctx.events = "design.flows.sample", None, []
    return run_sampling(ctx)


DIST = [{"kind": "distance", "target": [4.0, 0.0]}]


def test_analytic_flow_guided_sampling_writes_samples_plot_and_statistics():
    ctx, res = _train({"name": "ring", "method": "analytic", "builtin": "gmm2d"})
    info, tensors, config, lineage = ctx.models[res["model_version_id"]]
    assert config["arch"] == "analytic_gmm" and lineage["kind"] == "design.flows.flow" and info.version is None
    out = _sample(ctx, res["model_version_id"], "euclidean", 2, reward=DIST, control_cost=0.05, steps=20,
                  iterations=25, num_samples=96, learning_rate=0.1)
    per = out["per_iteration"]
    assert len(per["reward"]) == 26 and len(ctx.events) == 25  # before + one row per iteration; one event each
    assert out["reward_after"] > out["reward_before"] + 10 and 0.94 <= out["on_support_before"] <= 0.96
    assert out["on_support_after"] >= 0.95
    name, blob, ctype, meta = ctx.artifacts[out["samples_artifact_id"]]
    samples = st_load(blob)
    assert ctype == "application/vnd.safetensors" and meta["method"] == "oc_flow"
    assert samples["samples"].shape == (96, 2) and samples["unguided"].shape == (96, 2)
    png = ctx.artifacts[out["plot_artifact_id"]]
    assert png[2] == "image/png" and png[1][:8] == b"\x89PNG\r\n\x1a\n"


def test_unguided_sampling_is_the_plain_sampler():
    ctx, res = _train({"name": "ring", "method": "analytic", "builtin": "gmm2d"})
    out = _sample(ctx, res["model_version_id"], "euclidean", 2, method="unguided", steps=10, num_samples=32)
    s = st_load(ctx.artifacts[out["samples_artifact_id"]][1])
    assert torch.equal(s["samples"], s["unguided"]) and out["iterations"] == 0


def test_flow_training_resumes_from_its_checkpoint_like_an_uninterrupted_run():
    params = {"name": "ring-cfm", "builtin": "gmm2d", "steps": 40, "batch_size": 64, "hidden": 32, "layers": 2,
              "num_data": 512, "seed": 3}
    _, straight = _train(params)
    ctx = InMemoryJobContext(params=params, kind="design.flows.train", cancel_after_progress=17)
    with pytest.raises(Cancelled):
        run_train_flow(ctx)
    assert ctx.checkpoints_saved == 8  # every 2 steps (steps // 20), up to the 16th step
    ctx.cancel_after_progress = None
    resumed = run_train_flow(ctx)
    assert len(ctx.events) == 17 + 24  # steps 17..40 after the resume (step 17 is redone from checkpoint 16)
    assert resumed["final_loss"] == pytest.approx(straight["final_loss"], rel=1e-6)
    a = ctx.models[resumed["model_version_id"]][1]
    ctx2, again = _train(params)
    b = ctx2.models[again["model_version_id"]][1]
    for k in a:
        torch.testing.assert_close(a[k], b[k])


def test_guided_sampling_resumes_after_cancel_with_the_same_result():
    ctx, res = _train({"name": "ring", "method": "analytic", "builtin": "gmm2d"})
    kw = dict(reward=DIST, control_cost=0.5, steps=10, iterations=6, num_samples=32, learning_rate=0.1,
              method="flowgrad")
    straight = _sample(ctx, res["model_version_id"], "euclidean", 2, **kw)
    ctx.params = {"flow_version_id": res["model_version_id"], "geometry": "euclidean", "dim": 2, **kw}
    ctx.checkpoint, ctx.events, ctx.cancel_after_progress = None, [], 3
    with pytest.raises(Cancelled):
        run_sampling(ctx)
    ctx.cancel_after_progress = None
    resumed = run_sampling(ctx)
    assert resumed["per_iteration"] == straight["per_iteration"]
    a = st_load(ctx.artifacts[resumed["samples_artifact_id"]][1])["samples"]
    b = st_load(ctx.artifacts[straight["samples_artifact_id"]][1])["samples"]
    assert torch.equal(a, b)


def test_so3_flow_and_guided_rotations_stay_on_the_group():
    ctx, res = _train({"name": "rot", "builtin": "so3_mixture", "steps": 30, "batch_size": 64, "hidden": 32,
                       "layers": 2, "num_data": 256})
    assert res["geometry"] == "so3" and ctx.models[res["model_version_id"]][2]["arch"] == "so3_mlp"
    out = _sample(ctx, res["model_version_id"], "so3", 3, reward=[{"kind": "distance", "target": [0, 0, 0.38, 0.92]}],
                  control_cost=0.1, steps=10, iterations=5, num_samples=32, learning_rate=0.2)
    per = out["per_iteration"]
    assert max(per["orthogonality_error"]) < 1e-6 and max(per["det_error"]) < 1e-6
    assert out["reward_after"] > out["reward_before"]
    q = st_load(ctx.artifacts[out["samples_artifact_id"]][1])["quaternions"]
    assert q.shape == (32, 4) and torch.allclose(q.norm(dim=1), torch.ones(32), atol=1e-5)
    # on-support on SO(3) scores against an independent unguided draw (no sample against itself): the unguided
    # set's own figure is a measurement near the 0.95 the threshold is set at, not 1.0 by construction
    plain = _sample(ctx, res["model_version_id"], "so3", 3, method="unguided", steps=10, num_samples=400, seed=3)
    assert 0.88 <= plain["on_support_before"] <= 0.99, plain["on_support_before"]
    for method in ("d_flow", "flowgrad"):
        other = _sample(ctx, res["model_version_id"], "so3", 3, method=method, control_cost=0.0,
                        reward=[{"kind": "distance", "target": [0, 0, 0.38, 0.92]}], steps=10, iterations=3,
                        num_samples=32, learning_rate=0.2)
        assert max(other["per_iteration"]["orthogonality_error"]) < 1e-6
        assert other["reward_after"] > other["reward_before"]


def test_so3_efm_flow_trains_through_the_job_and_samples_lower_energy():
    """EFM on SO(3) as a job: energy ||R - C||_F^2 / 2 with C given as a quaternion; the registered flow, sampled
    without guidance, has a lower mean energy than the unweighted flow trained alike (the distance reward on SO(3)
    toward C is -E, so the statistics report it)."""
    centre = [0.0, 0.0, 0.38268343, 0.92387953]
    common = {"builtin": "so3_mixture", "steps": 150, "batch_size": 128, "hidden": 32, "layers": 2, "num_data": 1024}
    energy = {}
    for name, extra in (("efm", {"method": "efm", "energy_center": centre, "beta": 2.0}), ("cfm", {})):
        ctx, res = _train({"name": f"rot-{name}", **common, **extra})
        cfg = ctx.models[res["model_version_id"]][2]
        assert res["geometry"] == "so3" and cfg["method"] == name
        if name == "efm":
            assert cfg["energy_center"] == centre and cfg["beta"] == 2.0
        out = _sample(ctx, res["model_version_id"], "so3", 3, method="unguided", steps=10, num_samples=256,
                      reward=[{"kind": "distance", "target": centre}])
        energy[name] = -out["reward_before"]
    assert energy["efm"] < 0.7 * energy["cfm"], energy


def test_predictor_reward_and_efm_flow():
    ctx = InMemoryJobContext(params={"name": "x0", "builtin": "gmm2d", "steps": 150, "num_data": 512},
                             kind="design.flows.train_predictor")
    pred = run_train_predictor(ctx)
    assert pred["train_r2"] > 0.9 and ctx.models[pred["model_version_id"]][3]["kind"] == "design.flows.predictor"
    ctx2 = InMemoryJobContext(params={"name": "ring", "method": "analytic", "builtin": "gmm2d"})
    res = run_train_flow(ctx2)
    ctx2.models.update(ctx.models)  # the predictor, registered by the other job
    out = _sample(ctx2, res["model_version_id"], "euclidean", 2,
                  reward=[{"kind": "predictor", "predictor_version_id": pred["model_version_id"], "weight": 1.0}],
                  control_cost=0.1, steps=10, iterations=5, num_samples=64, learning_rate=0.2)
    assert out["reward_after"] > out["reward_before"] + 0.5  # the predicted first coordinate rises
    ectx, efm = _train({"name": "ring-efm", "method": "efm", "builtin": "gmm2d", "energy_center": [4.0, 0.0],
                        "beta": 0.5, "steps": 5, "hidden": 16, "layers": 1, "num_data": 64})
    cfg = ectx.models[efm["model_version_id"]][2]
    assert cfg["method"] == "efm" and cfg["beta"] == 0.5 and cfg["energy_center"] == [4.0, 0.0]
    assert build_flow(*list(ectx.models[efm["model_version_id"]][1:3])).dim == 2


def test_dataset_artifacts_train_flows_and_bad_parameters_name_their_field():
    x = torch.randn(64, 3)
    ctx = InMemoryJobContext(params={}, kind="design.flows.train")
    aid = ctx.add_artifact(st_save({"x": x}))
    ctx.params = {"name": "vec", "dataset_artifact_id": aid, "steps": 3, "hidden": 8, "layers": 1}
    assert run_train_flow(ctx)["dim"] == 3
    qid = ctx.add_artifact(st_save({"quaternions": so3.to_quat(so3.uniform(16, torch.Generator().manual_seed(0)))}))
    ctx.params, ctx.checkpoint = {"name": "rot", "dataset_artifact_id": qid, "steps": 2, "hidden": 8, "layers": 1}, None
    assert run_train_flow(ctx)["geometry"] == "so3"
    bad_id = ctx.add_artifact(b"not safetensors")
    cases = [
        ({"name": "v", "dataset_artifact_id": bad_id}, "dataset_artifact_id", run_train_flow),
        ({"name": "v", "builtin": "gmm2d", "steps": 0}, "params.steps", run_train_flow),
        ({"name": "v", "builtin": "gmm2d", "method": "efm", "energy_center": [1.0]}, "params.energy_center",
         run_train_flow),
        ({"name": "v", "builtin": "so3_mixture", "method": "efm", "energy_center": [0.0, 0.0, 1.0]},
         "params.energy_center", run_train_flow),
        ({"name": "v", "builtin": "so3_mixture", "method": "efm", "energy_center": [0.0] * 4},
         "params.energy_center", run_train_flow),
        ({"flow_version_id": "x", "geometry": "euclidean", "dim": 2, "reward": DIST, "control_cost": float("nan")},
         "params.control_cost", run_sampling),
        ({"flow_version_id": "x", "geometry": "euclidean", "dim": 2, "reward": DIST, "steps": -1}, "params.steps",
         run_sampling),
        ({"flow_version_id": "x", "geometry": "euclidean", "dim": 2, "reward": [{"kind": "magic"}]},
         "params.reward[0].kind", run_sampling),
        ({"flow_version_id": "x", "geometry": "euclidean", "dim": 2, "reward": [{"kind": "distance", "target": [1]}]},
         "reward[0].target", run_sampling),
    ]
    for params, field, fn in cases:
        c = InMemoryJobContext(params=params)
        c.artifacts.update(ctx.artifacts)
        with pytest.raises(InvalidArgument) as err:
            fn(c)
        assert err.value.violations[0].field == field, (params, err.value.violations)


def test_point_cloud_flow_trains_and_samples_with_change_of_variables_statistics():
    ctx, res = _train({"name": "clouds", "builtin": "pointcloud", "steps": 20, "batch_size": 64, "hidden": 32,
                       "layers": 2, "num_data": 256})
    assert res["dim"] == 18
    out = _sample(ctx, res["model_version_id"], "euclidean", 18, reward=[{"kind": "distance", "target": [0.0] * 18}],
                  control_cost=0.1, steps=6, iterations=2, num_samples=24, learning_rate=0.05)
    assert 0.9 <= out["on_support_before"] <= 1.0 and 0 <= out["on_support_after"] <= 1
    assert out["reward_after"] > out["reward_before"] and "plot_artifact_id" not in out
    assert st_load(ctx.artifacts[out["samples_artifact_id"]][1])["samples"].shape == (24, 18)
