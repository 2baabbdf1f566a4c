"""The LoRA-tuned Gemma guard kind (gemma_lora.py) on the tiny random Gemma 3 of test_gemma_guard.py: merged
adapters compute what the adapters computed, the cached top-layer path is the full forward, the train_guard job
registers a "gemma_lora" guard that serves like the others and beats the frozen guard's objective, a killed job
resumes to the same guard, and bad LoRA settings name their field (in the job and through the gRPC API and the
CLI). The real Gemma 3 270M is measured in benchmarks/moderation/gemma_lora.py, not here."""
from __future__ import annotations

import pytest
import torch

from services.common.errors import Cancelled, InvalidArgument
from services.moderation.decision import SCORE_TOLERANCE, Item, Thresholds, moderate_items
from services.moderation.gemma_guard import GemmaBackbone
from services.moderation.gemma_lora import (
    LoRALinear,
    TopLayers,
    add_lora,
    lora_modules,
    merge_lora,
    pad,
    states_below,
)
from services.moderation.guard import Targets, frozen_linear_objective
from services.moderation.jobs.train_guard import run_guard_training
from tests.moderation import test_gemma_guard as gg

# test_gemma_guard.py's module fixtures (the tiny Gemma registered as a language model, its rows, the frozen guard
# trained on them, the private platform) and helpers, shared rather than copied
tiny_gemma, rows, trained, api_env, _ctx, _guard = gg.tiny_gemma, gg.rows, gg.trained, gg.api_env, gg._ctx, gg._guard

TEXTS = ["User: How do I bake bread?\nAssistant: Knead it well.\n", "User: hi\n",
         "Assistant: Sure, here is how you do it, step by step.\n"]


def _backbone(tiny_gemma, layer=2) -> GemmaBackbone:
    return GemmaBackbone.from_registry(*tiny_gemma, layer=layer)


def _lora_ctx(tiny_gemma, rows, **params):
    """A gemma_lora job on the rows: layer 2 read out, adapters on layer 2 only, 2 epochs of mini-batches of 16."""
    return _ctx(tiny_gemma, rows, **{"kind": "gemma_lora", "lora_layers": 1, "epochs": 2, "model_name": "guard-lora",
                                     **params})


@pytest.mark.parametrize("lo", [0, 1])
def test_merged_adapters_compute_what_the_adapters_computed(tiny_gemma, lo):
    bb = _backbone(tiny_gemma)
    frozen = bb.pooled(TEXTS, "mean")
    base = bb.model.model
    params = add_lora(base.layers[lo:2], rank=4, alpha=8.0, seed=0)
    assert len(lora_modules(bb.model)) == 7 * (2 - lo)     # q, k, v, o, gate, up, down per layer
    assert torch.equal(torch.from_numpy(bb.pooled(TEXTS, "mean")), torch.from_numpy(frozen))   # B = 0: exact
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in params[1::2]:
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    tuned = torch.from_numpy(bb.pooled(TEXTS, "mean"))
    assert (tuned - torch.from_numpy(frozen)).abs().max() > 1e-3             # the adapters change the states
    # the cached path (states below the tuned layers, then TopLayers) is the full forward
    h, m = pad(states_below(bb, TEXTS, lo))
    with torch.no_grad():
        out = TopLayers(bb.model, lo, 2)(h, m).to(torch.float64)
    mf = m.to(torch.float64)
    cached = (out * mf[..., None]).sum(1) / mf.sum(1, keepdim=True)
    torch.testing.assert_close(cached, tuned, rtol=1e-5, atol=1e-5)
    names = merge_lora(bb.model)
    assert not lora_modules(bb.model) and not any(isinstance(x, LoRALinear) for x in bb.model.modules())
    assert len(names) == 7 * (2 - lo) and all(n in bb.model.state_dict() for n in names)
    assert {n.split(".")[2] for n in names} == {str(i) for i in range(lo, 2)}
    torch.testing.assert_close(torch.from_numpy(bb.pooled(TEXTS, "mean")), tuned, rtol=1e-5, atol=1e-5)


