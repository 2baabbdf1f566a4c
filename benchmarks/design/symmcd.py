"""SymmCD vs the same model with symmetry removed (P1) vs pyxtal random symmetric crystals, in one run and one
report format: structural and compositional validity, space-group match (spglib, symprec 0.1), the rate at which
spglib finds every operation of the requested group, space-group histogram JSD, density and element-count
Wasserstein distances to the training set, and crystals per second.

Everything runs in this process through the service's own job code (InMemoryJobContext): the built-in data set,
the training job (both models on the same data, steps and seed), the generation job. The column
"symmcd_strided" is the same SymmCD model sampled on T/4 of its timesteps (the generation job's sampling_steps:
strided ancestral sampling, model.SymmCD.sample).

    .venv/bin/python benchmarks/design/symmcd.py                      # default (CPU, several minutes)
    .venv/bin/python benchmarks/design/symmcd.py --reduced            # a few minutes on two cores
    .venv/bin/python benchmarks/design/symmcd.py --reduced --max-retries 0   # the paper's single draw
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

from services.common.jobcontext import InMemoryJobContext
from services.design.crystals import jobs as J

COLUMNS = ("structural_validity", "compositional_validity", "validity", "space_group_match_rate",
           "requested_ops_found_rate", "invariant_rate", "space_group_jsd", "density_wasserstein",
           "n_elements_wasserstein", "crystals_per_second", "first_draw_space_group_match_rate",
           "first_draw_structural_validity", "n_redrawn", "extra_draws")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reduced", action="store_true")
    ap.add_argument("--n-random", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-retries", type=int, default=5)
    args = ap.parse_args()
    n_random = args.n_random or (80 if args.reduced else 240)
    steps = args.steps or (400 if args.reduced else 2000)
    samples = args.samples or (24 if args.reduced else 100)
    arch = {"hidden": 32, "layers": 2, "timesteps": 100} if args.reduced else {"hidden": 64, "layers": 3,
                                                                               "timesteps": 200}
    warnings.filterwarnings("ignore")
    torch.set_num_threads(max(1, torch.get_num_threads()))

    t0 = time.perf_counter()
    ctx = InMemoryJobContext({"builtin": True, "n_random": n_random, "include_shipped": not args.reduced,
                              "seed": args.seed}, kind="design.crystals.import")
    data = J.run_import(ctx)
    print(f"dataset: {data['n_crystals']} crystals, {data['n_space_groups']} space groups, "
          f"{data['n_train']} train ({time.perf_counter() - t0:.0f}s)")
    models = {}
    for name, symmetric in (("symmcd", True), ("p1", False)):
        t = time.perf_counter()
        tc = InMemoryJobContext({"dataset_artifact_id": data["dataset_artifact_id"], "steps": steps,
                                 "symmetric": symmetric, "model_name": f"bench-{name}", "lr": 2e-3,
                                 "seed": args.seed, "checkpoint_every": steps, **arch}, kind="design.crystals.train")
        tc.artifacts = ctx.artifacts
        out = J.run_training(tc)
        ctx.models.update(tc.models)
        models[name] = out["model_version_id"]
        print(f"trained {name}: {steps} steps in {time.perf_counter() - t:.0f}s, val loss "
              f"{out['metrics']['val_loss']:.3f}")
    summaries = {}
    strided = max(1, arch["timesteps"] // 4)
    for name in ("symmcd", "symmcd_strided", "p1", "pyxtal_random"):
        params = {"n": samples, "batch_size": 12, "max_atoms": 32, "seed": args.seed + 1,
                  "max_retries": args.max_retries}
        if name == "pyxtal_random":
            params.update(method="pyxtal_random", reference_dataset_artifact_id=data["dataset_artifact_id"])
        elif name == "symmcd_strided":
            params.update(model_version_id=models["symmcd"], sampling_steps=strided)
        else:
            params["model_version_id"] = models[name]
        gc = InMemoryJobContext(params, kind="design.crystals.generate")
        gc.artifacts, gc.models = ctx.artifacts, ctx.models
        summaries[name] = J.run_generation(gc)["summary"]
    print(f"\nspace groups drawn from the training distribution, 1..32 atoms; the P1 model is asked for the same "
          f"groups but cannot build them in; symmcd_strided visits {strided} of the T={arch['timesteps']} timesteps; "
          f"SymmCD crystals failing the acceptance check (exact group, distances > 0.5 A) are re-drawn up to "
          f"{args.max_retries} times (first_draw_*: before re-draws; P1 and pyxtal: single draws)")
    print(f"{'metric':28}" + "".join(f"{n:>15}" for n in summaries))
    for c in COLUMNS:
        cells = []
        for n in summaries:
            v = summaries[n].get(c)
            cells.append(f"{'-' if v is None else (str(v) if isinstance(v, int) else f'{v:.3f}'):>15}")
        print(f"{c:28}" + "".join(cells))
    s, p = summaries["symmcd"], summaries["p1"]
    def ratio(key):
        a, b = s[key], p[key]
        return "n/a (P1 scored 0)" if not b else f"{a / b:.2f}x"
    print(f"\nratios symmcd / p1: space-group match {ratio('space_group_match_rate')} (first draws "
          f"{ratio('first_draw_space_group_match_rate')}), validity {ratio('validity')}; "
          f"total {time.perf_counter() - t0:.0f}s (P1's invariant rate is trivially 1: it claims only the identity)")

if __name__ == "__main__":
    main()
