"""PreferDiff at the paper's size on a GPU: a short, prepared check for a lent accelerator.

Trains, through the job's own training loop (training.fit, device "cuda"), on MovieLens-100k:
- PreferDiff with the official settings (3072-d, AdamW lr 1e-4, batch 256, lambda 0.4, gamma 5, w 2, one training
  sample per user, early stopping on validation Recall@5 with patience 10), its loss through the Triton kernel
  (kernels.preferdiff_loss dispatches to Triton on CUDA);
- DreamRec (MSE, lambda = 1) with the same network and settings;
- optionally the every-prefix variant (--every-prefix) and SASRec-CE (RecBole's defaults) as the anchor;
and prints per model: test NDCG@10 / Recall@10 masked and unmasked, best epoch, epochs run, seconds to best,
seconds per epoch and peak GPU memory. Before training it checks the fused loss against its torch reference at
[256, 3072] (value and gradients) on the device.

    .venv/bin/python benchmarks/recommendation/gpu_check.py --protocol user_split --epochs 150
    .venv/bin/python benchmarks/recommendation/gpu_check.py --protocol leave_one_out --every-prefix --epochs 30
    .venv/bin/python benchmarks/recommendation/gpu_check.py --device cpu --dim 32 --epochs 1   # smoke run, no GPU
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from services.recommendation.data import build_dataset, load_movielens_100k
from services.recommendation.params import TrainParams
from services.recommendation.training import fit


def check_kernel(device: str, dim: int) -> None:
    from kernels.preferdiff_loss import preferdiff_loss, preferdiff_loss_reference

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(256, dim, generator=g).to(device).requires_grad_() for _ in range(4)]
    got = preferdiff_loss(*xs, 0.4, 5.0)
    gg = torch.autograd.grad(got, xs)
    want = preferdiff_loss_reference(*xs, 0.4, 5.0)
    gw = torch.autograd.grad(want, xs)
    err = max(float((a - b).abs().max()) for a, b in zip(gg, gw, strict=True))
    print(f"# fused loss [256, {dim}] on {device}: {float(got):.6f} vs reference {float(want):.6f}, "
          f"max |grad diff| {err:.2e}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=["user_split", "leave_one_out"], default="user_split")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--dim", type=int, default=3072)
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every-prefix", action="store_true", help="also train PreferDiff on every prefix")
    ap.add_argument("--sasrec", action="store_true", help="also train SASRec-CE (RecBole's defaults)")
    a = ap.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: run on a GPU machine, or pass --device cpu for a smoke run", file=sys.stderr)
        return 2
    check_kernel(a.device, a.dim)
    ds = build_dataset(load_movielens_100k(), protocol=a.protocol)
    st = ds.stats()
    print(f"# ml-100k {a.protocol}: train/valid/test users {st['n_train_users']}/{st['n_valid_users']}/"
          f"{st['n_test_users']}; dim {a.dim}, epochs <= {a.epochs}, seed {a.seed}, device {a.device}", flush=True)
    runs = [("preferdiff", {"model_kind": "preferdiff"}), ("dreamrec (mse)", {"model_kind": "dreamrec"})]
    if a.every_prefix:
        runs.append(("preferdiff every-prefix", {"model_kind": "preferdiff", "train_samples": "every_prefix"}))
    common = {"dim": a.dim, "epochs": a.epochs, "seed": a.seed, "device": a.device}
    if a.sasrec:
        runs.append(("sasrec_ce", {"model_kind": "sasrec_ce", "seed": a.seed, "device": a.device}))
    print("\n| model | NDCG@10 | Recall@10 | masked NDCG@10 | masked Recall@10 | best ep | epochs | s to best "
          "| s/epoch | peak GiB |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for label, p in runs:
        params = p if p["model_kind"] == "sasrec_ce" else {**common, **p}
        cfg = TrainParams.model_validate(params)
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        r = fit(cfg, ds, on_epoch=lambda e, m, label=label, t0=t0: print(
            f"  [{label}] epoch {e}: loss {m['loss']:.4f} valid R@5 {m['valid_recall_5']:.4f} "
            f"N@10 {m['valid_ndcg_10']:.4f} ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True))
        dt = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() / 2 ** 30 if a.device == "cuda" else float("nan")
        t = r.test_metrics
        print(f"| {label} | {t['ndcg@10']:.4f} | {t['recall@10']:.4f} | {t['masked_ndcg@10']:.4f} "
              f"| {t['masked_recall@10']:.4f} | {r.best_epoch} | {r.epochs_run} | {r.seconds_to_best:.0f} "
              f"| {dt / max(r.epochs_run, 1):.1f} | {peak:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
