"""One parameters model per crystal job kind; the servicer builds them from the request, the job validates
ctx.params with the same model (services.common.params.parse_params). No torch here."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from services.common.errors import InvalidArgument
from services.common.params import JobParams, ModelName

MAX_CELL_ATOMS = 64  # data.MAX_CELL_ATOMS
MAX_Z = 94
MAX_LOSS_WEIGHT = 1e4  # per loss term (the paper's weights are 0.1..10)


class ImportParams(JobParams):
    """A tenant's CIF uploads (each a CIF or a zip of CIFs), or the built-in set."""

    artifact_ids: list[str] = Field(default_factory=list, max_length=1000)
    artifact_names: list[str] = Field(default_factory=list, max_length=1000)  # the uploads' names (for reports)
    builtin: bool = False
    n_random: int = Field(0, ge=0, le=5000)  # generated supplement (labelled "generated:..."); 0 = real data only
    include_shipped: bool = True
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)
    name: str = Field("", max_length=256)

    @model_validator(mode="after")
    def _one_source(self):
        if self.builtin == bool(self.artifact_ids):
            raise ValueError("give artifact_ids (uploaded CIFs) or builtin, not both and not neither")
        if self.builtin and not self.include_shipped and self.n_random == 0:
            raise ValueError("the built-in set would be empty (n_random = 0 without shipped structures)")
        return self


class TrainParams(JobParams):
    """Defaults: the CPU setting, sized to finish in a few minutes on two cores (jobs.CPU_TRAIN); jobs.GPU_TRAIN is
    the larger setting for a GPU (device "cuda")."""

    dataset_artifact_id: str
    model_name: ModelName = "symmcd"
    symmetric: bool = True  # False: the P1 baseline (symmetry removed)
    steps: int = Field(1500, ge=1, le=200_000)
    batch_size: int = Field(32, ge=1, le=512)
    lr: float = Field(2e-3, gt=0, le=1.0)
    hidden: int = Field(64, ge=8, le=512)
    layers: int = Field(3, ge=1, le=8)
    timesteps: int = Field(200, ge=10, le=2000)
    # loss weights: bounded, so that a weighted loss stays finite (a weight of 1e308 made it infinite, and the job's
    # metrics then failed in PostgreSQL's JSON: refused here instead, naming the field)
    cost_lattice: float = Field(5.0, ge=0, le=MAX_LOSS_WEIGHT)
    cost_coord: float = Field(1.0, ge=0, le=MAX_LOSS_WEIGHT)
    cost_type: float = Field(0.1, ge=0, le=MAX_LOSS_WEIGHT)
    cost_symm: float = Field(10.0, ge=0, le=MAX_LOSS_WEIGHT)
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)
    checkpoint_every: int = Field(100, ge=1, le=100_000)
    device: Literal["cpu", "cuda"] = "cpu"
    threads: int = Field(1, ge=1, le=64)  # torch CPU threads (one keeps a loaded machine from thrashing)


