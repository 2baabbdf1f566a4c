"""`praxon design crystals import|train|generate|show`, and the demo step. A plain client of CrystalService and
ArtifactService; imports no torch (nor pyxtal)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used, so that `praxon --help` loads no grpc)
    from praxon.design.v1 import crystals_pb2 as pb, crystals_pb2_grpc
    from services.common.client import Target

# The demo trains on the built-in real structures with the CPU setting (the training job's defaults: a few minutes
# on two cores); the paper trains for hours on a GPU with T = 1000 (`train --gpu`: jobs.GPU_TRAIN).
DEMO_IMPORT = {"seed": 0}
DEMO_TRAIN = {"seed": 0}
GPU_TRAIN = {"steps": 20000, "batch_size": 256, "hidden": 256, "layers": 6, "timesteps": 1000, "lr": 5e-4,
             "device": "cuda"}  # jobs.GPU_TRAIN (no torch import here)
DEMO_GROUPS = (225, 62)
COLUMNS = ("index", "requested", "detected", "match", "struct", "comp", "atoms", "formula", "density")
GROUP_COLUMNS = ("group", "asked", "made", "matched")


def _stub(target: Target) -> crystals_pb2_grpc.CrystalServiceStub:
    from praxon.design.v1 import crystals_pb2_grpc

    return crystals_pb2_grpc.CrystalServiceStub(target.channel())


def _target(args) -> Target:
    from services.common.client import resolve_target

    return resolve_target(args.address, args.token, args.data_dir)


def import_crystals(target: Target, *, files: list[Path] = (), builtin: bool = False, options: dict | None = None,
                    out=None) -> str:
    from praxon.design.v1 import crystals_pb2 as pb
    from services.common.client import upload, wait_for_success

    out = out or sys.stdout
    req = pb.StartImportCrystalsJobRequest(builtin=builtin, **(options or {}))
    for f in files:
        art = upload(target, f.name, f, "application/zip" if f.suffix == ".zip" else "chemical/x-cif")
        req.artifact_ids.append(art.id)
    job = wait_for_success(target, _stub(target).StartImportCrystalsJob(req, metadata=target.metadata).job,
                           "crystal import", out)
    r = job.result
    out.write(f"dataset {r['dataset_artifact_id']}: {int(r['n_crystals'])} crystals in {int(r['n_space_groups'])} "
              f"space groups (split {int(r['n_train'])}/{int(r['n_val'])}/{int(r['n_test'])}; "
              f"{int(r['n_real']) if 'n_real' in r else 0} real, "
              f"{int(r['n_generated']) if 'n_generated' in r else 0} generated)\n")
    if "provenance" in r:
        for origin, v in sorted(dict(r["provenance"]).items()):
            out.write(f"  {origin}: {int(v['count'])} ({v['what']})\n")
    return str(r["dataset_artifact_id"])


def train(target: Target, dataset: str, name: str, params: dict, *, remove_symmetry: bool = False, out=None):
    from praxon.design.v1 import crystals_pb2 as pb
    from services.common.client import wait_for_success

    out = out or sys.stdout
    req = pb.StartCrystalTrainingJobRequest(dataset_artifact_id=dataset, model_name=name,
                                            remove_symmetry=remove_symmetry, params=pb.CrystalTrainingParams(**params))
    job = wait_for_success(target, _stub(target).StartCrystalTrainingJob(req, metadata=target.metadata).job,
                           "SymmCD training", out)
    m = job.models[0]
    metrics = job.result["metrics"]
    out.write(f"registered {m.name} v{m.version}: train loss {metrics['train_loss']:.3f}, "
              f"val loss {metrics['val_loss']:.3f}\n")
    return m


def generate(target: Target, *, model: str = "", groups: dict[int, float] | None = None, n: int = 8,
             atoms: tuple[int, int] = (1, 48), elements: list[str] = (), method: str = "model",
             reference: str = "", seed: int = 0, sampling_steps: int = 0, max_retries: int | None = None,
             formula: str = "", require_valid_composition: bool = False, out=None) -> pb.CrystalSet:
    from praxon.design.v1 import crystals_pb2 as pb
    from services.common.client import model_ref, wait_for_success

    out = out or sys.stdout
    req = pb.StartCrystalGenerationJobRequest(
        num_samples=n, atom_count_range=pb.AtomCountRange(min=atoms[0], max=atoms[1]),
        composition_hints=list(elements), seed=seed, reference_dataset_artifact_id=reference,
        method=pb.CRYSTAL_GENERATION_METHOD_PYXTAL_RANDOM if method == "pyxtal" else pb.CRYSTAL_GENERATION_METHOD_MODEL,
        sampling_steps=sampling_steps, formula=formula, require_valid_composition=require_valid_composition)
    if max_retries is not None:
        req.max_retries = max_retries
    if method != "pyxtal":
        req.model.CopyFrom(model_ref(model, "symmcd"))
    for g, w in (groups or {}).items():
        req.space_group_distribution.append(pb.SpaceGroupWeight(space_group=g, weight=w))
    job = wait_for_success(target, _stub(target).StartCrystalGenerationJob(req, metadata=target.metadata).job,
                           "crystal generation", out)
    return _stub(target).GetCrystalSet(pb.GetCrystalSetRequest(job_id=job.id), metadata=target.metadata).crystal_set


def print_set(cs: pb.CrystalSet, out=None) -> None:
    out = out or sys.stdout
    out.write(" ".join(f"{c:>9}" for c in COLUMNS) + "\n")
    for r in cs.rows:
        if r.reason:
            out.write(f"{r.index:>9} {r.requested_space_group:>9}   no crystal: {r.reason}\n")
            continue
        vals = (r.index, r.requested_space_group, r.detected_space_group, "yes" if r.space_group_match else "no",
                "yes" if r.structurally_valid else "no", "yes" if r.compositionally_valid else "no", r.n_atoms,
                r.formula[:9] or "-", f"{r.density:.2f}")
        out.write(" ".join(f"{v:>9}" for v in vals) + "\n")
    s = cs.summary
    out.write(" ".join(f"{c:>9}" for c in GROUP_COLUMNS) + "\n")
    for g in s.groups:
        out.write(" ".join(f"{v:>9}" for v in (g.space_group, g.requested, g.generated, g.matched))
                  + (f"   {g.reason}" if g.reason else "") + "\n")
    out.write(f"{s.method}: {s.n_generated}/{s.n_requested} crystals, space group match {s.space_group_match_rate:.0%}, "
              f"requested operations found {s.requested_ops_found_rate:.0%}, invariant {s.invariant_rate:.0%}, structural validity {s.structural_validity:.0%}, compositional "
              f"validity {s.compositional_validity:.0%}, density W1 {s.density_wasserstein:.3f}, "
              f"space-group JSD {s.space_group_jsd:.3f}, {s.crystals_per_second:.2f} crystals/s\n")
    if s.n_redrawn:
        out.write(f"  before re-draws: space group match {s.first_draw_space_group_match_rate:.0%}, structural "
                  f"validity {s.first_draw_structural_validity:.0%}, compositional validity "
                  f"{s.first_draw_compositional_validity:.0%} ({s.n_redrawn} crystals re-drawn, "
                  f"{s.extra_draws} extra draws)\n")
    if s.n_failed:
        out.write(f"  {s.n_failed} of {s.n_requested} slots hold no crystal (reasons above)\n")


def read_artifact(target: Target, artifact_id: str) -> bytes:
    from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc

    import urllib.request

    stub = artifacts_pb2_grpc.ArtifactServiceStub(target.channel())
    url = stub.GetArtifact(artifacts_pb2.GetArtifactRequest(artifact_id=artifact_id), metadata=target.metadata).url
    with urllib.request.urlopen(url, timeout=60) as resp:  # a presigned URL the platform signed
        return resp.read()


# ------------------------------------------------------------------------------------------------ commands
def _groups(text: str | None) -> dict[int, float]:
    """"225" or "225,62" or "225:2,62:1" -> {group: weight}."""
    out: dict[int, float] = {}
    for part in (text or "").split(","):
        if part.strip():
            g, _, w = part.partition(":")
            out[int(g)] = float(w or 1.0)
    return out


def cmd_import(args) -> None:
    target = _target(args)
    opts = {k: v for k, v in (("n_random", args.n_random), ("seed", args.seed)) if v is not None}
    import_crystals(target, files=[Path(f) for f in args.files], builtin=args.builtin or not args.files,
                    options=opts)


def cmd_train(args) -> None:
    target = _target(args)
    dataset = args.dataset or import_crystals(target, builtin=True)
    params = dict(GPU_TRAIN) if args.gpu else {}
    params.update({k: getattr(args, k) for k in ("steps", "batch_size", "lr", "hidden", "layers", "timesteps", "seed")
                   if getattr(args, k) is not None})
    train(target, dataset, args.name or ("symmcd-p1" if args.p1 else "symmcd"), params, remove_symmetry=args.p1)


def cmd_generate(args) -> None:
    target = _target(args)
    cs = generate(target, model=args.model, groups=_groups(args.space_groups), n=args.n,
                  atoms=(args.min_atoms, args.max_atoms), elements=args.elements.split(",") if args.elements else [],
                  method=args.method, reference=args.reference or "", seed=args.seed,
                  sampling_steps=args.sampling_steps, max_retries=args.max_retries, formula=args.formula or "",
                  require_valid_composition=args.require_valid_composition)
    print_set(cs)
    if args.out_dir:
        d = Path(args.out_dir)
        d.mkdir(parents=True, exist_ok=True)
        for r in cs.rows:
            if r.cif_artifact_id:
                (d / f"crystal-{r.index:04d}.cif").write_bytes(read_artifact(target, r.cif_artifact_id))
        print(f"CIFs written to {d}")


def cmd_show(args) -> None:
    from praxon.design.v1 import crystals_pb2 as pb

    target = _target(args)
    print_set(_stub(target).GetCrystalSet(pb.GetCrystalSetRequest(job_id=args.job_id),
                                          metadata=target.metadata).crystal_set)


def add_commands(parts, client_opts) -> None:
    p = parts.add_parser("crystals", help="SymmCD crystal generation: import CIFs, train, generate")
    sub = p.add_subparsers(dest="action", required=True)

    sp = sub.add_parser("import", help="import CIF files / zips of CIFs (or the built-in set when none is given)")
    client_opts(sp)
    sp.add_argument("files", nargs="*")
    sp.add_argument("--builtin", action="store_true")
    sp.add_argument("--n-random", type=int, help="built-in set: pyxtal random crystals added as a generated "
                    "supplement (default 0: real structures only)")
    sp.add_argument("--seed", type=int)
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("train", help="train SymmCD (or --p1: the same model with symmetry removed)")
    client_opts(sp)
    sp.add_argument("--dataset", help="dataset artifact id (default: import the built-in set first)")
    sp.add_argument("--name")
    sp.add_argument("--p1", action="store_true")
    sp.add_argument("--gpu", action="store_true", help="the larger setting, on the worker's GPU (20000 steps, "
                    "hidden 256, 6 layers, T=1000, batch 256); explicit flags override it")
    for flag, typ in (("--steps", int), ("--batch-size", int), ("--lr", float), ("--hidden", int), ("--layers", int),
                      ("--timesteps", int), ("--seed", int)):
        sp.add_argument(flag, type=typ)
    sp.set_defaults(func=cmd_train)

    sp = sub.add_parser("generate", help="generate crystals; prints the validity table")
    client_opts(sp)
    sp.add_argument("--model", default="symmcd", help="name, name:VERSION or name@ALIAS")
    sp.add_argument("--space-groups", help="'225', '225,62' or weights '225:2,62:1' (default: training distribution)")
    sp.add_argument("-n", type=int, default=8)
    sp.add_argument("--min-atoms", type=int, default=1)
    sp.add_argument("--max-atoms", type=int, default=48)
    sp.add_argument("--elements", help="composition hints, e.g. Mg,O")
    sp.add_argument("--method", choices=["model", "pyxtal"], default="model")
    sp.add_argument("--reference", help="reference dataset artifact id (required by --method pyxtal)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--sampling-steps", type=int, default=0, help="reverse-diffusion steps (default: all of the model's)")
    sp.add_argument("--max-retries", type=int, help="re-draws of a crystal not detected in its group (0: single draw, "
                    "as the paper's code; default 5)")
    sp.add_argument("--formula", help="a fixed formula, e.g. CaTiO3 (every crystal is it times some Z)")
    sp.add_argument("--require-valid-composition", action="store_true",
                    help="also re-draw crystals whose composition fails SMACT's check")
    sp.add_argument("--out-dir", help="write each CIF here")
    sp.set_defaults(func=cmd_generate)

    sp = sub.add_parser("show", help="the report of a finished generation job")
    client_opts(sp)
    sp.add_argument("job_id")
    sp.set_defaults(func=cmd_show)


def demo(target: Target) -> None:
    """`praxon demo` step: build the built-in set, train a small SymmCD for about two minutes, generate crystals in
    two space groups, print the validity table and one CIF."""
    dataset = import_crystals(target, builtin=True, options=DEMO_IMPORT)
    print("training SymmCD on the built-in real structures with the CPU setting (1500 steps, T=200; the paper "
          "trains far longer with T=1000: expect lower validity than a full run)")
    train(target, dataset, "symmcd-demo", DEMO_TRAIN)
    cs = generate(target, model="symmcd-demo", groups={g: 1.0 for g in DEMO_GROUPS}, n=8, atoms=(1, 32))
    print_set(cs)
    row = next((r for r in cs.rows if r.cif_artifact_id and r.structurally_valid), None) or \
        next((r for r in cs.rows if r.cif_artifact_id), None)
    if row is not None:
        print(f"crystal {row.index} ({row.formula}, requested {row.requested_space_group}, detected "
              f"{row.detected_space_group}):")
        print(read_artifact(target, row.cif_artifact_id).decode())
