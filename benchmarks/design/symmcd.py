"""SymmCD on real structures (issue 37): SymmCD vs pyxtal random crystals with compositions drawn from the data vs
the same model with symmetry removed (P1), side by side, measured against the held-out part of the built-in real set.

Data: the built-in set (services/design/crystals/data.py: every real structure that loads offline, no generated
supplement). Training uses its train split; the held-out reference is its val + test splits (no early stopping
reads val, so neither is seen in training). Both models are trained by the service's own training job with the same
data, steps and seed (the CPU setting unless flags say otherwise); every set is made by the service's generation job
(space groups drawn from the training distribution, 1..48 atoms).

Columns: symmcd (the default: up to 5 re-draws of a crystal failing the acceptance check: exact group, distances
> 0.5 A), symmcd_single (the paper's single draw, max_retries 0), symmcd_valid_comp (re-draws also on SMACT,
require_valid_composition), p1 (single draws: it cannot build a group in), pyxtal_random (single draws; a random
training crystal's reduced composition times a Z the group can hold).

Rows: space-group match (spglib, symprec 0.1, exactly the requested group), structural validity (all distances >
0.5 A, volume > 0.1 A^3), compositional validity (SMACT 4: ICSD-24 oxidation states, charge neutral, Pauling test;
an element or an alloy counts valid as in CDVAE), their conjunction (all three), the space-group histogram JSD and
the density and number-of-elements Wasserstein distances against the held-out set, novelty (not matched by
pymatgen's StructureMatcher to any training crystal of the same reduced formula, among structurally valid crystals),
uniqueness (not matched to an earlier crystal of the same set), single-element fraction, pymatgen's oxidation-state
guess (multi-element crystals with at least one guess: a stricter chemistry check than SMACT), crystals per second
(generation job time; P1's and SymmCD's include their re-draws), and the first-draw rates.

    nice -n 10 .venv/bin/python benchmarks/design/symmcd.py                                 # trains, then measures
    nice -n 10 .venv/bin/python benchmarks/design/symmcd.py --cache /tmp/b --train symmcd --train-only  # in steps
    nice -n 10 .venv/bin/python benchmarks/design/symmcd.py --cache /tmp/b --train p1 --train-only
    nice -n 10 .venv/bin/python benchmarks/design/symmcd.py --cache /tmp/b --only symmcd,symmcd_single

With --cache the trained models are kept there and reused by the next run (training and measuring can then be run
as two commands of a few minutes each on a loaded two-core machine).
"""
from __future__ import annotations

import argparse
import os
import pickle
import time
import warnings

import numpy as np
import torch

from services.common.jobcontext import InMemoryJobContext
from services.design.crystals import data as D
from services.design.crystals import generate as G
from services.design.crystals import jobs as J
from services.design.crystals import representation as R

METHODS = ("symmcd", "symmcd_single", "symmcd_valid_comp", "p1", "pyxtal_random")
ROWS = ("space_group_match_rate", "structural_validity", "compositional_validity", "all_three",
        "space_group_jsd", "density_wasserstein", "n_elements_wasserstein", "novelty", "uniqueness",
        "single_element_fraction", "oxidation_guess_rate", "crystals_per_second",
        "first_draw_space_group_match_rate", "first_draw_structural_validity", "first_draw_compositional_validity",
        "n_failed", "extra_draws")


def _structures(rows, cifs):
    return [R.parse_cif(c) if c else None for c in cifs]


def _matches(sm, s, pool) -> bool:
    return any(sm.fit(s, t) for t in pool)


