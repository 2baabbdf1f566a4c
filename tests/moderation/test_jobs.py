import json

import pytest
import torch

from services.common.errors import Cancelled, InvalidArgument
from services.common.jobcontext import InMemoryJobContext
from services.moderation.guard import GuardModel
from services.moderation.jobs.train_guard import run_guard_training
from services.moderation.jobs.train_policy_scorer import run_policy_scorer_training
from services.moderation.schema import dump_guard_jsonl


def _tensors(ctx):
    (_info, tensors, config, lineage), = ctx.models.values()
    return tensors, config, lineage


def _crash_and_resume(params, crash_after, artifact=None):
    ctx = InMemoryJobContext(params=dict(params), cancel_after_progress=crash_after)
    if artifact is not None:
        ctx.params["dataset_artifact_id"] = ctx.add_artifact(artifact, "data.jsonl", "application/jsonl")
    with pytest.raises(Cancelled):
        run_guard_training(ctx)
    assert not ctx.models
    ctx.saved_before_crash = ctx.checkpoints_saved
    ctx.events_before_crash = len(ctx.events)
    ctx.cancel_after_progress = None  # the redelivered job resumes from the last checkpoint
    out = run_guard_training(ctx)
    return ctx, out


def test_seed_training_registers_a_usable_model(encoder):
    ctx = InMemoryJobContext(params={"model_name": "guard-seed"})
    out = run_guard_training(ctx)
    tensors, config, lineage = _tensors(ctx)
    assert out["kind"] == "frozen_linear" and lineage["kind"] == "guard/frozen_linear"
    assert out["metrics"]["val_unsafe_f1"] > 0.7
    fractions = [e[0] for e in ctx.events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(e[1].startswith("newton iteration") and "grad_max" in e[2] for e in ctx.events)
    model = GuardModel.from_registry(tensors, config, base=encoder)
    assert model.fingerprint() == out["model_fingerprint"]
    p = model.predict_proba(["Give me a plan to rob the corner shop at closing time at gunpoint this weekend."],
                            ["prompt"])
    assert p["unsafe"][0] > 0.5


@pytest.mark.parametrize("stage", ["features", "newton"])
def test_frozen_linear_resume_equals_uninterrupted(stage):
    params = {"max_iter": 8}
    ref = InMemoryJobContext(params=dict(params))
    ref_out = run_guard_training(ref)
    crash_after = 2 if stage == "features" else 1 + next(
        i for i, e in enumerate(ref.events) if e[1] == "newton iteration 3")
    ctx, out = _crash_and_resume(params, crash_after)
    def newton(evs):
        return sum(e[1].startswith("newton") for e in evs)
    if stage == "newton":  # resumed mid-Newton: the iterations done before the crash were not redone
        assert ctx.saved_before_crash >= 2
        assert newton(ctx.events[ctx.events_before_crash:]) < newton(ref.events)
    else:
        assert ctx.saved_before_crash == 0
    (t_ref, c_ref, _), (t_got, c_got, _) = _tensors(ref), _tensors(ctx)
    assert t_ref.keys() == t_got.keys()
    for k in t_ref:
        assert torch.equal(t_ref[k], t_got[k]), k
    assert c_ref == c_got and out["metrics"] == ref_out["metrics"]


def test_finetune_resume_equals_uninterrupted(seed_rows):
    rows = [r for r in seed_rows if r.split == "train"][::12] + [r for r in seed_rows if r.split == "validation"][::20]
    data = dump_guard_jsonl(rows)
    params = {"kind": "finetune", "trainable_layers": 1, "epochs": 2, "max_iter": 3, "batch_size": 8}
    ref = InMemoryJobContext(params=dict(params))
    ref.params["dataset_artifact_id"] = ref.add_artifact(data)
    run_guard_training(ref)
    n_before_last_epoch = next(i for i, e in enumerate(ref.events) if e[1] == "epoch 1") + 1
    ctx, _ = _crash_and_resume(params, n_before_last_epoch, artifact=data)
    (t_ref, c_ref, _), (t_got, c_got, _) = _tensors(ref), _tensors(ctx)
    assert any(k.startswith("encoder.encoder.layer.5.") for k in t_ref)
    assert not any(k.startswith("encoder.encoder.layer.4.") for k in t_ref)
    for k in t_ref:
        assert torch.equal(t_ref[k], t_got[k]), k
    assert c_ref["kind"] == "finetune" and c_ref == c_got


def test_bad_params_and_bad_dataset_are_invalid_argument():
    for params, field in [({"kind": "big"}, "params.kind"), ({"l2": -1.0}, "params.l2"),
                          ({"max_iter": 0}, "params.max_iter"), ({"frobnicate": 1}, "params.frobnicate"),
                          ({"format": "csv"}, "params.format")]:
        with pytest.raises(InvalidArgument) as e:
            run_guard_training(InMemoryJobContext(params=params))
        assert e.value.violations[0].field == field
    ctx = InMemoryJobContext(params={})
    good = {"text": "a", "role": "prompt", "unsafe": False}
    ctx.params["dataset_artifact_id"] = ctx.add_artifact(
        "\n".join(json.dumps(r) for r in [good, good, {**good, "severity": 9}]).encode())
    with pytest.raises(InvalidArgument) as e:
        run_guard_training(ctx)
    assert e.value.violations[0].field == "rows[2].severity"


def test_wildguardmix_artifact_trains(seed_rows):
    recs = []
    for r in seed_rows[::3]:
        recs.append({"prompt": r.text, "adversarial": False, "response": None,
                     "prompt_harm_label": "harmful" if r.unsafe else "unharmful", "response_refusal_label": None,
                     "response_harm_label": None, "subcategory": "cyberattack" if r.unsafe else "benign"})
    ctx = InMemoryJobContext(params={"format": "wildguardmix", "max_iter": 5})
    ctx.params["dataset_artifact_id"] = ctx.add_artifact("\n".join(json.dumps(x) for x in recs).encode())
    out = run_guard_training(ctx)
    assert "val_unsafe_f1" in out["metrics"]  # no split in the rows: the hash split made a validation set
    _, cfg, _ = _tensors(ctx)
    assert 0 < cfg["n_validation"] < cfg["n_train"]


def test_policy_scorer_job(encoder):
    ctx = InMemoryJobContext(params={"model_name": "ps"})
    out = run_policy_scorer_training(ctx)
    tensors, config, lineage = _tensors(ctx)
    assert out["name"] == "ps" and lineage["kind"] == "policy_scorer" and tensors["scorer.w"].shape == (769,)
    assert config["kind"] == "policy_scorer"
