"""Recommendation quality on MovieLens-100k under both split protocols, every model, several seeds, masked and
unmasked full ranking: the table of issue 15.

Protocols (services.recommendation.data): `leave_one_out` (RecBole / SASRec: every user, last item = test, the one
before = validation, every earlier next item trains; history = the last 10 items; full ranking over all 1682 items)
and `user_split` (DreamRec / PreferDiff: users 8/1/1). Every model is trained by the job's own training loop
(services.recommendation.training.fit, the TrainRun steps) with the kind's defaults (params.KIND_DEFAULTS: RecBole's
for sasrec_ce / gru4rec, the official PreferDiff trainer's for preferdiff / dreamrec) unless overridden here.

Models: popularity, sasrec_ce, gru4rec, dreamrec (DreamRec: MSE, lambda = 1), dreamrec_cos (the paper's cosine
ablation: lambda = 1, cosine error), preferdiff (lambda 0.4, gamma 5, w 2).

Prints, per protocol and model, mean +- standard error over seeds of NDCG@10 and Recall@10, unmasked and masked
(every earlier item of the user excluded, as RecBole masks), the best epoch, epochs run, seconds to the best epoch and
per run; the SASRec anchor check (RecBole 1.2.1 SASRec, leave_one_out, unmasked: NDCG@10 0.0598 +- 0.0017, measured
for issue 15); NDCG@10 ratios against DreamRec (MSE) and SASRec. Optionally writes a CSV.

    .venv/bin/python benchmarks/recommendation/quality.py --protocols leave_one_out --kinds popularity sasrec_ce \\
        --seeds 0 1 2 --set sasrec_ce.batch_size=256 --set sasrec_ce.dropout=0.2 --set sasrec_ce.epochs=4
    .venv/bin/python benchmarks/recommendation/quality.py --kinds preferdiff dreamrec --set dim=128 --set lr=1e-3
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time

import torch

from services.recommendation.data import build_dataset, load_movielens_100k, synthetic_interactions
from services.recommendation.params import TrainParams
from services.recommendation.training import fit

ANCHOR = {"sasrec_ce": (0.0598, 0.0017), "gru4rec": (0.0588, None)}  # RecBole 1.2.1, leave_one_out, unmasked
LABELS = {"dreamrec_cos": ("dreamrec", {"loss_type": "cosine"})}
ALL_KINDS = ["popularity", "sasrec_ce", "gru4rec", "dreamrec", "dreamrec_cos", "preferdiff"]
COLUMNS = ("ndcg@10", "recall@10", "masked_ndcg@10", "masked_recall@10")


def _mse(xs: list[float]) -> tuple[float, float]:
    m = statistics.mean(xs)
    return m, (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan"))


def _cell(xs: list[float]) -> str:
    m, se = _mse(xs)
    return f"{m:.4f}" if math.isnan(se) else f"{m:.4f} ± {se:.4f}"


def _overrides(items: list[str]) -> dict[str, dict]:
    """--set KEY=JSON (every kind) or --set KIND.KEY=JSON."""
    out: dict[str, dict] = {"*": {}}
    for item in items:
        key, _, value = item.partition("=")
        try:
            v = json.loads(value)
        except json.JSONDecodeError:
            v = value
        kind, _, name = key.rpartition(".")
        out.setdefault(kind or "*", {})[name] = v
    return out


def config_for(label: str, seed: int, over: dict[str, dict]) -> TrainParams:
    kind, extra = LABELS.get(label, (label, {}))
    params = {"model_kind": kind, "seed": seed, **extra}
    if kind != "popularity":
        params.update(over.get("*", {}))
    params.update(over.get(label, {}))
    return TrainParams.model_validate(params)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=["ml-100k", "synthetic"], default="ml-100k")
    ap.add_argument("--protocols", nargs="+", default=["leave_one_out", "user_split"],
                    choices=["leave_one_out", "user_split"])
    ap.add_argument("--kinds", nargs="+", default=ALL_KINDS, choices=ALL_KINDS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--split-seed", type=int, default=0, help="user_split permutation seed")
    ap.add_argument("--set", action="append", default=[], metavar="[KIND.]KEY=VALUE",
                    help="override a training parameter (all kinds but popularity, or one kind)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--csv", default="", help="also write one row per run to this CSV file")
    ap.add_argument("-v", "--verbose", action="store_true", help="per-epoch lines on stderr")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    over = _overrides(a.set)
    df = load_movielens_100k() if a.dataset == "ml-100k" else synthetic_interactions(seed=a.split_seed)
    runs: list[dict] = []
    for protocol in a.protocols:
        ds = build_dataset(df, seed=a.split_seed, source=a.dataset, protocol=protocol)
        st = ds.stats()
        print(f"# {a.dataset} {protocol}: {st['n_users']} users, {st['n_items']} items, {st['n_interactions']} "
              f"interactions; train/valid/test users {st['n_train_users']}/{st['n_valid_users']}/"
              f"{st['n_test_users']}, {st['n_train_samples']} every-prefix training samples; history "
              f"{st['max_history']}; full ranking; seeds {a.seeds}", flush=True)
        for label in a.kinds:
            for seed in (a.seeds if label != "popularity" else a.seeds[:1]):
                cfg = config_for(label, seed, over)
                t0 = time.perf_counter()

                def log(e, m, label=label, seed=seed, t0=t0, protocol=protocol):
                    if a.verbose:
                        print(f"  [{protocol} {label} s{seed}] epoch {e}: loss {m['loss']:.4f} valid N@10 "
                              f"{m['valid_ndcg_10']:.4f} R@5 {m['valid_recall_5']:.4f} "
                              f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
                r = fit(cfg, ds, on_epoch=log)
                dt = time.perf_counter() - t0
                runs.append({"protocol": protocol, "model": label, "seed": seed, **r.test_metrics,
                             "best_epoch": r.best_epoch, "epochs_run": r.epochs_run,
                             "seconds_to_best": r.seconds_to_best, "seconds": dt,
                             "config": {k: v for k, v in cfg.training_fields().items()
                                        if k in ("dim", "lr", "batch_size", "epochs", "dropout", "lam",
                                                 "guidance_w", "loss_type", "train_samples", "optimizer",
                                                 "early_stop_metric", "layers")}})
                print(f"  {protocol:<13} {label:<12} seed {seed}: N@10 {r.test_metrics['ndcg@10']:.4f} "
                      f"R@10 {r.test_metrics['recall@10']:.4f} | masked N@10 {r.test_metrics['masked_ndcg@10']:.4f}"
                      f" | best epoch {r.best_epoch}/{r.epochs_run} | {dt:.0f}s  {runs[-1]['config']}", flush=True)
    for protocol in a.protocols:
        rows = [r for r in runs if r["protocol"] == protocol]
        print(f"\n## {a.dataset}, {protocol} (test users; mean ± standard error over seeds)\n")
        print("| model | NDCG@10 | Recall@10 | masked NDCG@10 | masked Recall@10 | best epoch | epochs run "
              "| s to best | s/run | seeds |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        means: dict[str, float] = {}
        for label in a.kinds:
            rs = [r for r in rows if r["model"] == label]
            if not rs:
                continue
            means[label] = statistics.mean(r["ndcg@10"] for r in rs)
            cells = " | ".join(_cell([r[c] for r in rs]) for c in COLUMNS)
            print(f"| {label} | {cells} | {statistics.mean(r['best_epoch'] for r in rs):.1f} "
                  f"| {statistics.mean(r['epochs_run'] for r in rs):.1f} "
                  f"| {statistics.mean(r['seconds_to_best'] for r in rs):.0f} "
                  f"| {statistics.mean(r['seconds'] for r in rs):.0f} | {len(rs)} |")
        if protocol == "leave_one_out":
            for label, (ref, ref_sd) in ANCHOR.items():
                rs = [r["ndcg@10"] for r in rows if r["model"] == label]
                if rs:
                    m, se = _mse(rs)
                    verdict = "n/a (one seed)" if math.isnan(se) else \
                        ("within one SE" if abs(m - ref) <= se else f"{(m - ref) / se:+.1f} SE")
                    print(f"\n{label} NDCG@10 {m:.4f} vs RecBole {ref:.4f}"
                          f"{'' if ref_sd is None else f' ± {ref_sd:.4f}'}: ratio {m / ref:.3f}, {verdict}")
        for base in ("dreamrec", "sasrec_ce"):
            if means.get(base):
                print(f"\nNDCG@10 / {base}: " + ", ".join(f"{k} {v / means[base]:.3f}" for k, v in means.items()))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            keys = ["protocol", "model", "seed", *COLUMNS, "ndcg@20", "recall@20", "best_epoch", "epochs_run",
                    "seconds_to_best", "seconds", "config"]
            w.writerow(keys)
            for r in runs:
                w.writerow([json.dumps(r[k]) if k == "config" else r[k] for k in keys])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
