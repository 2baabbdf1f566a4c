"""Cross-check praxon's Ehrlich functions against holo-bench's reference implementation (issue 13).

The reference is the `pytorch-holo` package (holo-bench's release on PyPI). It pins numpy<2, which this project's
environment does not allow, so it goes in an environment of its own; the script loads praxon's oracle module by
its path (it needs numpy alone), so it runs there without the rest of the project:

    python3.11 -m venv /tmp/holo-env
    /tmp/holo-env/bin/pip install torch==2.13.0 "numpy<2" pytorch-holo
    /tmp/holo-env/bin/python benchmarks/design/holo_crosscheck.py

`--holo-src DIR` runs holo-bench's source from a checkout instead (its git HEAD, newer than the release), in either
environment. Nothing of holo-bench is copied into this repository.

For every size and seed it builds holo-bench's `Ehrlich`, loads its transition matrix, motifs and spacings into
praxon's `Ehrlich` (services/design/gameopt/oracles.py; the random draws differ between the two, so the parameters
are shared, not the seed), and compares feasibility and values on uniform random sequences, holo-bench's DMP
initial solutions, its optimal solution and every single-site mutant of it (partial motifs). Expected differences,
printed separately: holo-bench scores infeasible sequences -inf where praxon scores 0, and it quantises motif
presence as (count // ceil(k/q)) / (k / ceil(k/q)) where praxon keeps the paper's floor(q * count / k) / q; the two
agree when q divides k (the default q = k), and the sizes with q not dividing k count the rows where they differ.
Exit status 1 if any disagreement other than those two is found.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import torch

ORACLES = Path(__file__).resolve().parents[2] / "services" / "design" / "gameopt" / "oracles.py"


def load_praxon_ehrlich():
    """praxon's Ehrlich class from oracles.py alone (numpy only), without importing the services package."""
    spec = importlib.util.spec_from_file_location("praxon_oracles", ORACLES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module.Ehrlich


Ehrlich = load_praxon_ehrlich()

# (num_states, length, num_motifs, motif_length, quantization)
SIZES = [(5, 7, 1, 3, 3), (8, 12, 2, 3, 3), (20, 12, 2, 4, 4), (20, 32, 2, 4, 4), (20, 32, 4, 4, 4),
         (32, 32, 2, 4, 4), (20, 64, 4, 8, 8), (20, 32, 2, 4, 2), (20, 32, 2, 4, 3)]


def load_holo(src: Path | None):
    """holo-bench's Ehrlich class: from the installed pytorch-holo, or from a source tree. In a source tree,
    holo/test_functions/__init__.py also imports the lookup benchmarks (pooch and pandas, to download data sets);
    the closed-form functions need neither, so the two package modules above them are registered empty and only
    closed_form and elemental are executed."""
    if src is None:
        try:
            from holo.test_functions.closed_form import Ehrlich as HoloEhrlich
        except ImportError:
            raise SystemExit("pytorch-holo is not installed in this environment: install it in its own environment "
                             "(see this script's docstring) or pass --holo-src") from None
        return HoloEhrlich
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
    ap.add_argument("--holo-src", type=Path, help="a holo-bench source tree (default: the installed pytorch-holo)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=500, help="uniform and DMP sequences per function")
    args = ap.parse_args()
    HoloEhrlich = load_holo(args.holo_src)
    if args.holo_src is None:
        from importlib.metadata import version
        print(f"reference: pytorch-holo {version('pytorch-holo')}, numpy {np.__version__}, torch {torch.__version__}")
    else:
        print(f"reference: holo-bench source at {args.holo_src}")
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
