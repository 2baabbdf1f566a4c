"""Unlearning vs retraining, per model kind and forget fraction, in- and out-of-distribution.

For each (kind, forget fraction, distribution) it trains the certified model on S (for OOD: the forget set's
labels shifted: classification -> next class, regression -> +offset), then measures
  - gradient evaluations (per-example gradients) and wall time of warm-start unlearning vs retraining from
    scratch, and their ratio (< 1: unlearning is cheaper)
  - the same for the robust variant (robust trimmed-mean training, trim = f each side; its one-off training
    cost is a separate column)
  - utility gap on held-out data (accuracy points; ridge: MSE difference), unlearned - retrained
  - loss-threshold MIA AUC on the forget set vs held-out data, before (trained) and after (unlearned)
  - the audit's empirical eps lower bound (unlearned vs retrained, noise redrawn `--runs` times per side, split
    selection) against the claimed eps, and the same for a broken mechanism (sigma / 50) as a power check
Non-convex (mlp_classifier): noisy fine-tuning (uncertified) vs retraining, same cost/utility/MIA columns.

    .venv/bin/python benchmarks/unlearning/run.py                # defaults: n=2000, d=20
    .venv/bin/python benchmarks/unlearning/run.py --n 4000 --csv out.csv
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.unlearning import approximate, audit, certified, robust
from services.unlearning.linear import LinearProblem
from services.unlearning.synthetic import blobs, regression, shift_labels


def _timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def _data(kind: str, n: int, n_eval: int, d: int, classes: int, seed: int):
    if kind == "ridge_l2":
        X, y = regression(n + n_eval, d, noise=0.1, seed=seed)
    else:
        X, y = blobs(n + n_eval, d, classes if kind == "softmax_l2" else 2, seed=seed)
        if kind == "logreg_l2":
            y = y.double()
    return X[:n], y[:n], X[n:], y[n:]


def _metric(p: LinearProblem, theta, X, y) -> float:
    u = p.utility(theta, X, y)
    return u["mse"] if p.kind == "ridge_l2" else u["accuracy"]


def convex_rows(args) -> list[dict]:
    rows = []
    for kind in args.kinds:
        if kind == "mlp_classifier":
            continue
        classes = args.classes if kind == "softmax_l2" else 2
        X, y, Xe, ye = _data(kind, args.n, args.n_eval, args.d, classes, args.seed)
        mu = args.mu_ridge if kind == "ridge_l2" else args.mu
        p = LinearProblem(kind, mu, args.d, classes if kind == "softmax_l2" else 1)
        kw = dict(radius=args.r, epsilon=args.epsilon, delta=args.delta)
        for frac in args.fractions:
            f = max(1, int(round(frac * args.n)))
            g = torch.Generator().manual_seed(args.seed + f)
            idx = torch.randperm(args.n, generator=g)[:f]
            keep = torch.ones(args.n, dtype=torch.bool)
            keep[idx] = False
            for dist in ("ID", "OOD"):
                yy = y if dist == "ID" else shift_labels(y, idx, num_classes=1 if kind == "ridge_l2" else classes,
                                                         offset=args.offset)
                tr = certified.train_certified(p, X, yy, **kw)
                un, t_un = _timed(certified.unlearn_certified, p, X[keep], yy[keep], tr.theta_private, **kw)
                re, t_re = _timed(certified.retrain_certified, p, X[keep], yy[keep], **kw)
                rob, t_rob_tr = _timed(robust.robust_train, p, X, yy, trim=robust.trim_count(args.n, f), seed=0,
                                       max_steps=args.robust_steps)
                unr, t_unr = _timed(certified.unlearn_certified, p, X[keep], yy[keep], rob.theta, **kw)
                reg = robust.classify_request(p, X[keep], yy[keep], tr.theta_private, radius=args.r)
                def per(th, problem=p):
                    return lambda A, b: problem.per_example_loss(th, A, b)
                ok = audit.audit_gaussian_outputs(un.theta_private, re.theta_private, un.certificate.sigma,
                                                  runs=args.runs, delta=args.delta, seed=3,
                                                  claimed_epsilon=args.epsilon)
                bad = audit.audit_gaussian_outputs(un.theta_private, re.theta_private, un.certificate.sigma / 50,
                                                   runs=args.runs, delta=args.delta, seed=3,
                                                   claimed_epsilon=args.epsilon)
                Xf, yf = X[~keep], yy[~keep]
                rows.append({
                    "kind": kind, "forget": f"{100 * frac:g}%", "f": f, "dist": dist, "regime": "ID" if reg.regime == "in_distribution" else "OOD",
                    "un_evals": un.certificate.grad_evals, "re_evals": re.certificate.grad_evals,
                    "ratio": un.certificate.grad_evals / re.certificate.grad_evals,
                    "t_ratio": t_un / t_re,
                    "rob_un_evals": unr.certificate.grad_evals,
                    "rob_ratio": unr.certificate.grad_evals / re.certificate.grad_evals,
                    "rob_train_evals": rob.grad_evals,
                    "util_gap": _metric(p, un.theta_published, Xe, ye) - _metric(p, re.theta_published, Xe, ye),
                    "util": _metric(p, re.theta_published, Xe, ye),
                    "mia_before": audit.loss_mia_auc(per(tr.theta_published), (Xf, yf), (Xe, ye)),
                    "mia_after": audit.loss_mia_auc(per(un.theta_published), (Xf, yf), (Xe, ye)),
                    "mia_retrain": audit.loss_mia_auc(per(re.theta_published), (Xf, yf), (Xe, ye)),
                    "dist_2r": float((un.theta_private - re.theta_private).norm()) / (2 * args.r),
                    "eps_lo": ok.eps_lower, "eps_lo_broken": bad.eps_lower, "eps": args.epsilon,
                })
    return rows


def mlp_rows(args) -> list[dict]:
    rows = []
    if "mlp_classifier" not in args.kinds:
        return rows
    X, y, Xe, ye = _data("softmax_l2", args.n, args.n_eval, args.d, args.classes, args.seed)
    X, Xe = X.float() * 3, Xe.float() * 3
    loss = torch.nn.functional.cross_entropy
    steps, bs, lr = args.mlp_steps, 64, 0.5

    def fresh():
        m = approximate.MLPClassifier(args.d, [32], args.classes)
        approximate.reset_parameters(m, 0)
        return m

    for frac in args.fractions:
        f = max(1, int(round(frac * args.n)))
        g = torch.Generator().manual_seed(args.seed + f)
        idx = torch.randperm(args.n, generator=g)[:f]
        keep = torch.ones(args.n, dtype=torch.bool)
        keep[idx] = False
        for dist in ("ID", "OOD"):
            yy = y if dist == "ID" else shift_labels(y, idx, num_classes=args.classes)
            base = fresh()
            approximate.sgd(base, loss, X, yy, steps=steps, lr=lr, batch_size=bs, seed=0)
            un = fresh()
            un.load_state_dict(base.state_dict())
            r_un, t_un = _timed(
                approximate.unlearn_approximate, "noisy_finetune", un, loss, retain=(X[keep], yy[keep]), forget=(X[~keep], yy[~keep]),
                steps=steps // 4, lr=lr / 2, batch_size=bs, seed=1, noise_std=1e-3)
            re = fresh()
            r_re, t_re = _timed(
                approximate.unlearn_approximate, "retrain", re, loss, retain=(X[keep], yy[keep]), forget=(X[~keep], yy[~keep]), steps=steps,
                lr=lr, batch_size=bs, seed=2)
            per = lambda m: approximate.per_example_loss_fn(m, loss)  # noqa: E731
            Xf, yf = X[~keep], yy[~keep]
            rows.append({
                "kind": "mlp (uncert.)", "forget": f"{100 * frac:g}%", "f": f, "dist": dist, "regime": "-",
                "un_evals": r_un.grad_evals, "re_evals": r_re.grad_evals, "ratio": r_un.grad_evals / r_re.grad_evals,
                "t_ratio": t_un / t_re, "rob_un_evals": math.nan, "rob_ratio": math.nan, "rob_train_evals": math.nan,
                "util_gap": approximate.accuracy(un, Xe, ye) - approximate.accuracy(re, Xe, ye),
                "util": approximate.accuracy(re, Xe, ye),
                "mia_before": audit.loss_mia_auc(per(base), (Xf, yf), (Xe, ye)),
                "mia_after": audit.loss_mia_auc(per(un), (Xf, yf), (Xe, ye)),
                "mia_retrain": audit.loss_mia_auc(per(re), (Xf, yf), (Xe, ye)),
                "dist_2r": math.nan, "eps_lo": math.nan, "eps_lo_broken": math.nan, "eps": math.nan,
            })
    return rows


COLUMNS = [("kind", "{:<14}"), ("forget", "{:>6}"), ("dist", "{:>4}"), ("regime", "{:>4}"), ("un_evals", "{:>9}"),
           ("re_evals", "{:>9}"), ("ratio", "{:>6.2f}"), ("t_ratio", "{:>7.2f}"), ("rob_ratio", "{:>9.2f}"),
           ("rob_train_evals", "{:>15}"), ("util", "{:>6.3f}"), ("util_gap", "{:>+9.4f}"), ("mia_before", "{:>10.3f}"),
           ("mia_after", "{:>9.3f}"), ("mia_retrain", "{:>11.3f}"), ("dist_2r", "{:>7.3f}"), ("eps_lo", "{:>6.3f}"),
           ("eps", "{:>4.1f}"), ("eps_lo_broken", "{:>13.2f}")]


def _width(fmt: str) -> int:
    spec = fmt[fmt.index(":") + 1:-1].lstrip("<>+")
    return int(spec.split(".")[0])


def _fmt(fmt: str, v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return f"{'-':>{_width(fmt)}}"
    return fmt.format(v)


def _hdr(col: str, fmt: str) -> str:
    return f"{col:<{_width(fmt)}}" if "<" in fmt else f"{col:>{_width(fmt)}}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=["logreg_l2", "softmax_l2", "ridge_l2", "mlp_classifier"])
    ap.add_argument("--fractions", nargs="+", type=float, default=[0.001, 0.01, 0.1])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--n-eval", type=int, default=1000)
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--mu", type=float, default=0.01)
    ap.add_argument("--mu-ridge", type=float, default=0.05)
    ap.add_argument("--r", type=float, default=1e-3)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--offset", type=float, default=100.0, help="ridge OOD label offset")
    ap.add_argument("--robust-steps", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1000, help="noise draws per side for the epsilon audit")
    ap.add_argument("--mlp-steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", type=Path)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = convex_rows(args) + mlp_rows(args)
    print(" ".join(_hdr(c, f) for c, f in COLUMNS))
    for row in rows:
        print(" ".join(_fmt(f, row[c]) for c, f in COLUMNS))
    print(f"\nratio = unlearning / retraining gradient evaluations (t_ratio: wall time); rob_ratio: after robust "
          f"training (trim = f each side), whose one-off cost is rob_train_evals. util: retrained eval accuracy "
          f"(ridge: MSE); util_gap: unlearned - retrained. dist_2r: ||theta_U - theta_R|| / 2r before noise. "
          f"eps_lo: audit lower bound ({args.runs} draws/side, split selection) vs claimed eps; eps_lo_broken: "
          f"same with sigma/50. regime: classify_request on the plain warm start. total {time.perf_counter() - t0:.0f}s")
    if args.csv:
        with args.csv.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
