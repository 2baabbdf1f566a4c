"""The crystal jobs, on services.common.jobcontext (run_steps owns resume, cancellation and progress):

- run_import(ctx): CIF uploads (each a CIF or a zip of CIFs) or the built-in set -> one dataset artifact; any bad
  file fails the job with every bad file and its reason named, and nothing is stored.
- run_training(ctx): dataset -> SymmCD (or its P1 variant), checkpointed every `checkpoint_every` steps; each step's
  batch and noise come from a generator seeded by (seed, step), so a resumed job computes what an uninterrupted one
  would have; registers the model version.
- run_generation(ctx): one step per batch of crystals (seeded by (seed, batch)); the CIFs and report rows live in
  the checkpoint until the end, when every CIF and one report are written once."""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.jobcontext import JobContext, run_steps
from services.common.params import parse_params
from services.design.crystals import data as D
from services.design.crystals import generate as G
from services.design.crystals import model as M
from services.design.crystals.params import GenerateParams, ImportParams, TrainParams, check_request

MODEL_FORMAT = "praxon.design.crystals.symmcd/v1"
REGISTRY_KIND = "design.symmcd"
REPORT_CONTENT_TYPE = "application/vnd.praxon.crystal-set+json"
CIF_CONTENT_TYPE = "chemical/x-cif"


# ------------------------------------------------------------------------------------------------ import
def run_import(ctx: JobContext) -> dict[str, Any]:
    p = parse_params(ImportParams, ctx.params, prefix="params.")
    ctx.progress(0.0, "reading structures")
    if p.builtin:
        ds = D.builtin_dataset(n_random=p.n_random, seed=p.seed, include_shipped=p.include_shipped,
                               check_cancelled=ctx.check_cancelled,
                               progress=lambda f: ctx.progress(0.05 + 0.9 * f, "random symmetric crystals"))
    else:
        blobs = []
        for i, aid in enumerate(p.artifact_ids):
            name = p.artifact_names[i] if i < len(p.artifact_names) else f"artifact {i}"
            blobs.append((name, ctx.read_artifact(aid)))
        ds = D.import_cifs(blobs, source=f"upload:{ctx.job_id}", check_cancelled=ctx.check_cancelled)
    if not ds.crystals:
        raise InvalidArgument("params", "no usable crystal in the input")
    ctx.check_cancelled()
    stats = ds.stats()
    aid = ctx.write_artifact(p.name or ("crystals-builtin" if p.builtin else "crystals-upload"), ds.to_bytes(),
                             D.DATASET_CONTENT_TYPE, metadata=stats)
    ctx.progress(1.0, "dataset written", n_crystals=float(stats["n_crystals"]))
    return {"dataset_artifact_id": aid, **stats}


def read_dataset(ctx: JobContext, aid: str, field: str) -> D.CrystalDataset:
    return D.CrystalDataset.from_bytes(ctx.read_artifact(aid), field=field)


# ------------------------------------------------------------------------------------------------ training
# The CPU setting (TrainParams' defaults: a few minutes on two cores) and the larger one for a GPU.
CPU_TRAIN = {"steps": 1500, "batch_size": 32, "hidden": 64, "layers": 3, "timesteps": 200, "lr": 2e-3}
GPU_TRAIN = {"steps": 20000, "batch_size": 256, "hidden": 256, "layers": 6, "timesteps": 1000, "lr": 5e-4,
             "device": "cuda"}


