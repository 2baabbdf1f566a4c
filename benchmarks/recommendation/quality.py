"""MovieLens-100k quality table: PreferDiff vs DreamRec (lam = 1) vs SASRec-CE vs popularity.

One user split (seed --split-seed), every model trained with --seeds training seeds in the same run through the same
training loop the job uses (services.recommendation.training.train). Prints Recall@10 / NDCG@10 (mean and std over
seeds, test users), the epoch of best validation Recall@5, epochs run and wall time, plus NDCG@10 ratios against
DreamRec, and optionally writes a CSV.

    .venv/bin/python benchmarks/recommendation/quality.py --seeds 0 1 2 --epochs 40 --dim 128
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

import torch

from services.recommendation.data import build_dataset, load_movielens_100k, synthetic_interactions
from services.recommendation.training import Hooks, TrainConfig, train


class _Log(Hooks):
    def __init__(self, tag: str, verbose: bool):
        self.tag, self.verbose = tag, verbose

    def progress(self, fraction: float, message: str, **m: float) -> None:
        if self.verbose:
            print(f"  [{self.tag}] {message}: loss {m.get('loss', float('nan')):.4f} "
                  f"valid R@5 {m.get('valid_recall_5', float('nan')):.4f}", file=sys.stderr, flush=True)


def _ms(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.4f}"
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=["ml-100k", "synthetic"], default="ml-100k")
    ap.add_argument("--kinds", nargs="+", default=["preferdiff", "dreamrec", "sasrec_ce", "popularity"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--patience", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--sasrec-lr", type=float, default=None, help="lr for sasrec_ce (default: --lr)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lam", type=float, default=0.4)
    ap.add_argument("--guidance-w", type=float, default=2.0)
    ap.add_argument("--exclude-history", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    ap.add_argument("--csv", default="", help="also write rows to this CSV file")
    ap.add_argument("-v", "--verbose", action="store_true", help="per-epoch lines on stderr")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)

    df = load_movielens_100k() if a.dataset == "ml-100k" else synthetic_interactions(seed=a.split_seed)
    ds = build_dataset(df, seed=a.split_seed, source=a.dataset)
    st = ds.stats()
    print(f"# {a.dataset}: {st['n_users']} users, {st['n_items']} items, {st['n_interactions']} interactions; "
          f"users train/valid/test {st['n_train_users']}/{st['n_valid_users']}/{st['n_test_users']} "
          f"(split seed {a.split_seed}); max history {st['max_history']}")
    print(f"# dim {a.dim}, lr {a.lr}, batch {a.batch_size}, epochs <= {a.epochs}, patience {a.patience}, "
          f"lam {a.lam}, gamma 5, w {a.guidance_w}, T 2000, DDIM 20 steps, seeds {a.seeds}, "
          f"exclude history in ranking: {a.exclude_history}")
    rows = []
    for kind in a.kinds:
        per: dict[str, list[float]] = {"recall@10": [], "ndcg@10": [], "recall@20": [], "ndcg@20": [],
                                       "best_epoch": [], "epochs": [], "seconds": []}
        for seed in (a.seeds if kind != "popularity" else a.seeds[:1]):
            lr = a.sasrec_lr if (kind == "sasrec_ce" and a.sasrec_lr) else a.lr
            cfg = TrainConfig.from_params({
                "model_kind": kind, "epochs": a.epochs, "patience": a.patience, "dim": a.dim, "lr": lr,
                "batch_size": a.batch_size, "lam": a.lam, "guidance_w": a.guidance_w, "seed": seed,
                "exclude_history": a.exclude_history})
            t0 = time.perf_counter()
            r = train(cfg, ds, _Log(f"{kind} s{seed}", a.verbose))
            dt = time.perf_counter() - t0
            for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
                per[k].append(r.test_metrics[k])
            per["best_epoch"].append(r.best_epoch)
            per["epochs"].append(r.epochs_run)
            per["seconds"].append(dt)
            print(f"  {kind:<10} seed {seed}: test R@10 {r.test_metrics['recall@10']:.4f} "
                  f"N@10 {r.test_metrics['ndcg@10']:.4f}  best epoch {r.best_epoch}/{r.epochs_run}  {dt:.0f}s",
                  flush=True)
        rows.append((kind, per))

    print()
    hdr = f"| {'model':<10} | {'Recall@10':<17} | {'NDCG@10':<17} | {'Recall@20':<17} | {'NDCG@20':<17} " \
          f"| best ep (valid R@5) | epochs run | s/run |"
    print(hdr)
    print("|" + "|".join("-" * (len(c)) for c in hdr.split("|")[1:-1]) + "|")
    base = next((statistics.mean(p["ndcg@10"]) for k, p in rows if k == "dreamrec"), None)
    for kind, p in rows:
        print(f"| {kind:<10} | {_ms(p['recall@10']):<17} | {_ms(p['ndcg@10']):<17} | {_ms(p['recall@20']):<17} "
              f"| {_ms(p['ndcg@20']):<17} | {statistics.mean(p['best_epoch']):<19.1f} "
              f"| {statistics.mean(p['epochs']):<10.1f} | {statistics.mean(p['seconds']):<5.0f} |")
    if base:
        print()
        for kind, p in rows:
            print(f"NDCG@10 {kind} / dreamrec = {statistics.mean(p['ndcg@10']) / base:.3f}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["dataset", "model", "seed_index", "recall@10", "ndcg@10", "recall@20", "ndcg@20",
                        "best_epoch", "epochs_run", "seconds"])
            for kind, p in rows:
                for i in range(len(p["ndcg@10"])):
                    w.writerow([a.dataset, kind, i, p["recall@10"][i], p["ndcg@10"][i], p["recall@20"][i],
                                p["ndcg@20"][i], p["best_epoch"][i], p["epochs"][i], round(p["seconds"][i], 1)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
