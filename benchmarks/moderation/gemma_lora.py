"""Frozen vs LoRA-tuned top layers for the Gemma guard (issue 35 item 1: "frozen, or LoRA-tuned top layers: measure
which"), on the held-out rows of the real-request pairs (services/moderation/data/gemma_pairs.jsonl).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/moderation/gemma_lora.py [--cache /tmp/gemma/cache]
        [--layer 6] [--tuned 2] [--epochs 2] [--rank 8]

Both guards read the same rendered pair (gemma_guard.render), the hidden state after decoder layer `layer`, mean
pooled, standardised with the frozen layer's train mean / sd (gemma_guard.pair_features), and the guard's linear
heads. Frozen: the heads fitted by Newton to the minimum (the gemma_frozen kind). LoRA: the `tuned` decoder layers
up to `layer` get LoRA adapters (W x + alpha/r * B A x on every linear of those layers; B starts at zero, so the
start is the frozen guard) trained with the heads, warm-started from the frozen heads, by AdamW on mini-batch
estimates of the same objective (guard.frozen_linear_objective), as the MiniLM "finetune" kind trains its top
layers. The cheap way: the hidden states below the tuned layers are computed once and cached (the frozen layers do
not change), so an epoch runs only the tuned layers. Decision defaults are chosen on validation for each guard
(decision.choose_defaults), then the test rows are measured at them (benchmarks/moderation/gemma_guard.evaluate).
The adapters and the cached top-layer pass are the job kind "gemma_lora"'s code (services/moderation/gemma_lora.py:
LoRALinear, add_lora, TopLayers, pad); the job's l2 (default 1e-4, here --l2) and its shuffle seeds (seed, epoch)
are its own. Seeded (shuffles, LoRA init), no dropout; small runs (--every 6) repeat bit for bit, two full-size runs
did not (RESULTS.md; cause not found)."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.moderation.gemma_guard import PAIRS, evaluate, print_table  # noqa: E402
from services.moderation.gemma_lora import TopLayers, add_lora, pad  # noqa: E402  (the gemma_lora kind's code)
from services.moderation.guard import LinearHeads, Targets, fit_frozen_linear, frozen_linear_objective  # noqa: E402
from services.moderation.metrics import average_precision  # noqa: E402
from services.moderation.schema import parse_guard_jsonl  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/gemma/cache")
    ap.add_argument("--layer", type=int, default=6)
    ap.add_argument("--tuned", type=int, default=2, help="decoder layers up to --layer that get LoRA")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--l2", type=float, default=1e-3)
    ap.add_argument("--eval-every-epoch", action="store_true", help="measure after every epoch, not only the last")
    ap.add_argument("--every", type=int, default=1, help="every n-th row only (a smoke run)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from services.generation import pretrained
    from services.moderation.gemma_guard import DEFAULT_MAX_TOKENS, GemmaBackbone, pair_features, render, standardiser

    rows = parse_guard_jsonl(PAIRS.read_bytes())[::a.every]
    idx = {s: np.array([i for i, r in enumerate(rows) if r.split == s]) for s in ("train", "validation", "test")}
    sub = {s: [rows[i] for i in ix] for s, ix in idx.items()}
    roles = [r.role for r in rows]
    has = np.array([r.prompt is not None for r in rows])
    model_dir = str(pretrained.hf_directory(a.cache))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    bb = GemmaBackbone(model, AutoTokenizer.from_pretrained(model_dir), layer=a.layer)
    lo = a.layer - a.tuned
    t0 = time.time()
    below: list[torch.Tensor] = []     # per row: the states after layer lo over its tokens (the cache)
    pooled = []                        # frozen: the mean-pooled states after `layer`
    rendered = [render(r.text, r.role, r.prompt) for r in rows]
    for k in range(0, len(rows), 16):
        enc = bb.tokenizer(rendered[k:k + 16], return_tensors="pt", padding=True, truncation=True,
                           max_length=DEFAULT_MAX_TOKENS)
        h_lo, h_top = bb._states(enc, [lo, a.layer])
        m = enc["attention_mask"]
        below += [h_lo[i, :int(m[i].sum())].clone() for i in range(len(m))]
        mf = m.to(torch.float64)
        pooled.append(((h_top.to(torch.float64) * mf[..., None]).sum(1) / mf.sum(1, keepdim=True)).numpy())
    h = np.concatenate(pooled)
    print(f"cached layer-{lo} states and frozen layer-{a.layer} features of {len(rows)} rows: "
          f"{time.time() - t0:.0f} s", flush=True)
    mu, sd = standardiser(h[idx["train"]])
    phi = pair_features(h, mu, sd, roles, has)
    y_tr = Targets.from_examples(sub["train"])
    heads = fit_frozen_linear(phi[idx["train"]], y_tr, a.l2, max_iter=15, tol=1e-6, heads=LinearHeads.init(phi.shape[1]))

    from services.moderation.guard import GuardModel

    class Probe:  # the heads' predictions from features (GuardModel's code path, as GemmaGuard uses it)
        def __init__(self, heads):
            self.heads = heads

        def logits_from_features(self, x):
            return self.heads.logits(torch.as_tensor(x, dtype=torch.float64))

        def predict_from_features(self, x):
            return GuardModel.predict_from_features(self, x)

    results = [evaluate(f"gemma_frozen layer {a.layer} mean (l2 {a.l2:g})",
                        Probe(heads).predict_from_features(phi[idx["validation"]]), sub["validation"],
                        Probe(heads).predict_from_features(phi[idx["test"]]), sub["test"])]
    print_table(results)

    # LoRA on layers lo+1..layer, heads warm-started from the frozen ones
    top = TopLayers(model, lo, a.layer)
    lora_params = add_lora(top.base.layers[lo:a.layer], a.rank, a.alpha, seed=0)
    tuned = heads.clone()
    head_params = [getattr(tuned, k).requires_grad_(True) for k in LinearHeads.NAMES]
    opt = torch.optim.AdamW([{"params": lora_params, "lr": a.lr, "weight_decay": 0.0},
                             {"params": head_params, "lr": a.head_lr, "weight_decay": 0.0}])
    mu_t, sd_t = torch.from_numpy(mu), torch.from_numpy(sd)
    r_all = torch.tensor([1.0 if x == "response" else 0.0 for x in roles], dtype=torch.float64)
    has_t = torch.from_numpy(has.astype(np.float64))

    def features(ix) -> torch.Tensor:
        hs, m = pad([below[i] for i in ix])
        out = top(hs, m).to(torch.float64)
        mf = m.to(torch.float64)
        v = (out * mf[..., None]).sum(1) / mf.sum(1, keepdim=True)
        z = (v - mu_t) / (sd_t * math.sqrt(v.shape[1]))
        return torch.cat([z, r_all[ix][:, None], has_t[ix][:, None]], 1)

    tr = idx["train"]
    with torch.no_grad():  # B = 0: the cached path starts exactly where the frozen guard is (up to GEMM rounding)
        gap = float((features(tr[:16]) - torch.from_numpy(phi[tr[:16]])).abs().max())
    print(f"cached top layers vs the frozen forward at the start: max |phi difference| {gap:.2e}", flush=True)
    assert gap < 1e-4, gap
    for epoch in range(a.epochs):
        t0 = time.time()
        order = tr[torch.randperm(len(tr), generator=torch.Generator().manual_seed(epoch)).numpy()]
        total = 0.0
        for k in range(0, len(order), a.batch_size):
            ix = order[k:k + a.batch_size]
            loss = frozen_linear_objective(tuned, features(ix), Targets.from_examples([rows[i] for i in ix]), a.l2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(ix)
        print(f"LoRA epoch {epoch + 1}: mean loss {total / len(tr):.4f}, {time.time() - t0:.0f} s", flush=True)
        if epoch + 1 < a.epochs and not a.eval_every_epoch:
            continue
        with torch.no_grad():
            ph = {s: torch.cat([features(idx[s][k:k + 32]) for k in range(0, len(idx[s]), 32)]).numpy()
                  for s in ("validation", "test")}
        pv = Probe(tuned).predict_from_features(ph["validation"])
        yv = np.array([r.unsafe for r in sub["validation"]])
        print(f"LoRA epoch {epoch + 1}: validation AUPRC {average_precision(pv['unsafe'], yv):.3f}", flush=True)
        results.append(evaluate(f"LoRA r{a.rank} on layers {lo + 1}-{a.layer} + heads ({epoch + 1} epochs)",
                                pv, sub["validation"], Probe(tuned).predict_from_features(ph["test"]), sub["test"]))
    print("\n## held-out test rows, each guard at the defaults it chose on validation")
    print_table(results)


if __name__ == "__main__":
    main()