class GenerateParams(JobParams):
    """method "model": sample the registered model (SymmCD or its P1 variant); "pyxtal_random": the baseline."""

    method: Literal["model", "pyxtal_random"] = "model"
    model_version_id: str = ""
    reference_dataset_artifact_id: str = ""  # the set the summary compares with (default: the model's training set)
    space_groups: dict[int, float] = Field(default_factory=dict)  # empty = the training distribution
    min_atoms: int = Field(1, ge=1, le=MAX_CELL_ATOMS)
    max_atoms: int = Field(48, ge=1, le=MAX_CELL_ATOMS)
    composition_hints: list[str] = Field(default_factory=list, max_length=20)
    n: int = Field(16, ge=1, le=2000)
    batch_size: int = Field(8, ge=1, le=256)
    seed: int = Field(0, ge=0, le=2 ** 31 - 1)
    # diffusion timesteps visited while sampling: 0 = all T of the model; 1..T = that many, evenly strided
    # (SymmCD.sample); more than the model's T is an error (checked by the job, which knows T)
    sampling_steps: int = Field(0, ge=0, le=2000)
    # SymmCD crystals failing the acceptance check (spglib finds exactly the requested group, every distance > 0.5 A)
    # are re-drawn at most this many times (generate.sample_symmcd); 0 = the paper's single draw
    max_retries: int = Field(5, ge=0, le=10)
    # also re-draw a crystal whose composition fails SMACT's check (charge neutrality, electronegativity)
    require_valid_composition: bool = False
    # a fixed formula ("CaTiO3"): every crystal is it times some Z (types and site symmetries held while sampling)
    formula: str = Field("", max_length=64)

    @field_validator("formula")
    @classmethod
    def _formula(cls, v: str) -> str:
        if not v:
            return v
        from services.design.crystals.representation import formula_text, parse_formula

        try:
            f = parse_formula(v)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        from pymatgen.core.periodic_table import Element

        for el, _ in f:
            if Element(el).Z > MAX_Z:
                raise ValueError(f"{el}: elements beyond Z={MAX_Z} are not supported")
        if sum(n for _, n in f) > MAX_CELL_ATOMS:
            raise ValueError(f"{formula_text(f)} has more than {MAX_CELL_ATOMS} atoms per formula unit")
        return formula_text(f)

    @field_validator("space_groups")
    @classmethod
    def _groups(cls, v: dict[int, float]) -> dict[int, float]:
        for g, w in v.items():
            if not 1 <= int(g) <= 230:
                raise ValueError(f"unknown space group {g}: international numbers are 1..230")
            if not w > 0:
                raise ValueError(f"weight of space group {g} must be > 0")
        return {int(g): float(w) for g, w in v.items()}

    @field_validator("composition_hints")
    @classmethod
    def _elements(cls, v: list[str]) -> list[str]:
        from pymatgen.core.periodic_table import Element

        out = []
        for i, e in enumerate(v):
            try:
                z = Element(e).Z
            except (ValueError, KeyError):
                raise ValueError(f"[{i}] {e!r} is not an element symbol") from None
            if z > MAX_Z:
                raise ValueError(f"[{i}] {e}: elements beyond Z={MAX_Z} are not supported")
            out.append(Element(e).symbol)
        return sorted(set(out))

    @model_validator(mode="after")
    def _range(self):
        if self.min_atoms > self.max_atoms:
            raise ValueError("min_atoms must be <= max_atoms")
        if self.method == "model" and not self.model_version_id:
            raise ValueError("method 'model' needs a model")
        if self.method == "pyxtal_random" and not self.reference_dataset_artifact_id:
            raise ValueError("method 'pyxtal_random' needs reference_dataset_artifact_id")
        return self


def check_request(p: GenerateParams) -> None:
    """Errors the caller can fix, named by the request's fields: an atom-count range that no combination of a
    requested group's Wyckoff positions reaches (pyxtal's tables; no torch)."""
    from services.design.crystals import representation as R

    if p.min_atoms > p.max_atoms:
        raise InvalidArgument("atom_count_range", "min must be <= max")
    for g in sorted(p.space_groups):
        if not any(p.min_atoms <= c <= p.max_atoms for c in R.reachable_counts(g, p.max_atoms)):
            counts = sorted(R.reachable_counts(g, MAX_CELL_ATOMS))[:8]
            raise InvalidArgument("atom_count_range", f"no combination of space group {g}'s Wyckoff positions "
                                  f"gives {p.min_atoms}..{p.max_atoms} atoms (smallest cells: {counts})")
    if p.formula:
        from services.design.crystals.representation import parse_formula, wyckoff_plans

        f = parse_formula(p.formula)
        if p.composition_hints and not {el for el, _ in f} <= set(p.composition_hints):
            raise InvalidArgument("formula", f"{p.formula} has elements outside composition_hints")
        for g in sorted(p.space_groups):
            if not wyckoff_plans(g, f, p.min_atoms, p.max_atoms, limit=1):
                raise InvalidArgument("formula", f"space group {g}'s Wyckoff positions cannot hold {p.formula} x Z "
                                      f"with {p.min_atoms}..{p.max_atoms} atoms")