def _duration(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Training:
    def __init__(self, p: TrainParams):
        self.p = p
        self.total = p.steps
        self._t0: float | None = None
        self._from = 0

    def message(self, done: int, total: int) -> str:
        """Progress with the time per step of this run so far and the ETA of the rest."""
        if self._t0 is None or done <= self._from:
            return f"training step {done}/{total}"
        per = (time.perf_counter() - self._t0) / (done - self._from)
        return f"training step {done}/{total}, {per * 1000:.0f} ms/step, ETA {_duration(per * (total - done))}"

    def setup(self, ctx: JobContext) -> None:
        p = self.p
        ds = read_dataset(ctx, p.dataset_artifact_id, "params.dataset_artifact_id")
        train, val = ds.subset("train"), ds.subset("val")
        if not train:
            raise FailedPrecondition("the dataset has no training crystals")
        if not p.symmetric:
            train, val = [M.to_p1(r) for r in train], [M.to_p1(r) for r in val]
        self.train, self.val = train, val or train[:8]
        cfg = M.ModelConfig(hidden=p.hidden, layers=p.layers, timesteps=p.timesteps, cost_lattice=p.cost_lattice,
                            cost_coord=p.cost_coord, cost_type=p.cost_type, cost_symm=p.cost_symm,
                            symmetric=p.symmetric, max_asym=D.MAX_ASYM_ATOMS if p.symmetric else D.MAX_CELL_ATOMS)
        self.model = M.build(cfg, seed=p.seed)
        self.model.fit_priors(self.train)
        if p.device == "cuda":
            if not torch.cuda.is_available():
                raise FailedPrecondition("device 'cuda' asked for, but this worker has no GPU", reason="NO_GPU")
            self.model.net.to("cuda")
        self.opt = torch.optim.Adam(self.model.net.parameters(), lr=p.lr)
        self.losses: list[float] = []

    def step(self, i: int) -> dict[str, float]:
        if self._t0 is None:
            self._t0, self._from = time.perf_counter(), i
        g = torch.Generator().manual_seed(self.p.seed * 1_000_003 + i)
        idx = torch.randint(len(self.train), (min(self.p.batch_size, len(self.train)),), generator=g)
        self.model.train()
        out = self.model.loss(M.collate([self.train[int(j)] for j in idx]), g)
        self.opt.zero_grad()
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(self.model.net.parameters(), 10.0)
        self.opt.step()
        self.losses.append(float(out["loss"].detach()))
        return {k: float(v.detach()) for k, v in out.items()}

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "losses": list(self.losses)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.losses = list(state["losses"])

    @torch.no_grad()
    def val_loss(self) -> float:
        self.model.eval()
        g = torch.Generator().manual_seed(12345)
        vals = [float(self.model.loss(M.collate(self.val[i:i + 32]), g)["loss"]) for i in range(0, len(self.val), 32)]
        return float(np.mean(vals))

    def result(self, ctx: JobContext) -> dict[str, Any]:
        p = self.p
        metrics = {"train_loss": float(np.mean(self.losses[-20:])) if self.losses else 0.0,
                   "val_loss": self.val_loss(), "n_train": float(len(self.train))}
        config = {"format": MODEL_FORMAT, "model": self.model.cfg.to_dict(), "train": p.model_dump(),
                  "dataset_artifact_id": p.dataset_artifact_id}
        self.model.net.to("cpu")  # registered (and sampled) on the CPU
        info = ctx.register_model(p.model_name, self.model.tensors(), kind=REGISTRY_KIND, config=config,
                                  metrics=metrics, dataset_artifact_id=p.dataset_artifact_id)
        ctx.progress(1.0, "model registered", **metrics)
        return {"model_version_id": info.model_version_id, "model_name": info.name,
                "symmetric": p.symmetric, "metrics": metrics}


def run_training(ctx: JobContext) -> dict[str, Any]:
    p = parse_params(TrainParams, ctx.params, prefix="params.")
    torch.manual_seed(p.seed)
    torch.set_num_threads(p.threads)  # the worker runs one job at a time (prefetch 1)
    tr = Training(p)
    return run_steps(ctx, tr, checkpoint_every=p.checkpoint_every, message=tr.message)


# ------------------------------------------------------------------------------------------------ generation
class Generation:
    def __init__(self, p: GenerateParams):
        self.p = p
        self.total = (p.n + p.batch_size - 1) // p.batch_size

    def setup(self, ctx: JobContext) -> None:
        p = self.p
        self.model = None
        ref_id = p.reference_dataset_artifact_id
        if p.method == "model":
            tensors, config = ctx.load_model(p.model_version_id)
            if config.get("format") != MODEL_FORMAT:
                raise InvalidArgument("model", "not a SymmCD model (train one with StartCrystalTrainingJob)")
            self.model = M.load(tensors, config)
            ref_id = ref_id or config["dataset_artifact_id"]
            T = self.model.cfg.timesteps
            if p.sampling_steps > T:
                raise InvalidArgument("params.sampling_steps", f"the model has T={T} timesteps: give 1..{T} "
                                      "(or 0 for all of them)")
        ds = read_dataset(ctx, ref_id, "params.reference_dataset_artifact_id")
        self.reference = ds.subset("train") or ds.crystals
        self.ref_stats = G.reference_stats(self.reference)
        self.request = G.Request(dict(p.space_groups), p.min_atoms, p.max_atoms, tuple(p.composition_hints),
                                 G.parse_formula(p.formula) if p.formula else (), p.require_valid_composition)
        self.rows: list[dict[str, Any]] = []
        self.cifs: list[str] = []
        self.seconds = 0.0

    def step(self, i: int) -> dict[str, float]:
        p = self.p
        n = min(p.batch_size, p.n - i * p.batch_size)
        seed = p.seed * 1_000_003 + i
        t0 = time.perf_counter()
        if self.model is not None:
            out = G.sample_symmcd(self.model, self.request, n, seed=seed, sampling_steps=p.sampling_steps or None,
                                  max_retries=p.max_retries)
        else:
            out = G.sample_pyxtal(self.request, n, seed=seed, reference=self.reference)
        for rep, structure, info in out:
            claimed = rep.space_group if rep is not None else info["requested_sg"]
            if rep is None and structure is not None:
                claimed = info["requested_sg"]  # pyxtal built it in that group
            row = G.evaluate(structure, info["requested_sg"], claimed)
            # the re-draw record (generate.sample_symmcd); the baselines are single draws
            row["draws"] = int(info.get("draws", 1))
            for k in ("space_group_match", "structurally_valid", "compositionally_valid"):
                row[f"first_draw_{k}"] = bool(info.get(f"first_draw_{k}", row[k]))
            row["reason"] = str(info.get("reason", ""))  # a slot that made no crystal says why
            row["index"] = len(self.rows)
            row["method"] = self.method_name
            if rep is not None:
                row["wyckoff"] = [a.wyckoff for a in rep.atoms]
            self.rows.append(row)
            self.cifs.append(G.cif_of(structure) if structure is not None else "")
        self.seconds += time.perf_counter() - t0
        return {"generated": float(len(self.rows))}

    @property
    def method_name(self) -> str:
        if self.model is None:
            return "pyxtal_random"
        return "symmcd" if self.model.cfg.symmetric else "p1"

    def model_notes(self) -> dict[str, Any]:
        """How the set was made, for the report: the diffusion timesteps visited and the model's simplifications
        (model.SIMPLIFICATIONS); the same keys for the pyxtal baseline."""
        if self.model is None:
            return {"sampling_steps": 0, "model_notes": "pyxtal random symmetric crystals (baseline; no model)"}
        T = self.model.cfg.timesteps
        visited = len(M.timesteps_of(T, self.p.sampling_steps or None))
        kind = "" if self.model.cfg.symmetric else "P1 baseline (symmetry removed: every crystal in P1); "
        comp = ", the composition passes SMACT" if self.p.require_valid_composition else ""
        redraw = (f"; a crystal failing the acceptance check (spglib detects exactly the requested group, every "
                  f"distance > 0.5 A{comp}) is re-drawn up to {self.p.max_retries} times (not in the paper's code)"
                  if self.model.cfg.symmetric and self.p.max_retries else "")
        if self.p.formula:
            redraw += (f"; formula {self.p.formula} fixed: types and site symmetries of a Wyckoff placement of it held "
                       "while sampling (inpainting)")
        return {"sampling_steps": visited,
                "model_notes": f"{kind}{M.SIMPLIFICATIONS}; this set: {visited} of T={T} timesteps{redraw}"}

    def state(self) -> dict[str, Any]:
        return {"rows": json.dumps(self.rows), "cifs": list(self.cifs), "seconds": self.seconds}

    def load_state(self, state: dict[str, Any]) -> None:
        self.rows = json.loads(state["rows"])
        self.cifs = list(state["cifs"])
        self.seconds = float(state["seconds"])

    def result(self, ctx: JobContext) -> dict[str, Any]:
        if self.rows and all(r["reason"] for r in self.rows):
            # nothing made: not a success with an empty set; the reasons, one per group
            why = "; ".join(f"space group {g['space_group']}: {g['reason']}" for g in G.group_answers(self.rows))
            raise FailedPrecondition(f"no crystal could be generated: {why}", reason="NO_CRYSTAL_GENERATED")
        summary = G.summarize(self.rows, self.ref_stats, self.seconds, self.p.n)
        summary["method"] = self.method_name
        summary.update(self.model_notes())
        for row, cif in zip(self.rows, self.cifs, strict=True):
            row["cif_artifact_id"] = ctx.write_artifact(
                f"crystal-{row['index']:04d}-{row['formula'] or 'failed'}-sg{row['requested_space_group']}.cif",
                cif.encode(), CIF_CONTENT_TYPE, metadata={"requested_space_group": row["requested_space_group"],
                                                          "detected_space_group": row["detected_space_group"]}) \
                if cif else ""
        report = {"summary": summary, "rows": self.rows, "params": self.p.model_dump(mode="json")}
        rid = ctx.write_artifact("crystal-set.json", json.dumps(report).encode(), REPORT_CONTENT_TYPE)
        ctx.progress(1.0, "crystals written", **{k: float(v) for k, v in summary.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 and np.isfinite(v)})
        return {"report_artifact_id": rid, "summary": summary, "rows": self.rows}


def run_generation(ctx: JobContext) -> dict[str, Any]:
    p = parse_params(GenerateParams, ctx.params, prefix="params.")
    check_request(p)
    return run_steps(ctx, Generation(p), checkpoint_every=1, message=lambda d, t: f"batch {d}/{t}")


__all__ = ["run_import", "run_training", "run_generation", "check_request"]
