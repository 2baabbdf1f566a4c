"""The audit table: empirical epsilon lower bounds beside the epsilon each mechanism claims (its upper bound).

Rows:
  dpsgd, k        the hidden-state canary audit (Cebere et al.): DP-SGD through Opacus on a small softmax problem,
                  a crafted gradient C e_j inserted every k steps, `--runs` trainings per side, a score from the
                  final model only; eps upper = Opacus's accountant (PRV) for (sigma, q, T, delta)
  dpsgd broken    the same with the noise multiplier divided by 10 in training (the claim unchanged): eps lower
                  above eps upper means the audit caught it
  output pert.    the certified unlearning mechanism (Gaussian output perturbation at the certificate's sigma)
                  with the pre-noise pair at the sensitivity bound 2r: the worst case the certificate covers
Each bound at joint confidence 1 - alpha (each one-sided Clopper-Pearson bound at alpha / 2); threshold chosen
on half of the runs, counted on the other half.

    .venv/bin/python benchmarks/unlearning/audit.py                 # runs=500 per side
    .venv/bin/python benchmarks/unlearning/audit.py --runs 2000 --csv audit.csv
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.unlearning import audit, certified, dpsgd


def data(n: int = 32, d: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    X = X / X.norm(dim=1, keepdim=True)
    return X, (X[:, 0] > 0).long()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--csv", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    X, y = data()
    rows = []

    def dp_row(label, cfg, k, scale=1.0):
        t0 = time.perf_counter()
        a = dpsgd.hidden_state_canary_audit(X, y, 2, cfg, runs=args.runs, canary_every=k, alpha=args.alpha,
                                            noise_scale=scale, seed=7)
        rows.append({"mechanism": label, "q": cfg.sample_rate, "T": cfg.steps, "sigma": cfg.noise_multiplier,
                     "k": k, "runs": args.runs, "eps_lower": a.eps_lower, "eps_upper": a.accountant_epsilon,
                     "ratio": a.ratio, "violated": a.epsilon_audit["violated"], "s": time.perf_counter() - t0})
        print_row(rows[-1])

    full = dpsgd.DpSgdConfig(noise_multiplier=1.0, max_grad_norm=1.0, steps=4, sample_rate=1.0, lr=0.5, delta=1e-5)
    sub = dpsgd.DpSgdConfig(noise_multiplier=1.0, max_grad_norm=1.0, steps=8, sample_rate=0.5, lr=0.5, delta=1e-5)
    print(f"{'mechanism':<18}{'q':>5}{'T':>4}{'sigma':>7}{'k':>4}{'runs':>6}{'eps lower':>11}{'eps upper':>11}"
          f"{'ratio':>7}{'caught':>8}{'s':>7}")
    for k in (1, 2, 4):
        dp_row("dpsgd", full, k)
    dp_row("dpsgd", sub, 1)
    dp_row("dpsgd broken/10", full, 1, scale=0.1)

    # output perturbation of the certified mechanism, the pre-noise pair at distance 2r
    r, eps, delta = 1e-3, 1.0, 1e-5
    sigma, _, _ = certified.noise_sigma(r, eps, delta)
    p = 50
    theta_o = torch.zeros(p, dtype=torch.float64)
    theta_w = theta_o.clone()
    theta_w[0] = 2 * r
    for label, s in (("output pert.", sigma), ("output pert. /50", sigma / 50)):
        t0 = time.perf_counter()
        a = audit.audit_gaussian_outputs(theta_w, theta_o, s, runs=args.runs, delta=delta, seed=7, alpha=args.alpha,
                                         claimed_epsilon=eps)
        rows.append({"mechanism": label, "q": "", "T": "", "sigma": s, "k": "", "runs": args.runs,
                     "eps_lower": a.eps_lower, "eps_upper": eps, "ratio": a.eps_lower / eps, "violated": a.violated,
                     "s": time.perf_counter() - t0})
        print_row(rows[-1])
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def print_row(r: dict) -> None:
    sig = f"{r['sigma']:.3g}" if isinstance(r["sigma"], float) else str(r["sigma"])
    print(f"{r['mechanism']:<18}{r['q']!s:>5}{r['T']!s:>4}{sig:>7}{r['k']!s:>4}{r['runs']:>6}"
          f"{r['eps_lower']:>11.2f}{r['eps_upper']:>11.2f}{r['ratio']:>7.2f}{str(r['violated']):>8}{r['s']:>7.1f}",
          flush=True)


if __name__ == "__main__":
    main()
