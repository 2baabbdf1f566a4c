"""SymmCD's crystal representation: the asymmetric unit (element, fractional coordinate of each representative
atom), each atom's site symmetry in pyxtal's per-axis one-hot encoding (15 symmetry axes x 13 point-group classes),
the space group, and the lattice as 6 log-lattice coefficients masked by crystal family.

Log-lattice: with G = L L^T the metric tensor (rows of L are the lattice vectors), the symmetric matrix
S = log(G) / 2 = log(G^(1/2)) is written in the basis B_0..B_5 (off-diagonals 01, 02, 12; diag(1,-1,0),
diag(1,1,-2), identity). The crystal family fixes some coefficients (monoclinic b-unique: k0 = k2 = 0;
orthorhombic: k0..k2 = 0; tetragonal: k0..k3 = 0; hexagonal/trigonal (hexagonal axes): k1..k3 = 0 and
k0 = -log(3)/4, which is gamma = 120 deg; cubic: k0..k4 = 0), so any masked vector is a lattice of the right family.
G^(1/2) = exp(sum k_i B_i) is a lattice matrix (rotation-free) with the same lengths and angles.

This module has no torch and no grpc: numpy, pyxtal, pymatgen, spglib."""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

N_AXES, N_CLASSES = 15, 13
SITE_SYMM_DIM = N_AXES * N_CLASSES
MAX_Z = 94  # atom types are Z = 1..94, class index Z - 1
N_SPACEGROUPS = 230

B_MATRICES = np.zeros((6, 3, 3))
B_MATRICES[0, 0, 1] = B_MATRICES[0, 1, 0] = 1
B_MATRICES[1, 0, 2] = B_MATRICES[1, 2, 0] = 1
B_MATRICES[2, 1, 2] = B_MATRICES[2, 2, 1] = 1
B_MATRICES[3] = np.diag([1.0, -1.0, 0.0])
B_MATRICES[4] = np.diag([1.0, 1.0, -2.0])
B_MATRICES[5] = np.eye(3)


def crystal_family(sg: int) -> str:
    if sg <= 2:
        return "triclinic"
    if sg <= 15:
        return "monoclinic"
    if sg <= 74:
        return "orthorhombic"
    if sg <= 142:
        return "tetragonal"
    if sg <= 194:
        return "hexagonal"
    return "cubic"


def ks_mask(sg: int) -> tuple[np.ndarray, np.ndarray]:
    """(mask, add) for a space group: a masked vector is ks * mask + add."""
    mask, add = np.ones(6), np.zeros(6)
    fam = crystal_family(sg)
    if fam == "monoclinic":
        mask[[0, 2]] = 0
    elif fam == "orthorhombic":
        mask[0:3] = 0
    elif fam == "tetragonal":
        mask[0:4] = 0
    elif fam == "hexagonal":
        mask[0:4] = 0
        add[0] = -math.log(3) / 4
    elif fam == "cubic":
        mask[0:5] = 0
    return mask, add


