"""run_calibration end to end on InMemoryJobContext: a calibration set made of the seed validation rows (group
"clean") and the same rows with typos (group "typos", which the MiniLM guard handles worse)."""
import json

import numpy as np
import pytest
import torch

from services.common.errors import Cancelled, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.moderation.conformal import ConformalSeverity
from services.moderation.jobs.calibrate import run_calibration


def typos(text: str) -> str:
    """Deterministic typos: swap the 2nd and 3rd letters of every word longer than 3 characters."""
    return " ".join(w[0] + w[2] + w[1] + w[3:] if len(w) > 3 and w.isalpha() else w for w in text.split(" "))


@pytest.fixture(scope="module")
def calib_data(seed_split):
    _, val = seed_split
    lines = []
    for r in val:
        d = r.to_json()
        lines.append({**d, "group": "clean"})
        lines.append({**d, "text": typos(r.text), "group": "typos"})
    return "\n".join(json.dumps(x) for x in lines).encode()


def _ctx(guard, data, **params):
    ctx = InMemoryJobContext(params={})
    tensors, config = guard.to_registry()
    gid = ctx.register_model("guard", tensors, kind="guard/frozen_linear", config=config).model_version_id
    ctx.params.update({"guard_model_version_id": gid, "dataset_artifact_id": ctx.add_artifact(data), **params})
    return ctx, gid


def _registered(ctx, kind):
    (info, tensors, config, lineage), = [m for m in ctx.models.values() if m[3]["kind"] == kind]
    return info, tensors, config, lineage


def test_calibration_job_registers_usable_fair_thresholds(guard, calib_data):
    ctx, gid = _ctx(guard, calib_data, alpha=0.2, c=0.1, eval_fraction=0.3)
    out = run_calibration(ctx)
    info, tensors, config, lineage = _registered(ctx, "guard.conformal")
    assert lineage["parent_version_ids"] == [gid] and config["guard_model_version_id"] == gid
    assert config["groups"] == ["clean", "typos"] and config["alpha"] == 0.2 and config["c"] == 0.1
    assert config["metric"] == "equal_opportunity" and config["score_kind"] == "tps"
    th = tensors["thresholds"]
    assert th.shape == (5,) and bool((th >= tensors["q_hat"]).all())
    m = out["metrics"]
    assert m["n_calibration"] + m["n_eval"] == 2 * len(calib_data.splitlines()) / 2
    for part in ("calibration", "eval"):  # the fair sets contain the plain ones
        assert m[f"{part}_fair_coverage"] >= m[f"{part}_plain_coverage"]
        assert m[f"{part}_fair_mean_set_size"] >= m[f"{part}_plain_mean_set_size"]
    assert m["calibration_plain_coverage"] >= 0.8 - 0.05
    fractions = [e[0] for e in ctx.events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0

    cal = ConformalSeverity.from_registry(tensors, config)
    proba = guard.predict_proba(["I want to hurt every person at the parade.", "How do I bake bread?"],
                                ["prompt", "prompt"])
    sets = cal.prediction_sets(proba, ["clean", "typos"])
    assert len(sets) == 2 and all(s == sorted(set(s)) for s in sets)
    assert cal.alpha == 0.2 and cal.metric == "equal_opportunity"


def test_calibration_resume_equals_uninterrupted(guard, calib_data):
    ref, _ = _ctx(guard, calib_data, metric="disparate_impact", score="aps")
    run_calibration(ref)
    ctx, _ = _ctx(guard, calib_data, metric="disparate_impact", score="aps")
    ctx.cancel_after_progress = 4  # stops before the 5th (last) chunk of 64 rows: 4 chunks were checkpointed
    with pytest.raises(Cancelled):
        run_calibration(ctx)
    assert ctx.checkpoints_saved == 1 and not [m for m in ctx.models.values() if m[3]["kind"] == "guard.conformal"]
    n_before = len(ctx.events)
    ctx.cancel_after_progress = None
    out = run_calibration(ctx)
    assert len(ctx.events) - n_before < len(ref.events)  # the scored chunks were not redone
    (_, t_ref, c_ref, l_ref), (_, t_got, c_got, l_got) = _registered(ref, "guard.conformal"), _registered(
        ctx, "guard.conformal")
    for k in t_ref:
        assert torch.equal(t_ref[k], t_got[k]), k
    # the guard's version id differs between the two contexts; everything else is identical
    def strip(c):
        return {k: v for k, v in c.items() if k != "guard_model_version_id"}
    assert strip(c_ref) == strip(c_got) and l_ref["metrics"] == l_got["metrics"] == out["metrics"]
    assert c_ref["metric"] == "disparate_impact" and c_ref["c"] == 0.8  # the 80% rule by default


def test_calibration_params_and_data_errors(guard, calib_data):
    rows = [json.loads(x) for x in calib_data.splitlines()]
    cases = [({"metric": "parity"}, None, "params.metric"), ({"score": "raps"}, None, "params.score"),
             ({"c": 0.1, "tolerance": 0.1}, None, "params.tolerance"), ({"format": "bingoguard"}, None, "params.format"),
             ({"frobnicate": 1}, None, "params.frobnicate"), ({"alpha": 1.0}, None, "params.alpha"),
             ({}, [{**rows[0], "group": ""}] + rows[1:4], "rows[0].group"),
             ({}, [{**r, "group": "one"} for r in rows[:6]], "params.dataset_artifact_id")]
    for params, data_rows, field in cases:
        data = calib_data if data_rows is None else "\n".join(json.dumps(r) for r in data_rows).encode()
        ctx, _ = _ctx(guard, data, **params)
        with pytest.raises(InvalidArgument) as e:
            run_calibration(ctx)
        assert e.value.violations[0].field == field, params
    with pytest.raises(InvalidArgument) as e:
        run_calibration(InMemoryJobContext(params={"dataset_artifact_id": "x"}))
    assert e.value.violations[0].field == "params.guard_model_version_id"


def test_tolerance_alias_and_metric_none(guard, calib_data):
    ctx, _ = _ctx(guard, calib_data, metric="none", tolerance=0.2)
    out = run_calibration(ctx)
    _, tensors, config, _ = _registered(ctx, "guard.conformal")
    assert config["c"] == 0.2 and config["metric"] == "none"
    np.testing.assert_array_equal(tensors["thresholds"].numpy(), np.full(5, out["q_hat"]))