def extra_metrics(rows, structures, train_by_formula) -> dict:
    """novelty, uniqueness, single-element fraction, oxidation-state guess rate, all three."""
    from pymatgen.analysis.structure_matcher import StructureMatcher

    sm = StructureMatcher()
    made = [(r, s) for r, s in zip(rows, structures, strict=True) if s is not None and not r["failed"]]
    valid = [(r, s) for r, s in made if r["structurally_valid"]]
    novel = [not _matches(sm, s, train_by_formula.get(s.composition.reduced_formula, [])) for _, s in valid]
    seen: dict[str, list] = {}
    unique = []
    for _, s in made:
        f = s.composition.reduced_formula
        unique.append(not _matches(sm, s, seen.get(f, [])))
        seen.setdefault(f, []).append(s)
    multi = [(r, s) for r, s in made if len(s.composition.elements) > 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        guess = [bool(s.composition.oxi_state_guesses(max_sites=-20)) for _, s in multi]
    n = len(rows)
    return {"novelty": float(np.mean(novel)) if novel else 0.0, "uniqueness": float(np.mean(unique)) if unique else 0.0,
            "single_element_fraction": float(np.mean([len(s.composition.elements) == 1 for _, s in made]))
            if made else 0.0,
            "oxidation_guess_rate": float(np.mean(guess)) if guess else 0.0,
            "all_three": float(sum(r["structurally_valid"] and r["compositionally_valid"] and r["space_group_match"]
                                   for r in rows) / n) if n else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="keep/reuse the trained models here")
    ap.add_argument("--steps", type=int, help="training steps (default: the CPU setting's)")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="comma-separated methods to measure (default: all)")
    ap.add_argument("--train-only", action="store_true")
    ap.add_argument("--train", default="symmcd,p1", help="models to train in this run (with --cache, the others are "
                    "trained by a later run)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    path = os.path.join(args.cache, "models.pkl") if args.cache else None
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            store = pickle.load(f)
        print(f"reusing {path}: {sorted(store['models'])}")
    else:
        ctx = InMemoryJobContext({"builtin": True, "seed": args.seed}, kind="design.crystals.import")
        data = J.run_import(ctx)
        store = {"artifacts": ctx.artifacts, "models": {}, "data": data, "train_seconds": {}}
    todo = [m for m in args.train.split(",") if m and m not in store["models"]]
    if todo:
        ctx = InMemoryJobContext({}, kind="design.crystals.train")
        ctx.artifacts = store["artifacts"]
        data = store["data"]
        for name, symmetric in (("symmcd", True), ("p1", False)):
            if name not in todo:
                continue
            t = time.perf_counter()
            params = {"dataset_artifact_id": data["dataset_artifact_id"], "symmetric": symmetric,
                      "model_name": f"bench-{name}", "seed": args.seed}
            if args.steps:
                params["steps"] = args.steps
            tc = InMemoryJobContext(params, kind="design.crystals.train")
            tc.artifacts = ctx.artifacts
            out = J.run_training(tc)
            store["models"][name] = (out["model_version_id"], tc.models[out["model_version_id"]])
            store["train_seconds"][name] = time.perf_counter() - t
            print(f"trained {name}: {tc.events[-2][1]}, {time.perf_counter() - t:.0f}s, val loss "
                  f"{out['metrics']['val_loss']:.3f}", flush=True)
            if path:
                os.makedirs(args.cache, exist_ok=True)
                with open(path, "wb") as f:
                    pickle.dump(store, f)
    data = store["data"]
    prov = {k: v["count"] for k, v in data["provenance"].items()}
    print(f"data: {data['n_crystals']} real crystals ({prov}), {data['n_space_groups']} space groups, split "
          f"{data['n_train']}/{data['n_val']}/{data['n_test']}; training: "
          + ", ".join(f"{k} {v:.0f}s" for k, v in store["train_seconds"].items()))
    if args.train_only:
        return
    ds = D.CrystalDataset.from_bytes(store["artifacts"][data["dataset_artifact_id"]][1])
    held = ds.subset("val") + ds.subset("test")
    train = ds.subset("train")
    ref = G.reference_stats(held)
    train_by_formula: dict[str, list] = {}
    for r in train:
        s = R.to_structure(r)
        train_by_formula.setdefault(s.composition.reduced_formula, []).append(s)
    # the held-out set itself through the same metrics (what real data scores)
    real_rows = []
    for r in held:
        s = R.to_structure(r)
        real_rows.append(G.evaluate(s, r.space_group, r.space_group))
    real = G.summarize(real_rows, ref, 0.0, len(held))
    real.update(extra_metrics(real_rows, [R.to_structure(r) for r in held], train_by_formula))
    summaries = {}
    methods = args.only.split(",") if args.only else METHODS
    for name in methods:
        params = {"n": args.samples, "batch_size": 25, "max_atoms": 48, "seed": args.seed + 1,
                  "reference_dataset_artifact_id": data["dataset_artifact_id"]}
        if name == "pyxtal_random":
            params.update(method="pyxtal_random")
        elif name == "p1":
            params.update(model_version_id=store["models"]["p1"][0], max_retries=0)
        else:
            params["model_version_id"] = store["models"]["symmcd"][0]
            params["max_retries"] = 0 if name == "symmcd_single" else 5
            params["require_valid_composition"] = name == "symmcd_valid_comp"
        gc = InMemoryJobContext(params, kind="design.crystals.generate")
        gc.artifacts = store["artifacts"]
        gc.models = {mv: m for mv, m in store["models"].values()}
        t = time.perf_counter()
        res = J.run_generation(gc)
        wall = time.perf_counter() - t
        # the summary's set-level distances against the held-out set (the job compares with the training set)
        rows = res["rows"]
        cifs = [gc.artifacts[r["cif_artifact_id"]][1].decode() if r["cif_artifact_id"] else "" for r in rows]
        s = G.summarize(rows, ref, res["summary"]["crystals_per_second"] and
                        res["summary"]["n_generated"] / res["summary"]["crystals_per_second"], args.samples)
        s.update(extra_metrics(rows, _structures(rows, cifs), train_by_formula))
        summaries[name] = s
        print(f"{name}: {wall:.0f}s", flush=True)
    print(f"\nreference: {len(held)} held-out real crystals (val + test); {args.samples} crystals per method, groups "
          "from the training distribution, 1..48 atoms; column 'held_out' scores the held-out crystals themselves "
          "(novelty there: not in the training split)")
    cols = [*summaries, "held_out"]
    print(f"{'metric':36}" + "".join(f"{n:>18}" for n in cols))
    for c in ROWS:
        cells = []
        for n in cols:
            v = (summaries.get(n) or real).get(c)
            cells.append(f"{'-' if v is None else (str(v) if isinstance(v, int) else f'{v:.3f}'):>18}")
        print(f"{c:36}" + "".join(cells))
    print(f"\ntotal {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