def _sym_log(m: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh((m + m.T) / 2)
    return (v * np.log(w)) @ v.T


def _sym_exp(m: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh((m + m.T) / 2)
    return (v * np.exp(w)) @ v.T


def lattice_to_ks(matrix: np.ndarray) -> np.ndarray:
    """Lattice matrix (rows = vectors) -> the 6 log-lattice coefficients (rotation invariant)."""
    s = _sym_log(matrix @ matrix.T) / 2
    d0, d1, d2 = s[0, 0], s[1, 1], s[2, 2]
    return np.array([s[0, 1], s[0, 2], s[1, 2], (d0 - d1) / 2, (d0 + d1 - 2 * d2) / 6, (d0 + d1 + d2) / 3])


def ks_to_lattice(ks: np.ndarray) -> np.ndarray:
    return _sym_exp(np.einsum("bij,b->ij", B_MATRICES, np.asarray(ks, dtype=float)))


def mask_ks(ks: np.ndarray, sg: int) -> np.ndarray:
    mask, add = ks_mask(sg)
    return np.asarray(ks, dtype=float) * mask + add


# ------------------------------------------------------------------------------------------------ Wyckoff tables
@dataclass(frozen=True)
class WyckoffInfo:
    """One Wyckoff position of a group: label ("4a"), multiplicity, degrees of freedom, site-symmetry one-hot
    (15 x 13) and its orbit operations as affine (W, w) arrays (orbit member j of free parameters p: W_j p + w_j)."""

    index: int
    label: str
    multiplicity: int
    dof: int
    site_symm: np.ndarray
    rot: np.ndarray  # [m, 3, 3]
    trans: np.ndarray  # [m, 3]
    pinv: np.ndarray  # [m, 3, 3] pseudo-inverses of rot


@lru_cache(maxsize=None)
def group(sg: int):
    from pyxtal.symmetry import Group

    return Group(int(sg))


@lru_cache(maxsize=None)
def wyckoff_table(sg: int) -> tuple[WyckoffInfo, ...]:
    g = group(sg)
    out = []
    for i, wp in enumerate(g.Wyckoff_positions):
        wp.get_site_symmetry()
        onehot = np.asarray(wp.get_site_symmetry_object().to_one_hot(), dtype=np.float64)
        rot = np.stack([op.rotation_matrix for op in wp.ops]).astype(np.float64)
        trans = np.stack([op.translation_vector for op in wp.ops]).astype(np.float64)
        out.append(WyckoffInfo(i, f"{wp.multiplicity}{wp.letter}", int(wp.multiplicity), int(wp.get_dof()), onehot,
                               rot, trans, np.stack([np.linalg.pinv(r) for r in rot])))
    return tuple(out)


@lru_cache(maxsize=None)
def general_ops(sg: int) -> tuple[np.ndarray, np.ndarray]:
    """The group's operations (general position) as (W [n,3,3], w [n,3])."""
    wp = group(sg)[0]
    return (np.stack([op.rotation_matrix for op in wp.ops]).astype(np.float64),
            np.stack([op.translation_vector for op in wp.ops]).astype(np.float64))


def wyckoff_by_label(sg: int, label: str) -> WyckoffInfo:
    for w in wyckoff_table(sg):
        if w.label == label:
            return w
    raise KeyError(f"space group {sg} has no Wyckoff position {label!r}")


def _wrap(d: np.ndarray) -> np.ndarray:
    return d - np.round(d)


_SHIFTS = np.array([[a, b, c] for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)], dtype=np.float64)


def project_to_wyckoff(w: WyckoffInfo, x: np.ndarray) -> tuple[np.ndarray, float]:
    """The point of Wyckoff position w closest to x (periodic, fractional metric): (free parameters p, distance).
    Tries every orbit member's affine subspace and the neighbouring cell shifts."""
    best_p, best_d = None, np.inf
    for j in range(w.multiplicity):
        d = x[None, :] - w.trans[j][None, :] + _SHIFTS  # [27, 3]
        p = d @ w.pinv[j].T
        y = p @ w.rot[j].T + w.trans[j]
        dist = np.linalg.norm(_wrap(y - x[None, :]), axis=1)
        k = int(np.argmin(dist))
        if dist[k] < best_d:
            best_p, best_d = p[k], float(dist[k])
    return best_p, best_d


def orbit(w: WyckoffInfo, p: np.ndarray) -> np.ndarray:
    """All multiplicity positions of Wyckoff position w for free parameters p, in [0, 1)."""
    return (np.einsum("mij,j->mi", w.rot, p) + w.trans) % 1.0


def representative(w: WyckoffInfo, p: np.ndarray) -> np.ndarray:
    return (w.rot[0] @ p + w.trans[0]) % 1.0


def snap(sg: int, site_symm: np.ndarray, x: np.ndarray, occupied: set[str] | frozenset[str] = frozenset(),
         budget: int | None = None) -> tuple[WyckoffInfo, np.ndarray, float, float]:
    """SymmCD's projection: among the group's Wyckoff positions whose site symmetry is closest to the predicted
    one (L2 distance of the one-hot encodings), the position nearest to x. Returns (wp, free parameters,
    site-symmetry distance, projection distance).

    Extension (not in the paper's code): a Wyckoff position without free parameters holds one atom; labels in
    `occupied` are skipped (the next-closest site symmetry is used when every candidate is taken), so two
    asymmetric-unit atoms never land on the same fixed site; with `budget` (atoms the cell may still take),
    positions of larger multiplicity are skipped the same way, so the atom-count range is met by construction
    from above."""
    table = wyckoff_table(sg)
    ss = np.asarray(site_symm, dtype=np.float64).reshape(-1)
    free = [w for w in table if not (w.dof == 0 and w.label in occupied)
            and (budget is None or w.multiplicity <= budget)] or list(table)
    dists = np.array([np.linalg.norm(ss - w.site_symm.reshape(-1)) for w in free])
    best = dists.min()
    cands = [w for w, d in zip(free, dists, strict=True) if d <= best + 1e-9]
    scored = [(w, *project_to_wyckoff(w, np.asarray(x, dtype=np.float64) % 1.0)) for w in cands]
    w, p, pd = min(scored, key=lambda t: t[2])
    return w, p, float(best), float(pd)


@lru_cache(maxsize=None)
def reachable_counts(sg: int, max_atoms: int) -> frozenset[int]:
    """Total atom counts of a cell that some combination of the group's Wyckoff positions reaches (a position
    with no free parameter can be occupied once, the others any number of times)."""
    reach = np.zeros(max_atoms + 1, dtype=bool)
    reach[0] = True
    for w in wyckoff_table(sg):
        m = w.multiplicity
        if m > max_atoms:
            continue
        if w.dof == 0:
            new = reach.copy()
            new[m:] |= reach[:-m]
            reach = new
        else:
            for n in range(m, max_atoms + 1):
                reach[n] |= reach[n - m]
    return frozenset(int(i) for i in np.nonzero(reach)[0] if i > 0)


# ------------------------------------------------------------------------------------------------ formulas
def parse_formula(text: str) -> tuple[tuple[str, int], ...]:
    """"CaTiO3" -> (("Ca", 1), ("O", 3), ("Ti", 1)) (the reduced formula, elements sorted); ValueError with the
    reason when it is not one."""
    from pymatgen.core import Composition

    try:
        comp = Composition(text)
    except Exception:  # noqa: BLE001 - pymatgen raises several types for junk
        raise ValueError(f"{text!r} is not a chemical formula") from None
    if not comp.elements:
        raise ValueError(f"{text!r} has no element")
    from pymatgen.core import Element

    for el in comp.elements:
        if not Element.is_valid_symbol(str(el)):
            raise ValueError(f"{text!r}: {el} is not an element")
    counts = comp.get_el_amt_dict()
    if any(abs(v - round(v)) > 1e-6 or round(v) < 1 for v in counts.values()):
        raise ValueError(f"{text!r}: every element needs a whole, positive count")
    red, _ = Composition({k: int(round(v)) for k, v in counts.items()}).get_reduced_composition_and_factor()
    return tuple(sorted((str(el), int(round(v))) for el, v in red.get_el_amt_dict().items()))


def formula_text(formula: tuple[tuple[str, int], ...]) -> str:
    """(("Ca", 1), ("O", 3), ("Ti", 1)) -> "CaTiO3" (pymatgen's reduced formula)."""
    from pymatgen.core import Composition

    return Composition({el: n for el, n in formula}).reduced_formula


def wyckoff_plans(sg: int, formula: tuple[tuple[str, int], ...], lo: int, hi: int, *, max_asym: int = 16,
                  limit: int = 400) -> list[list[tuple[str, str]]]:
    """Ways to place formula x Z (lo <= atoms <= hi) on space group sg's Wyckoff positions: each plan a list of
    (element, Wyckoff label), one per asymmetric-unit atom; a position without free parameters is used at most
    once in a plan. At most `limit` plans, fewest asymmetric-unit atoms first (a depth-first search per Z)."""
    table = wyckoff_table(sg)
    total = sum(n for _, n in formula)
    plans: list[list[tuple[str, str]]] = []
    for z in range(1, hi // total + 1):
        if total * z >= lo:
            _fill(table, [(el, n * z) for el, n in formula], 0, formula[0][1] * z, 0, frozenset(), [], plans,
                  max_asym, limit)
    plans.sort(key=len)
    return plans


def _fill(table, need, i, left, start, used, acc, plans, max_asym, limit) -> None:
    if len(plans) >= limit or len(acc) > max_asym:
        return
    if left == 0:
        if i + 1 == len(need):
            plans.append(list(acc))
        else:
            _fill(table, need, i + 1, need[i + 1][1], 0, used, acc, plans, max_asym, limit)
        return
    for j in range(start, len(table)):
        w = table[j]
        if w.multiplicity > left or (w.dof == 0 and w.label in used):
            continue
        acc.append((need[i][0], w.label))
        _fill(table, need, i, left - w.multiplicity, j if w.dof > 0 else j + 1,
              used | {w.label} if w.dof == 0 else used, acc, plans, max_asym, limit)
        acc.pop()


# ------------------------------------------------------------------------------------------------ the representation
@dataclass
class AsymAtom:
    z: int  # atomic number
    frac: np.ndarray  # representative position, [3] in [0, 1)
    wyckoff: str  # label in the group, e.g. "4a"
    site_symm: np.ndarray  # [15, 13] one-hot


@dataclass
class CrystalRep:
    space_group: int
    ks: np.ndarray  # [6] masked log-lattice coefficients
    atoms: list[AsymAtom] = field(default_factory=list)
    source: str = ""

    @property
    def n_atoms(self) -> int:
        return sum(wyckoff_by_label(self.space_group, a.wyckoff).multiplicity for a in self.atoms)

    def to_dict(self) -> dict[str, Any]:
        return {"sg": self.space_group, "ks": [float(v) for v in self.ks], "source": self.source,
                "atoms": [{"z": a.z, "frac": [float(v) for v in a.frac], "wp": a.wyckoff} for a in self.atoms]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CrystalRep":
        sg = int(d["sg"])
        atoms = [AsymAtom(int(a["z"]), np.asarray(a["frac"], dtype=np.float64), str(a["wp"]),
                          wyckoff_by_label(sg, str(a["wp"])).site_symm) for a in d["atoms"]]
        return cls(sg, np.asarray(d["ks"], dtype=np.float64), atoms, str(d.get("source", "")))


def from_structure(structure, *, tol: float = 0.01, source: str = "") -> CrystalRep:
    """pymatgen Structure (ordered) -> representation, via pyxtal's symmetrisation (spglib underneath)."""
    from pyxtal import pyxtal

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = pyxtal()
        c.from_seed(structure, tol=tol)
    sg = int(c.group.number)
    ks = mask_ks(lattice_to_ks(np.asarray(c.lattice.matrix, dtype=np.float64)), sg)
    atoms = []
    from pymatgen.core import Element

    for site in c.atom_sites:
        label = f"{site.wp.multiplicity}{site.wp.letter}"
        w = wyckoff_by_label(sg, label)
        p, _ = project_to_wyckoff(w, np.asarray(site.position, dtype=np.float64) % 1.0)
        atoms.append(AsymAtom(int(Element(str(site.specie)).Z), representative(w, p), label, w.site_symm))
    return CrystalRep(sg, ks, atoms, source)


def to_structure(rep: CrystalRep):
    """Expand every asymmetric-unit atom's orbit -> the full cell as a pymatgen Structure."""
    from pymatgen.core import Element, Lattice, Structure

    species, coords = [], []
    for a in rep.atoms:
        w = wyckoff_by_label(rep.space_group, a.wyckoff)
        p, _ = project_to_wyckoff(w, a.frac)
        for pos in orbit(w, p):
            species.append(Element.from_Z(a.z))
            coords.append(pos)
    return Structure(Lattice(ks_to_lattice(mask_ks(rep.ks, rep.space_group))), species, np.asarray(coords))


# ------------------------------------------------------------------------------------------------ CIF
class CifError(ValueError):
    """A CIF that cannot be used, with the reason."""


def parse_cif(text: str):
    """CIF text -> one ordered pymatgen Structure, or CifError with the reason."""
    from pymatgen.io.cif import CifParser

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            structures = CifParser.from_str(text).parse_structures(primitive=False)
        except Exception as exc:  # noqa: BLE001 - pymatgen raises many types for malformed files
            raise CifError(f"unparsable CIF: {str(exc)[:200] or type(exc).__name__}") from None
    if not structures:
        raise CifError("unparsable CIF: no structure in the file")
    s = structures[0]
    if not s.is_ordered:
        raise CifError("disordered structure (partial occupancies) is not supported")
    if len(s) == 0:
        raise CifError("no atoms")
    if any(el.Z > MAX_Z for el in s.composition.elements):
        raise CifError(f"elements beyond Z={MAX_Z} are not supported")
    return s


def write_cif(structure, *, symprec: float | None = None) -> str:
    from pymatgen.io.cif import CifWriter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return str(CifWriter(structure, symprec=symprec))


def spacegroup_of(structure, symprec: float = 0.1) -> int | None:
    """spglib's space group number at symprec (None when spglib finds none)."""
    import spglib

    cell = (np.asarray(structure.lattice.matrix), np.asarray(structure.frac_coords),
            [site.specie.Z for site in structure])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = spglib.get_symmetry_dataset(cell, symprec=symprec)
    return None if ds is None else int(ds.number)


def spglib_has_group_ops(structure, sg: int, symprec: float = 0.1) -> bool:
    """Whether spglib (at symprec) finds every operation of space group sg among the crystal's symmetry operations
    in its own cell: the requested symmetry is confirmed even where spglib reports a supergroup."""
    import spglib

    cell = (np.asarray(structure.lattice.matrix), np.asarray(structure.frac_coords),
            [site.specie.Z for site in structure])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = spglib.get_symmetry(cell, symprec=symprec)
    if not found:
        return False
    rots, trans = np.asarray(found["rotations"]), np.asarray(found["translations"])
    for r, t in zip(*general_ops(sg), strict=True):
        same = np.all(np.abs(rots - np.round(r)[None]) < 1e-6, axis=(1, 2))
        if not np.any(same & (np.linalg.norm(_wrap(trans - t[None]), axis=1) < 1e-2)):
            return False
    return True


def invariant_under_group(structure, sg: int, tol: float = 1e-4) -> bool:
    """Whether every operation of the space group maps the crystal onto itself (same species at the image)."""
    rot, trans = general_ops(sg)
    frac = np.asarray(structure.frac_coords) % 1.0
    z = np.array([site.specie.Z for site in structure])
    for r, t in zip(rot, trans, strict=True):
        img = (frac @ r.T + t) % 1.0
        d = np.linalg.norm(_wrap(img[:, None, :] - frac[None, :, :]), axis=-1)
        same = (z[:, None] == z[None, :])
        if not np.all(np.min(np.where(same, d, np.inf), axis=1) < tol):
            return False
    return True


__all__ = ["AsymAtom", "CrystalRep", "CifError", "from_structure", "to_structure", "parse_cif", "write_cif",
           "spacegroup_of", "snap", "wyckoff_table", "reachable_counts", "lattice_to_ks", "ks_to_lattice", "ks_mask",
           "mask_ks", "invariant_under_group", "parse_formula", "formula_text", "wyckoff_plans"]
