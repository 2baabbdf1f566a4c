"""Cross-check praxon's Ehrlich functions against holo-bench's reference implementation (issue 13).

pytorch-holo is not on this environment's package index, so the check runs holo-bench's own source from a checkout
given on the command line (nothing of it is copied into this repository):

    git clone https://github.com/prescient-design/holo-bench /tmp/holo-bench      # or any copy of its source
    .venv/bin/python benchmarks/design/holo_crosscheck.py --holo-src /tmp/holo-bench

For every size and seed it builds holo-bench's `Ehrlich`, loads its transition matrix, motifs and spacings into
`services.design.gameopt.oracles.Ehrlich` (the random draws differ between the two, so the parameters are shared,
not the seed), and compares feasibility and values on uniform random sequences, holo-bench's DMP initial solutions,
its optimal solution and every single-site mutant of it (partial motifs). Expected differences, printed separately:
holo-bench scores infeasible sequences -inf where praxon scores 0, and it quantises motif presence as
(count // ceil(k/q)) / (k / ceil(k/q)) where praxon keeps the paper's floor(q * count / k) / q; the two agree when q
divides k (the default q = k), and the sizes with q not dividing k count the rows where they differ.
Exit status 1 if any disagreement other than those two is found.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from services.design.gameopt.oracles import Ehrlich  # noqa: E402

# (num_states, length, num_motifs, motif_length, quantization)
SIZES = [(5, 7, 1, 3, 3), (8, 12, 2, 3, 3), (20, 12, 2, 4, 4), (20, 32, 2, 4, 4), (20, 32, 4, 4, 4),
         (32, 32, 2, 4, 4), (20, 64, 4, 8, 8), (20, 32, 2, 4, 2), (20, 32, 2, 4, 3)]


def load_holo(src: Path):
    """holo-bench's Ehrlich class from a source tree. holo/test_functions/__init__.py also imports the lookup
    benchmarks (pooch and pandas, to download data sets); the closed-form functions need neither, so the two
    package modules above them are registered empty and only closed_form and elemental are executed."""
    pkg_root = src / "holo"
    if not (pkg_root / "test_functions" / "closed_form" / "_ehrlich.py").is_file():
        raise SystemExit(f"{src} is not a holo-bench source tree (no holo/test_functions/closed_form/_ehrlich.py)")
    for name, path in (("holo", pkg_root), ("holo.test_functions", pkg_root / "test_functions")):
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]
        sys.modules[name] = mod
    return importlib.import_module("holo.test_functions.closed_form._ehrlich").Ehrlich


def praxon_twin(h, v: int, L: int, c: int, k: int, q: int) -> Ehrlich:
    """praxon's Ehrlich of the same size carrying holo-bench's transition matrix, motifs and spacings."""
    ours = Ehrlich(num_states=v, length=L, num_motifs=c, motif_length=k, quantization=q, seed=0)
    ours.transitions = h.transition_matrix.double().numpy()
    ours.stationary = h.stationary_dist.double().numpy().reshape(-1)
    ours.motifs = [m.numpy().astype(np.int64) for m in h.motifs]
    # holo-bench stores the k-1 gaps between motif elements; praxon the k offsets from the first element
    ours.spacings = [np.concatenate([[0], np.cumsum(s.numpy())]).astype(np.int64) for s in h.spacings]
    return ours


def check(HoloEhrlich, v: int, L: int, c: int, k: int, q: int, seed: int, n: int) -> dict:
    h = HoloEhrlich(num_states=v, dim=L, num_motifs=c, motif_length=k, quantization=q, random_seed=seed)
    ours = praxon_twin(h, v, L, c, k, q)
    opt = h.optimal_solution().reshape(1, -1)
    mutants = opt.repeat(L * (v - 1), 1)
    row = 0
    for i in range(L):
        for a in range(v):
            if a != int(opt[0, i]):
                mutants[row, i] = a
                row += 1
    X = torch.cat([torch.randint(v, (n, L), generator=torch.Generator().manual_seed(seed)),
                   h.initial_solution(n), opt, mutants]).long()
    with torch.no_grad():
        hv = h.evaluate_true(X).double().numpy()
    pv = ours(X.numpy())
    h_feasible = np.isfinite(hv)
    p_feasible = ours.feasible(X.numpy())
    both = h_feasible & p_feasible
    diff = np.abs(hv[both] - pv[both]) > 1e-6  # holo-bench computes in float32 (1/3 is 0.33333334 there)
    return {"rows": len(X), "feasible": int(both.sum()), "feasibility_mismatch": int((h_feasible != p_feasible).sum()),
            "infeasible_zero": bool((pv[~p_feasible] == 0).all()), "value_mismatch": int(diff.sum()),
            "optimum": (float(hv[2 * n]), float(pv[2 * n]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--holo-src", type=Path, required=True, help="a holo-bench source tree (git clone)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=500, help="uniform and DMP sequences per function")
    args = ap.parse_args()
    HoloEhrlich = load_holo(args.holo_src)
    print(f"{'function':>22} {'seed':>4} {'rows':>5} {'feasible':>8} {'feas. mismatch':>14} {'value mismatch':>14} "
          f"{'optimum holo/praxon':>20}")
    bad = 0
    for v, L, c, k, q in SIZES:
        for seed in range(args.seeds):
            r = check(HoloEhrlich, v, L, c, k, q, seed, args.samples)
            name = f"ehrlich-{v}x{L}x{c}x{k} q={q}"
            expected_quantisation_gap = k % q != 0
            print(f"{name:>22} {seed:>4} {r['rows']:>5} {r['feasible']:>8} {r['feasibility_mismatch']:>14} "
                  f"{r['value_mismatch']:>14} {r['optimum'][0]:>9.3f}/{r['optimum'][1]:.3f}"
                  + ("   (q does not divide k: quantisations differ by design)" if expected_quantisation_gap else ""))
            bad += r["feasibility_mismatch"] + (0 if r["infeasible_zero"] else 1)
            if not expected_quantisation_gap:
                bad += r["value_mismatch"]
    print("agreement: " + ("every feasibility and value identical (q dividing k); infeasible = 0 in praxon, -inf in "
                           "holo-bench" if bad == 0 else f"{bad} unexpected disagreements"))
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
