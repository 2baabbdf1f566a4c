"""The moderation guard's heads as a certified kind: the exact objective the guard trains, certified deletion of its
training records from a guard trained by the moderation job, refusal of heads that cannot be strongly convex."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from services.common.errors import FailedPrecondition
from services.common.jobcontext import InMemoryJobContext
from services.common.state import loads_state
from services.moderation import heads as guard_heads
from services.unlearning import jobs, newton

R = 1e-3


@pytest.fixture(scope="module")
def guard():
    """A small guard trained by the moderation job on part of the packaged seed set (ids seed-xxxx)."""
    from services.moderation.jobs.train_guard import run_guard_training
    from services.moderation.schema import dump_guard_jsonl, load_seed_dataset

    torch.set_num_threads(1)
    rows = load_seed_dataset()
    train = [r for r in rows if r.split == "train"][:80]
    val = [r for r in rows if r.split == "validation"][:30]
    ctx = InMemoryJobContext(params={})
    ds = ctx.add_artifact(dump_guard_jsonl(train + val), "guard.jsonl", "application/jsonl")
    ctx.params = {"dataset_artifact_id": ds, "model_name": "guard", "l2": 1e-2}
    out = run_guard_training(ctx)
    return ctx, ds, out, [r.id for r in train]


def _data(ctx, ds, config):
    rows, ids, val = guard_heads.guard_record_ids(ctx.read_artifact(ds), config)
    from services.moderation.jobs.train_guard import example_features

    return rows, ids, torch.from_numpy(example_features(None, rows)), guard_heads.labels(rows)


def test_the_objective_is_the_documented_one_and_the_trainer_minimises_it(guard):
    """The adapter's J (written once in moderation's heads.py, which the guard's trainer also solves) against a
    hand computation of its documented form, and the registered heads at its minimum."""
    ctx, ds, out, _ = guard
    tensors, config = ctx.load_model(out["model_version_id"])
    rows, ids, phi, Y = _data(ctx, ds, config)
    l2 = config["l2"]
    problem = guard_heads.GuardHeadsProblem(mu=l2, dim=config["feature_dim"])
    g = torch.Generator().manual_seed(0)
    theta = problem.from_tensors(tensors) + 0.1 * torch.randn(problem.num_params, generator=g, dtype=torch.float64)
    _, _, _, topic_rows, sev_rows = problem.block_weights(Y)
    assert topic_rows
    h, h0 = problem.unflatten(theta), problem.unflatten(problem.init())
    for t in (~sev_rows).nonzero()[:, 0].tolist():  # a block with no rows sits at its initial values
        h["sev_w"][t], h["sev_b"][t] = h0["sev_w"][t], h0["sev_b"][t]
    X, Yn = phi.numpy(), Y.numpy()
    hn = {k: v.numpy() for k, v in h.items()}

    def bce(z, y):
        return np.logaddexp(0.0, z) - y * z
    J = bce(X @ hn["unsafe_w"][0] + hn["unsafe_b"][0], Yn[:, 0]).mean()
    reg = (hn["unsafe_w"] ** 2).sum() + (hn["unsafe_b"] ** 2).sum()
    known = Yn[:, 12] > 0.5
    for t in range(11):
        y = Yn[known, 1 + t]
        n_pos, n_neg = y.sum(), len(y) - y.sum()
        w = np.where(y > 0.5, 0.5 / n_pos, 0.5 / n_neg) if n_pos and n_neg else np.full(len(y), 1 / len(y))
        J += (w * bce(X[known] @ hn["topic_w"][t] + hn["topic_b"][t], y)).sum()
        reg += (hn["topic_w"][t] ** 2).sum() + hn["topic_b"][t] ** 2
        sev = Yn[:, 13 + t]
        rows_t = sev >= 0
        if rows_t.any():
            z = X[rows_t] @ hn["sev_w"][t]
            J += sum(bce(z + hn["sev_b"][t, k], sev[rows_t] >= k + 1).sum() for k in range(4)) / rows_t.sum()
            reg += (hn["sev_w"][t] ** 2).sum() + (hn["sev_b"][t] ** 2).sum()
    assert problem.objective(theta, phi, Y) == pytest.approx(J + 0.5 * l2 * reg, rel=1e-10)
    # the moderation trainer's Newton solution is (numerically) the minimizer of this objective
    assert problem.gradient(problem.from_tensors(tensors), phi, Y).norm() < 1e-5


def test_forget_ten_records_certified_within_2r_of_retraining(guard):
    from services.moderation.guard import GuardModel

    ctx, ds, out, train_ids = guard
    forget = train_ids[5:15]
    ctx.params = {"model_version_id": out["model_version_id"], "forget_record_ids": forget, "dataset_artifact_id": ds,
                  "method": "certified_noisy_minimizer", "r": R, "epsilon": 1.0, "delta": 1e-5}
    res = jobs.run_unlearning(ctx)
    assert res["certified"] and res["certificate"]["certified"]
    g = res["guarantee"]
    assert g["kind"] == "certified" and g["epsilon"] == 1.0 and "noisy minimizer" in g["mechanism"]
    info, tensors, config, lineage = ctx.models[res["model_version_id"]]
    assert lineage["kind"] == "guard/frozen_linear" and lineage["parent_version_ids"] == [out["model_version_id"]]
    assert config["excluded_record_ids"] == forget and ctx.forgotten_records(ds) == set(forget)
    # ||theta_unlearned - theta_retrained|| <= 2r before noise
    rows, ids, phi, Y = _data(ctx, ds, config)
    keep = torch.tensor([i for i, rid in enumerate(ids) if rid not in set(forget)])
    problem = guard_heads.GuardHeadsProblem(mu=config["l2"], dim=config["feature_dim"])
    ref = newton.newton_to_radius(problem, phi[keep], Y[keep], problem.zeros(), R)
    theta_u = loads_state(ctx.artifacts[config["state_artifact_id"]][1])["theta_private"]
    assert ref.converged and float((theta_u - ref.theta).norm()) <= 2 * R
    # published = private + noise at the certificate's sigma (secret noise: never equal to the private weights)
    pub = problem.from_tensors(tensors)
    noise = (pub - theta_u).norm() / problem.num_params ** 0.5
    assert 0.8 * config["sigma"] < float(noise) < 1.2 * config["sigma"]
    # the new version is a guard the moderation code loads and serves
    model = GuardModel.from_registry(tensors, config)
    p = model.predict_proba(["Give me a plan to rob the corner shop at closing time at gunpoint this weekend.",
                             "What time does the bakery open?"], ["prompt", "prompt"])
    assert p["unsafe"][0] > p["unsafe"][1]


def test_heads_that_cannot_be_strongly_convex_are_refused(guard):
    ctx, ds, out, train_ids = guard
    tensors, config = ctx.load_model(out["model_version_id"])
    for change, words in [({"kind": "finetune"}, "top encoder layers"), ({"l2": 0.0}, "l2 = 0")]:
        info = ctx.register_model("guard-x", tensors, kind="guard/x", config=dict(config, **change))
        ctx.params = {"model_version_id": info.model_version_id, "forget_record_ids": train_ids[20:22],
                      "method": "certified_noisy_minimizer", "dataset_artifact_id": ds}
        with pytest.raises(FailedPrecondition, match=words) as e:
            jobs.run_unlearning(ctx)
        assert "unsafe" in str(e.value) and "severity S11" in str(e.value)
    ctx.params = {"model_version_id": out["model_version_id"], "forget_record_ids": train_ids[20:22],
                  "method": "finetune", "dataset_artifact_id": ds}
    with pytest.raises(FailedPrecondition, match="not available for moderation guards"):
        jobs.run_unlearning(ctx)


def test_an_empty_block_is_held_at_its_initial_values():
    # no row has a severity for any topic: the severity heads have no term in the guard's objective and stay at
    # init; the proximal term keeps them there and J strongly convex
    problem = guard_heads.GuardHeadsProblem(mu=0.1, dim=5)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(12, 5, generator=g, dtype=torch.float64)
    Y = torch.zeros(12, guard_heads.LABEL_DIM, dtype=torch.float64)
    Y[:6, 0] = 1
    Y[:, 12] = 1
    Y[:6, 1] = 1
    Y[:, 13:] = -1
    res = newton.newton_to_radius(problem, X, Y, problem.zeros(), 1e-6)
    h, h0 = problem.unflatten(res.theta), problem.unflatten(problem.init())
    assert res.converged and torch.allclose(h["sev_w"], h0["sev_w"]) and torch.allclose(h["sev_b"], h0["sev_b"])


def test_a_guard_distilled_from_a_teacher_is_certified_on_its_soft_labels(guard):
    """frozen_linear heads distilled from a registered guard (train_guard's teacher_model_version_id): the train rows'
    soft labels are the teacher's probabilities, stored as the new version's lineage dataset; the heads minimise the
    objective on them, and certified unlearning of that version reads the same labels."""
    from services.moderation.guard import GuardModel
    from services.moderation.jobs.train_guard import run_guard_training
    from services.moderation.schema import parse_guard_jsonl

    ctx, ds, out, train_ids = guard
    ctx.params = {"dataset_artifact_id": ds, "model_name": "guard-distilled", "l2": 1e-2,
                  "teacher_model_version_id": out["model_version_id"]}
    dist = run_guard_training(ctx)
    _info, tensors, config, lineage = ctx.models[dist["model_version_id"]]
    assert lineage["parent_version_ids"] == [out["model_version_id"]] == [config["teacher_model_version_id"]]
    soft_ds = lineage["dataset_artifact_id"]
    rows = parse_guard_jsonl(ctx.read_artifact(soft_ds))
    train = [r for r in rows if r.split == "train"]
    assert soft_ds != ds and [r.id for r in train] == train_ids
    assert all(r.unsafe_p is None and r.topic_p is None for r in rows if r.split == "validation")
    teacher = GuardModel.from_registry(*ctx.load_model(out["model_version_id"]))
    p = teacher.predict_proba([r.text for r in train], [r.role for r in train], [r.prompt for r in train])
    np.testing.assert_allclose([r.unsafe_p for r in train], p["unsafe"], atol=1e-4)
    np.testing.assert_allclose([[r.topic_p[t] for t in sorted(r.topic_p, key=lambda t: int(t[1:]))] for r in train],
                               p["topics"], atol=1e-4)
    # the soft labels are the heads' targets, and the heads their minimiser
    rows_, ids, phi, Y = _data(ctx, soft_ds, config)
    assert ids == train_ids and torch.allclose(Y[:, 0], torch.tensor([r.unsafe_p for r in train], dtype=Y.dtype))
    assert 0 < float(((Y[:, 0] > 0) & (Y[:, 0] < 1)).double().mean())   # soft, not 0/1
    problem = guard_heads.GuardHeadsProblem(mu=config["l2"], dim=config["feature_dim"])
    assert problem.gradient(problem.from_tensors(tensors), phi, Y).norm() < 1e-5
    # certified deletion from the distilled version, against its soft-labelled lineage dataset
    forget = train_ids[30:35]
    ctx.params = {"model_version_id": dist["model_version_id"], "forget_record_ids": forget,
                  "dataset_artifact_id": soft_ds, "method": "certified_noisy_minimizer", "r": R, "epsilon": 1.0,
                  "delta": 1e-5}
    res = jobs.run_unlearning(ctx)
    assert res["certified"] and res["certificate"]["certified"]
    keep = torch.tensor([i for i, rid in enumerate(ids) if rid not in set(forget)])
    ref = newton.newton_to_radius(problem, phi[keep], Y[keep], problem.zeros(), R)
    cfg_u = ctx.models[res["model_version_id"]][2]
    theta_u = loads_state(ctx.artifacts[cfg_u["state_artifact_id"]][1])["theta_private"]
    assert ref.converged and float((theta_u - ref.theta).norm()) <= 2 * R
