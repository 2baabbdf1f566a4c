"""Guided flow sampling, measured: reward gained vs distance from the prior, and wall time, for OC-Flow, D-Flow,
FlowGrad (equal compute: the same iterations, each one forward simulation and one backward pass through every
step) and EFM (a flow trained for q ~ p exp(-beta E) with E = -reward / weight, sampled without guidance; its
training time is reported apart), Euclidean and SO(3), in one run.

Euclidean: the exact flow of the 8-mode ring (services/design/flows/mixture.py), reward -w ||x - (4, 0)||^2, so the
log-density under the prior is exact. SO(3): a rotation flow trained here on the built-in rotation mixture, reward
tr(T^T R) - 3 = -||R - T||_F^2 / 2 toward a target rotation T; its EFM flow is trained alike with the loss weighted by
exp(-beta E), E = ||R - T||_F^2 / 2 and beta = 1 (so q ~ p exp(reward)). Columns:
  gain        mean reward minus the unguided samples' mean reward
  logp        mean log-density of the samples under the prior (Euclidean)
  on-support  share above the unguided 5th percentile of log-density (Euclidean), or (SO(3)) share whose geodesic
              distance to the nearest rotation of a second, independent unguided draw is within that draw's own
              95th percentile of leave-one-out nearest-neighbour distance (no sample is scored against itself)
  W2          2-Wasserstein distance to the unguided samples (exact assignment; geodesic on SO(3))
  time        wall seconds of the guidance (EFM: sampling; training apart)

    .venv/bin/python benchmarks/design/guided_flow.py            # full: 512 samples, 50 steps, 30 iterations
    .venv/bin/python benchmarks/design/guided_flow.py --quick    # reduced: 128 samples, 20 steps, 10 iterations"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from services.design.flows import geometry as so3
from services.design.flows import guidance as G
from services.design.flows import training as T
from services.design.flows.mixture import builtin_gmm2d
from services.design.flows.models import AnalyticGMMFlow, SO3VelocityMLP, VelocityMLP
from services.design.flows.rewards import Reward, Term

D64 = torch.float64


def w2(a: torch.Tensor, b: torch.Tensor, geodesic: bool = False) -> float:
    if geodesic:
        cost = torch.arccos(((torch.einsum("aij,bij->ab", a, b) - 1) / 2).clamp(-1, 1)) ** 2
    else:
        cost = torch.cdist(a, b) ** 2
    c = cost.numpy()
    r, k = linear_sum_assignment(c)
    return float(np.sqrt(c[r, k].mean()))


def guide_run(guide, iterations: int):
    t = time.perf_counter()
    for _ in range(iterations):
        guide.iterate()
    x = guide.samples()
    return x, time.perf_counter() - t


def euclidean(args, rows):
    mix = builtin_gmm2d(D64)
    flow = AnalyticGMMFlow(mix)
    target, weight = torch.tensor([4.0, 0.0], dtype=D64), args.weight
    reward = Reward("euclidean", 2, [Term("distance", weight, target)])
    z0 = torch.randn(args.n, 2, generator=torch.Generator().manual_seed(args.seed), dtype=D64)
    t0 = time.perf_counter()
    plain = G.sample_plain(flow, z0, args.steps)
    t_plain = time.perf_counter() - t0
    lp = flow.log_prob(plain)
    q05, r0 = lp.quantile(0.05), reward(plain).mean()

    def row(method, x, secs, note=""):
        lpx = flow.log_prob(x)
        rows.append(("R^2 ring", method, float(reward(x).mean() - r0), float(lpx.mean()),
                     float((lpx >= q05).double().mean()), w2(x, plain), secs, note))
    row("unguided", plain, t_plain)
    for method, lam in [("oc_flow", args.lam), ("flowgrad", 0.0), ("d_flow", 0.0)]:
        x, secs = guide_run(G.EuclideanGuide(flow, reward, z0, steps=args.steps, lam=lam, lr=args.lr,
                                             method=method), args.iterations)
        row(method, x, secs, f"lambda={lam:g}")
    # EFM: q ~ p exp(reward) = p exp(-beta E) with E = ||x - c||^2 / 2 and beta = 2 w
    beta = 2 * weight
    data = mix.sample(8192, torch.Generator().manual_seed(1)).float()
    torch.manual_seed(args.seed)
    model = VelocityMLP(2, 64, 3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t0 = time.perf_counter()
    for i in range(args.efm_steps):
        g = torch.Generator().manual_seed(i)
        x1 = data[torch.randint(0, len(data), (512,), generator=g)]
        loss = T.efm_loss(model, x1, g, T.quadratic_energy(x1, target.float()), beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    x = G.sample_plain(model.double(), z0, args.steps)
    row("efm", x, time.perf_counter() - t0, f"beta={beta:g}, training {t_train:.1f}s")


def train_rotation_flow(args, data: torch.Tensor, center: torch.Tensor | None = None, beta: float = 1.0):
    """A rotation flow on the built-in mixture: geodesic CFM, or EFM toward the centre rotation when given."""
    torch.manual_seed(args.seed)
    model = SO3VelocityMLP(64, 3)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for i in range(args.so3_train_steps):
        g = torch.Generator().manual_seed(i)
        x1 = data[torch.randint(0, len(data), (256,), generator=g)]
        if center is None:
            loss = T.so3_cfm_loss(model, x1, g)
        else:
            loss = T.so3_efm_loss(model, x1, g, T.so3_quadratic_energy(x1, center), beta)
        opt.zero_grad()
        loss.backward()
        opt.step()
    flow = model.double()
    for p in flow.parameters():
        p.requires_grad_(False)
    return flow


def rotations(args, rows):
    data = T.so3_mixture_data(4096, torch.Generator().manual_seed(0)).float()
    flow = train_rotation_flow(args, data)
    quat = torch.tensor([0.0, 0.0, 0.38268343, 0.92387953], dtype=D64)
    reward = Reward("so3", 3, [Term("distance", 1.0, quat)])
    R0 = so3.uniform(args.n, torch.Generator().manual_seed(args.seed))
    ts = G.time_grid(args.steps, D64)
    t0 = time.perf_counter()
    plain = G.so3_simulate(flow, R0, None, ts)[-1]
    t_plain = time.perf_counter() - t0
    # on-support reference: a second, independent unguided draw (no sample is scored against itself)
    ref = G.so3_simulate(flow, so3.uniform(args.n, torch.Generator().manual_seed(args.seed + 1)), None, ts)[-1]
    thr = G.so3_nn_distance(ref, ref, exclude_self=True).quantile(0.95)
    r0 = reward(plain).mean()

    def row(method, R, secs, note=""):
        orth = float(so3.orthogonality_error(R))
        rows.append(("SO(3)", method, float(reward(R).mean() - r0), float("nan"),
                     float((G.so3_nn_distance(R, ref) <= thr).double().mean()), w2(R, plain, geodesic=True), secs,
                     f"{note} |RtR-I|={orth:.1e}".strip()))
    row("unguided", plain, t_plain)
    for method, lam in [("oc_flow", args.lam), ("flowgrad", 0.0), ("d_flow", 0.0)]:
        R, secs = guide_run(G.SO3Guide(flow, reward, R0, steps=args.steps, lam=lam, lr=args.lr, method=method),
                            args.iterations)
        row(method, R, secs, f"lambda={lam:g}")
    # EFM: q ~ p exp(reward) = p exp(-beta E) with E = ||R - T||_F^2 / 2 = -reward and beta = 1 (the reward's weight)
    beta = 1.0
    t0 = time.perf_counter()
    efm = train_rotation_flow(args, data, so3.from_quat(quat).float(), beta)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    R = G.so3_simulate(efm, R0, None, ts)[-1]
    row("efm", R, time.perf_counter() - t0, f"beta={beta:g}, training {t_train:.1f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lam", type=float, default=0.05)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--weight", type=float, default=0.25, help="reward weight w (EFM's beta = 2 w)")
    args = ap.parse_args()
    args.n, args.steps, args.iterations = (128, 20, 10) if args.quick else (512, 50, 30)
    args.efm_steps, args.so3_train_steps = (600, 300) if args.quick else (2000, 1500)
    torch.set_num_threads(1)
    rows: list[tuple] = []
    euclidean(args, rows)
    rotations(args, rows)
    print(f"n={args.n} steps={args.steps} iterations={args.iterations} lr={args.lr} (equal compute for the guided "
          f"methods; one thread)")
    print(f"{'space':9} {'method':9} {'gain':>8} {'logp':>8} {'on-supp':>8} {'W2':>7} {'time s':>8} "
          f"{'x unguided':>10}  note")
    base = {r[0]: r[6] for r in rows if r[1] == "unguided"}
    for space, method, gain, logp, sup, dist, secs, note in rows:
        ratio = secs / base[space] if base[space] and secs == secs else float("nan")
        print(f"{space:9} {method:9} {gain:8.3f} {logp:8.3f} {sup:8.3f} {dist:7.3f} {secs:8.2f} {ratio:10.1f}  {note}")


if __name__ == "__main__":
    main()