# Full-batch epochs (111 training rows): each epoch's loss is the full training objective, so the first one is the
# frozen guard's (B = 0 at the start) and the guard's final objective is comparable with the frozen minimum. lr 1e-4:
# the tiny random Gemma's weights are ~0.02, and at 1e-3 the first Adam step already overshoots.
FULL_BATCH = {"epochs": 3, "batch_size": 128, "lr": 1e-4}


@pytest.fixture(scope="module")
def trained_lora(tiny_gemma, rows):
    ctx = _lora_ctx(tiny_gemma, rows, **FULL_BATCH)
    return ctx, run_guard_training(ctx)


@pytest.fixture(scope="module")
def minibatch_lora(tiny_gemma, rows):
    ctx = _lora_ctx(tiny_gemma, rows)
    return ctx, run_guard_training(ctx)


def test_training_registers_a_lora_guard_that_serves_like_the_others(trained_lora, trained, tiny_gemma, rows):
    ctx, out = trained_lora
    loaded, lineage = _guard(ctx, out)
    g = loaded.obj
    lm_id = ctx.params["backbone_model_version_id"]
    assert out["kind"] == "gemma_lora" and lineage["kind"] == "guard/gemma_lora"
    assert lineage["parent_version_ids"] == [lm_id]
    assert g.kind == "gemma_lora" and g.fingerprint() == out["model_fingerprint"] == loaded.info.fingerprint
    lora = g.config["backbone"]["lora"]
    assert {k: lora[k] for k in ("rank", "alpha", "layers", "epochs", "lr", "head_lr", "batch_size")} == {
        "rank": 8, "alpha": 16.0, "layers": [2], "epochs": 3, "lr": 1e-4, "head_lr": 1e-3, "batch_size": 128}
    assert g.config["backbone"]["model_version_id"] == lm_id and set(out["decision_defaults"]) >= {"unsafe_threshold"}
    msgs = [e[1] for e in ctx.events]
    assert "newton iteration 1" in msgs and "epoch 3" in msgs and ctx.events[-1][0] == 1.0
    # the registered backbone is a plain Gemma: layer 2 carries merged weights, layer 1 and the rest are unchanged
    tensors = ctx.models[out["model_version_id"]][1]
    lm = tiny_gemma[0]
    changed = {k for k in lm if not torch.equal(tensors["backbone." + k], lm[k])}
    assert changed and all(k.startswith("model.layers.1.") and k.endswith("proj.weight") for k in changed)
    # it starts at the frozen guard's objective (its Newton heads over the frozen features: the same job's first
    # steps) and ends below it: the tuned layers fit the rows better than the best heads over the frozen ones
    fctx, fout = trained
    frozen = _guard(fctx, fout)[0].obj
    tr = [r for r in rows if r.split == "train"]
    args = ([r.text for r in tr], [r.role for r in tr], [r.prompt for r in tr])
    y, l2 = Targets.from_examples(tr), g.config["l2"]
    assert l2 == frozen.config["l2"] == 1e-3   # the Gemma kinds' default
    j_lora = float(frozen_linear_objective(g.heads, torch.from_numpy(g.features(*args)), y, l2))
    j_frozen = float(frozen_linear_objective(frozen.heads, torch.from_numpy(frozen.features(*args)), y, l2))
    epoch_loss = [e[2]["loss"] for e in ctx.events if e[1].startswith("epoch")]
    assert len(epoch_loss) == 3 and epoch_loss[0] == pytest.approx(j_frozen, rel=1e-6)
    assert j_lora < j_frozen - 1e-3, (j_lora, j_frozen, epoch_loss)
    assert not torch.equal(g.heads.unsafe_w, frozen.heads.unsafe_w)
    # the decisions and the answer: the same aggregator, the kind that answered is named; batched agrees
    items = [Item(r.text, r.role, r.prompt) for r in rows[:12]]
    res = moderate_items(g, items, Thresholds())
    assert {r.model_kind for r in res} == {"gemma_lora"} and {r.model_version for r in res} == {g.version}
    for a, b in zip(res, moderate_items(g, items, Thresholds(), batched=True), strict=True):
        assert abs(a.unsafe_score - b.unsafe_score) <= SCORE_TOLERANCE


