"""GameOpt against its baselines on Ehrlich functions, in one harness (services.design.gameopt.optimizer.run_loop):
median and quartiles of the best value after 20, 50 and 120 evaluations over seeds, and the wall time per
suggestion batch. Every method starts from the same initial sequences of the same seeded function: n_init samples
of the Ehrlich function's discrete Markov process (`Ehrlich.initial_solution`, as holo-bench's `initial_solution`
does), so they are feasible; uniform sequences of length 32 over 20 letters are almost all infeasible (value 0). The
Ehrlich functions follow the paper and holo-bench's construction (see services/design/gameopt/oracles.py for where
they differ: 0 instead of -inf for infeasible sequences, numpy draws).

    .venv/bin/python benchmarks/design/gameopt.py                      # the issue's sizes: 10 seeds, up to 120 evals
    .venv/bin/python benchmarks/design/gameopt.py --seeds 3 --budget 50 --sizes 20x12x2x4 --rounds 100

Sizes are STATESxLENGTHxMOTIFSxMOTIF_LENGTH (default: the issue's 20x12x2x3, 20x32x4x4, 32x32x4x4 and holo-bench's
32x128x4x4). Methods: gameopt_hedge, gameopt_best_response (GameOpt at its defaults but --rounds/--games), gp_ucb_br
(the plain GP-UCB loop: one point per fit, iterated best response on UCB from the best observed sequence),
gp_ucb_br_batch (the same step, a batch per fit), random, mutation, ga, gp_ucb_pool, local_search (BoTorch's
discrete local search on the same UCB). As in holo-bench, no method is told the function's banned transitions (the
feasible set is unknown): GameOpt sees a failed (infeasible) evaluation as failed (NaN, as holo-bench's -inf) and
learns from it, the baselines see its value 0; every method is scored with 0 for it. GameOpt and the
surrogate-based baselines search within --trust-radius substitutions of the best observed sequence (0: no trust
region). The `feasible` column is the share of suggested sequences (not the initial ones) that are feasible; s/batch
is the wall time of one batch of suggestions (gp_ucb_br: of batch-size one-point steps, each with its own fit)."""
from __future__ import annotations

import argparse
import csv
import sys
import time
import warnings

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from services.design.gameopt.optimizer import METHODS, GameOptConfig, run_loop
from services.design.gameopt.oracles import Ehrlich

CHECKPOINTS = (20, 50, 120)
# issue 36: v=20 L=12 c=2 k=3, v=20 L=32 c=4 k=4, and holo-bench's paper settings v=32 c=4 k=4 at L=32 and L=128
SIZES = ("20x12x2x3", "20x32x4x4", "32x32x4x4", "32x128x4x4")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1 (to split a "
                    "long run into several processes)")
    ap.add_argument("--budget", type=int, default=120)
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--n-init", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=400, help="Hedge rounds per game")
    ap.add_argument("--games", type=int, default=0, help="games per batch (0: GameOpt's default, 3)")
    ap.add_argument("--trust-radius", type=int, default=2,
                    help="Hamming trust region around the best observed sequence for GameOpt and the surrogate-based "
                         "baselines (0: none)")
    ap.add_argument("--csv", help="also write the rows here")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
    cfg = GameOptConfig(rounds=args.rounds, games=args.games)
    radius = args.trust_radius or None
    # the initial sequences' best (every method's starting point), the issue's checkpoints, and the budget
    checkpoints = sorted({min(args.n_init, args.budget), args.budget} | {c for c in CHECKPOINTS if c < args.budget})
    rows = []
    print(f"{'function':>16} {'method':>22} " + " ".join(f"{'best@' + str(c):>18}" for c in checkpoints)
          + f" {'s/batch':>8} {'optimum hit':>11} {'feasible':>8}")
    for size in args.sizes.split(","):
        v, L, c, k = (int(x) for x in size.split("x"))
        for method in args.methods.split(","):
            traces = []
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                f = Ehrlich(num_states=v, length=L, num_motifs=c, motif_length=k, seed=seed)
                traces.append(run_loop(f, method, args.budget, args.batch_size, seed, n_init=args.n_init, config=cfg,
                                       trust_radius=radius))
            cells = []
            row = {"function": f"ehrlich-{size}", "method": method, "seeds": args.seeds}
            for cp in checkpoints:
                b = np.array([t.best_after(cp) for t in traces])
                q1, med, q3 = np.percentile(b, [25, 50, 75])
                cells.append(f"{med:.3f} [{q1:.3f},{q3:.3f}]")
                row.update({f"median@{cp}": med, f"q1@{cp}": q1, f"q3@{cp}": q3})
            secs = np.concatenate([t.batch_seconds for t in traces]) if traces else np.zeros(1)
            hit = np.mean([t.best_after(args.budget) >= 1.0 for t in traces])
            feas = float(np.mean(np.concatenate([t.suggested_feasible for t in traces]))) \
                if any(t.suggested_feasible for t in traces) else float("nan")
            row.update({"seconds_per_batch": float(np.mean(secs)), "optimum_rate": float(hit), "feasible_share": feas,
                        "trust_radius": radius or 0})
            rows.append(row)
            per_seed = [round(t.best_after(args.budget), 3) for t in traces]
            row["best_per_seed"] = " ".join(str(b) for b in per_seed)
            print(f"{'ehrlich-' + size:>16} {method:>22} " + " ".join(f"{x:>18}" for x in cells)
                  + f" {np.mean(secs):>8.2f} {hit:>11.0%} {feas:>8.0%}", flush=True)
            print(f"# seeds {args.first_seed}-{args.first_seed + args.seeds - 1} best@{args.budget}: {per_seed}",
                  flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=sorted({k for r in rows for k in r}))
            w.writeheader()
            w.writerows(rows)
    sys.stdout.flush()


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t0:.0f}s")