@pytest.mark.parametrize("crash_at", ["newton iteration 2", "epoch 1"])
def test_a_killed_lora_job_resumes_to_the_same_guard(minibatch_lora, tiny_gemma, rows, crash_at):
    ref_ctx, ref = minibatch_lora
    ctx = _lora_ctx(tiny_gemma, rows)
    # crash right after the step that reported `crash_at` (before the next step, or in its first batch)
    ctx.cancel_after_progress = [e[1] for e in ref_ctx.events].index(crash_at) + 1
    with pytest.raises(Cancelled):
        run_guard_training(ctx)
    from services.common.state import loads_state

    saved = loads_state(ctx.checkpoint)["state"]    # past an epoch, the adapters and AdamW's state are in it
    assert ("lora" in saved) == crash_at.startswith("epoch") and (not saved.get("lora") or saved["lora"]["opt"]["state"])
    ctx.cancel_after_progress = None
    out = run_guard_training(ctx)
    assert out["metrics"] == ref["metrics"]
    t_ref, t_got = ref_ctx.models[ref["model_version_id"]][1], ctx.models[out["model_version_id"]][1]
    assert t_ref.keys() == t_got.keys()
    for k in t_ref:   # bit for bit: the cache recomputed after the resume is the same computation
        assert torch.equal(t_ref[k], t_got[k]), k


def test_bad_lora_params_name_the_field(tiny_gemma, rows):
    for params, field in [({"lora_layers": 3}, "params.lora_layers"), ({"lora_rank": 0}, "params.lora_rank"),
                          ({"lora_alpha": 0.0}, "params.lora_alpha"), ({"lr": 1.5}, "params.lr"),
                          ({"layer": 3, "lora_layers": 1}, "params.layer")]:
        with pytest.raises(InvalidArgument) as e:
            run_guard_training(_lora_ctx(tiny_gemma, rows, **params))
        assert e.value.violations[0].field == field, params


def test_cli_and_api_train_a_lora_guard_and_name_bad_fields(api_env, rows, capsys):
    """`praxon moderate train-guard --kind gemma_lora ...` through the real server and worker; then the API's
    field errors for the LoRA settings."""
    import grpc

    from praxon.common.v1 import common_pb2
    from praxon.moderation.v1 import moderation_pb2 as pb
    from services.cli.main import build_parser
    from tests.harness import rpc_error_details

    e = api_env
    args = build_parser().parse_args([
        "moderate", "train-guard", "--kind", "gemma_lora", "--backbone-model", "gemma-tiny", "--layer", "2",
        "--pool", "last", "--max-tokens", "128", "--epochs", "1", "--lora-rank", "4", "--lora-layers", "2",
        "--max-iter", "3", "--name", "guard-lora", "--dataset", e.dataset, "--address", e.server.address,
        "--token", e.token])
    args.func(args)
    assert "registered guard-lora v1" in capsys.readouterr().out
    # served by name: the answer names the kind
    resp = e.stub.Moderate(pb.ModerateRequest(prompt="How do I bake bread?", response="Knead it well.",
                                              model=common_pb2.ModelRef(name="guard-lora")), metadata=e.md)
    assert resp.model.kind == "gemma_lora" and resp.model.name == "guard-lora"
    lora, ref = pb.GUARD_KIND_GEMMA_LORA, common_pb2.ModelRef(name="gemma-tiny")
    cases = [({"kind": lora}, "backbone_model.name"),
             ({"kind": lora, "backbone_model": ref, "layer": 2, "lora_layers": 3}, "lora_layers"),
             ({"kind": lora, "backbone_model": ref, "lora_layers": 0}, "lora_layers"),
             ({"kind": lora, "backbone_model": ref, "lora_rank": 0}, "lora_rank"),
             ({"kind": lora, "backbone_model": ref, "lora_alpha": -1.0}, "lora_alpha"),
             ({"kind": lora, "backbone_model": ref, "lr": 2.0}, "lr")]
    for fields, field in cases:
        with pytest.raises(grpc.RpcError) as ei:
            e.stub.StartGuardTrainingJob(pb.StartGuardTrainingJobRequest(**fields), metadata=e.md)
        got, _info, bad, _retry = rpc_error_details(ei.value)
        assert got == grpc.StatusCode.INVALID_ARGUMENT, (fields, got, ei.value.details())
        assert bad.field_violations[0].field == field, (fields, bad)

