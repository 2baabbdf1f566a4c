"""Generation and evaluation: SymmCD sampling -> snap each atom to the closest Wyckoff position whose site symmetry
matches the prediction -> expand orbits -> the full crystal (re-drawn, a bounded number of times, when spglib does
not detect exactly the requested group or atoms are within 0.5 A: sample_symmcd); the two baselines (pyxtal random
symmetric crystals, the P1 model); and the report (one row per crystal, one summary per set) shared by all three.

Metrics (after SymmCD/DiffCSP's evaluation): structural validity (every interatomic distance > 0.5 A and volume >
0.1 A^3), compositional validity (SMACT: some oxidation-state assignment is charge neutral and passes the Pauling
electronegativity test; single elements and all-metal compositions count as valid), requested vs detected space group
(spglib, symprec 0.1), invariance under the group's operations, and set-level Wasserstein distances of density and
number of elements and the Jensen-Shannon divergence of the detected space-group histogram, against a reference set."""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from services.design.crystals import representation as R
from services.design.crystals.representation import formula_text, parse_formula, wyckoff_plans  # noqa: F401

SYMPREC = 0.1


# ----------------------------------------------------------------------------------------------- requests
@dataclass(frozen=True)
class Request:
    """What to generate: a distribution over space groups ({sg: weight}; empty = the model's training
    distribution), the total atom-count range of the cell, optional allowed elements, an optional fixed formula
    (((element, count), ...) of the reduced formula: every crystal is that formula times some Z), and whether a
    crystal whose composition fails SMACT's check is re-drawn like one that misses its group."""

    groups: dict[int, float]
    min_atoms: int
    max_atoms: int
    elements: tuple[str, ...] = ()
    formula: tuple[tuple[str, int], ...] = ()
    require_valid_composition: bool = False


def check_reachable(groups: dict[int, float], lo: int, hi: int) -> list[int]:
    """Groups (of those asked for) where no Wyckoff combination gives a cell of lo..hi atoms."""
    return [g for g in groups if not any(lo <= n <= hi for n in R.reachable_counts(g, hi))]


def draw_groups(req: Request, model_sg_dist: torch.Tensor, n: int, rng: np.random.Generator) -> list[int]:
    if req.groups:
        keys = sorted(req.groups)
        w = np.array([req.groups[k] for k in keys], dtype=float)
        return [int(v) for v in rng.choice(keys, size=n, p=w / w.sum())]
    p = model_sg_dist.double().numpy()
    ok = np.array([i > 0 and bool(p[i] > 0) and any(req.min_atoms <= c <= req.max_atoms
                                                    for c in R.reachable_counts(i, req.max_atoms))
                   for i in range(len(p))])
    p = np.where(ok, p, 0.0)
    if p.sum() <= 0:
        p = ok.astype(float)
    return [int(v) for v in rng.choice(len(p), size=n, p=p / p.sum())]


# ----------------------------------------------------------------------------------------------- SymmCD sampling
def _z_mask(elements: tuple[str, ...]) -> torch.Tensor | None:
    if not elements:
        return None
    from pymatgen.core import Element

    m = torch.zeros(R.MAX_Z, dtype=torch.bool)
    for e in elements:
        m[Element(e).Z - 1] = True
    return m


def _plan_weight(model, sg: int, plan: list[tuple[str, str]]) -> float:
    """How likely the model's per-group site-symmetry marginal finds a plan's positions (each atom's one-hot
    scored axis by axis), so the plans drawn for a fixed formula follow the training data's site symmetries."""
    prior = model.symm_prior_of(torch.tensor([sg]))[0].double().numpy()  # [15, 13]
    logp = 0.0
    for _, label in plan:
        oh = R.wyckoff_by_label(sg, label).site_symm.reshape(prior.shape)
        logp += float(np.log(np.maximum((prior * oh).sum(-1), 1e-12)).sum())
    return logp


def sample_symmcd(model, req: Request, n: int, *, seed: int, steps_rounds: int = 4, oversample: float = 1.5,
                  sampling_steps: int | None = None, max_retries: int = 0
                  ) -> list[tuple[R.CrystalRep | None, Any, dict]]:
    """n crystals of the request, one per slot, always n entries: a slot that got no crystal in the atom-count
    range (or, with a fixed formula, no placement of it in its group) comes back as (None, None, info) with
    info["failed"] and info["reason"] saying why, so the report covers every group asked and never reads as an
    empty success. Each slot gets its requested group once (re-draws do not tilt the group distribution); a slot's
    candidates outside the range are discarded (at most `steps_rounds` rounds, `oversample` candidates per empty
    slot).

    Acceptance check and re-draws (max_retries > 0, symmetric model only). SymmCD's released code
    (sibasmarak/SymmCD: DiffusionWithSiteSymm.sample -> modify_frac_coords) snaps and expands once and scores spglib's
    verdict afterwards (scripts/compute_metrics.py, symprec 0.1), with no check or retry. We add one: after snapping
    and expanding, `check_crystal` (spglib finds exactly the requested group at symprec 0.1, every distance > 0.5 A,
    and with req.require_valid_composition the composition passes SMACT); a crystal that fails it is re-drawn from
    the model with fresh noise, in the same group, at most max_retries times. We re-draw rather than nudge free
    parameters or the lattice off special values: a re-draw is still a sample of the model snapped the paper's way.
    A slot that fails every draw keeps its last crystal, reported as the miss it is; info carries the slot's draws
    and its first draw's verdict (the rates before re-draws).

    Composition: atom types are denoised jointly with the site symmetries, coordinates and lattice (one network, as
    the paper); req.elements restricts the types; req.formula fixes them: each slot draws a placement of formula x Z
    on its group's Wyckoff positions (wyckoff_plans, weighted by the model's site-symmetry marginal) and the model
    samples with those types and site symmetries held (SymmCD.sample's inpainting), so the formula is exact.
    sampling_steps: the diffusion timesteps visited (None: all T of the model; fewer: strided, SymmCD.sample)."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    zmask = _z_mask(req.elements)
    symmetric = model.cfg.symmetric
    retries = max_retries if symmetric else 0  # the P1 baseline is sampled as is: it cannot build a group in
    wanted = draw_groups(req, model.sg_dist, n, rng)
    slots: list[tuple[R.CrystalRep, Any, dict] | None] = [None] * n
    draws = [0] * n
    seconds = [0.0] * n
    nd = model.n_dist.double().numpy()
    too_many = [nd.shape[1]] * n  # per slot: asymmetric-unit sizes from this one up overflowed the range
    plans: dict[int, tuple[list, np.ndarray]] = {}
    failed: dict[int, str] = {}
    if req.formula:
        for g in sorted(set(wanted if symmetric else [1])):
            found = wyckoff_plans(g, req.formula, req.min_atoms, req.max_atoms, max_asym=model.cfg.max_asym)
            if found:
                logw = np.array([_plan_weight(model, g, pl) for pl in found])
                plans[g] = (found, np.exp(logw - logw.max()) / np.exp(logw - logw.max()).sum())
        for i in range(n):
            if (wanted[i] if symmetric else 1) not in plans:
                failed[i] = (f"space group {wanted[i] if symmetric else 1} has no placement of "
                             f"{formula_text(req.formula)} x Z on its Wyckoff positions with {req.min_atoms}.."
                             f"{req.max_atoms} atoms and at most {model.cfg.max_asym} in the asymmetric unit")
    for _ in range(steps_rounds + retries):
        empty = [i for i in range(n) if slots[i] is None and i not in failed]
        redo = [i for i in range(n) if slots[i] is not None and not slots[i][2]["accepted"] and draws[i] <= retries]
        if not empty and not redo:
            break
        m_empty = int(math.ceil(len(empty) * oversample)) if empty else 0
        slot_of = [empty[j % len(empty)] for j in range(m_empty)] + redo
        sgs = [wanted[i] if symmetric else 1 for i in slot_of]
        counts, chosen = [], []
        for i, g in zip(slot_of, sgs, strict=True):
            if req.formula:
                found, w = plans[g]
                pl = found[int(rng.choice(len(found), p=w))]
                chosen.append(pl)
                counts.append(len(pl))
                continue
            # the number of asymmetric-unit atoms: at most max_atoms in both modes (every orbit has >= 1 atom); in P1
            # it is the cell's atom count, so at least min_atoms too (a symmetric cell's total is checked below)
            p = nd[g].copy()
            idx = np.arange(len(p))
            # each asymmetric-unit atom takes at least the group's smallest multiplicity; a slot whose draw of k
            # atoms overflowed the range draws fewer next time
            keep = (idx >= (1 if symmetric else req.min_atoms)) & (idx * _min_mult(g) <= req.max_atoms) \
                & (idx < too_many[i])
            if not keep.any():
                keep = idx == 1
            p = np.where(keep, p, 0.0)
            if p.sum() <= 0:
                p = keep.astype(float)
            counts.append(int(rng.choice(len(p), p=p / p.sum())))
            chosen.append(None)
        fixed_z = fixed_ss = None
        if req.formula:
            from pymatgen.core import Element

            fixed_z = torch.zeros(len(sgs), max(counts), dtype=torch.long)
            fixed_ss = torch.full((len(sgs), max(counts), R.N_AXES), -1, dtype=torch.long)
            for b, pl in enumerate(chosen):
                for j, (el, label) in enumerate(pl):
                    fixed_z[b, j] = Element(el).Z
                    fixed_ss[b, j] = torch.tensor(R.wyckoff_by_label(sgs[b], label).site_symm.argmax(-1))
        t0 = time.perf_counter()
        res = model.sample(torch.tensor(sgs), torch.tensor(counts), gen=gen, steps=sampling_steps,
                           allowed_types=zmask, fixed_z=fixed_z, fixed_ss=fixed_ss)
        per = (time.perf_counter() - t0) / len(slot_of)
        taken: set[int] = set()
        for b, i in enumerate(slot_of):
            seconds[i] += per
            if i in taken:
                continue
            made = _snap_sample(res, b, sgs[b], int(counts[b]), req, symmetric)
            if made is None:  # outside the atom-count range (or off the fixed formula): not a draw of the slot
                if not req.formula and counts[b] > 1:
                    too_many[i] = min(too_many[i], int(counts[b]))
                continue
            rep, info = made
            taken.add(i)
            structure = R.to_structure(rep)
            verdict = check_crystal(structure, wanted[i], req.require_valid_composition)
            draws[i] += 1
            first = verdict if draws[i] == 1 else {k: slots[i][2][k] for k in verdict}
            accepted = all(v for k, v in verdict.items() if k != "first_draw_compositionally_valid"
                           or req.require_valid_composition)
            slots[i] = (rep, structure, {"requested_sg": int(wanted[i]), **info, "accepted": accepted, **first})
    out: list[tuple[R.CrystalRep | None, Any, dict]] = []
    for i, s in enumerate(slots):
        if s is not None:
            s[2].update(draws=draws[i], seconds=seconds[i])
            out.append(s)
            continue
        reason = failed.get(i) or (
            f"no draw of the model in space group {wanted[i]} gave a cell of {req.min_atoms}..{req.max_atoms} atoms"
            + (f" with the formula {formula_text(req.formula)}" if req.formula else "")
            + f" ({steps_rounds + retries} rounds)")
        out.append((None, None, {"requested_sg": int(wanted[i]), "failed": True, "reason": reason, "draws": 0,
                                 "seconds": seconds[i]}))
    return out


def _snap_sample(res: dict[str, torch.Tensor], b: int, g: int, k: int, req: Request, symmetric: bool
                 ) -> tuple[R.CrystalRep, dict] | None:
    """Sample b of a model.sample batch -> snap each atom to a Wyckoff position of g (R.snap) -> the crystal's
    representation, or None when its cell is outside the atom-count range (or, with a fixed formula, is not it)."""
    atoms, ss_d, pj_d = [], [], []
    occupied: set[str] = set()
    used = 0
    low = _min_mult(g)
    for i in range(k):
        w, p, sd, pd = R.snap(g, res["ss"][b, i].numpy(), res["x"][b, i].double().numpy(), occupied,
                              budget=req.max_atoms - used - (k - i - 1) * low)
        used += w.multiplicity
        if w.dof == 0:
            occupied.add(w.label)
        atoms.append(R.AsymAtom(int(res["z"][b, i]), R.representative(w, p), w.label, w.site_symm))
        ss_d.append(sd)
        pj_d.append(pd)
    rep = R.CrystalRep(g, res["ks"][b].double().numpy(), atoms, "symmcd" if symmetric else "p1")
    if not req.min_atoms <= rep.n_atoms <= req.max_atoms:
        return None
    if req.formula and reduced_counts(rep) != tuple(req.formula):
        return None
    return rep, {"site_symm_dist": float(np.mean(ss_d)), "projection_dist": float(np.mean(pj_d))}


def _min_mult(g: int) -> int:
    return min(w.multiplicity for w in R.wyckoff_table(g))


def reduced_counts(rep: R.CrystalRep) -> tuple[tuple[str, int], ...]:
    from pymatgen.core import Element

    comp: dict[str, int] = {}
    for a in rep.atoms:
        el = Element.from_Z(a.z).symbol
        comp[el] = comp.get(el, 0) + R.wyckoff_by_label(rep.space_group, a.wyckoff).multiplicity
    g = 0
    for v in comp.values():
        g = math.gcd(g, v)
    return tuple(sorted((el, v // g) for el, v in comp.items()))


def check_crystal(structure, sg: int, composition: bool = False) -> dict[str, bool]:
    """The acceptance check of sample_symmcd's re-draws, with evaluate's own tests: structurally valid (a usable
    lattice, every interatomic distance > 0.5 A, volume > 0.1 A^3), spglib (symprec 0.1) detecting exactly
    group sg, and the composition passing SMACT (computed always, a reason to re-draw only when asked). Keys as in
    evaluate's row, prefixed first_draw_ (they describe a slot's first draw in the report)."""
    comp_ok = bool(structure is not None and smact_valid(
        {el.symbol: int(round(v)) for el, v in structure.composition.items()}))
    if structure is None or degenerate_lattice(structure.lattice.matrix):
        return {"first_draw_structurally_valid": False, "first_draw_space_group_match": False,
                "first_draw_compositionally_valid": comp_ok}
    valid = bool(min_distance(structure) > 0.5 and float(structure.volume) > 0.1)
    try:
        match = (R.spacegroup_of(structure, SYMPREC) or 0) == sg
    except Exception:  # noqa: BLE001 - spglib rejects some degenerate cells
        match = False
    return {"first_draw_structurally_valid": valid, "first_draw_space_group_match": bool(match),
            "first_draw_compositionally_valid": comp_ok}


# ----------------------------------------------------------------------------------------------- pyxtal baseline
def sample_pyxtal(req: Request, n: int, *, seed: int, reference: list[R.CrystalRep], tries: int = 30
                  ) -> list[tuple[R.CrystalRep | None, Any, dict]]:
    """pyxtal random symmetric crystals: group drawn as for SymmCD (from the reference set's distribution when
    none is asked); composition: the fixed formula times Z, or a random reference crystal's reduced composition
    times a Z that the group's Wyckoff positions can hold in the atom-count range (compositions drawn from the
    data), or with composition hints random counts of the hinted elements."""
    from pymatgen.core import Element
    from pyxtal import pyxtal

    rng = np.random.default_rng(seed)
    sgc = torch.zeros(R.N_SPACEGROUPS + 1)
    for r in reference:
        sgc[r.space_group] += 1
    if sgc.sum() == 0:
        sgc[1:] = 1
    out = []
    for sg in draw_groups(req, sgc / sgc.sum(), n, rng):
        t0 = time.perf_counter()
        struct = None
        for _ in range(tries):
            if req.formula:
                els = [el for el, _ in req.formula]
                props = np.array([c for _, c in req.formula], dtype=float)
                zs = [z for z in range(1, req.max_atoms // int(props.sum()) + 1) if z * props.sum() >= req.min_atoms]
                if not zs:
                    break
                nums = (props * int(rng.choice(zs))).astype(int).tolist()
                if not R.group(sg).check_compatible(nums)[0]:
                    continue
            elif req.elements:
                k = int(rng.integers(1, min(3, len(req.elements)) + 1))
                els = list(rng.choice(list(req.elements), size=k, replace=False))
                props = np.ones(k)
            else:
                ref = reference[int(rng.integers(len(reference)))]
                comp: dict[int, int] = {}
                for a in ref.atoms:
                    comp[a.z] = comp.get(a.z, 0) + R.wyckoff_by_label(ref.space_group, a.wyckoff).multiplicity
                els = [Element.from_Z(z).symbol for z in comp]
                props = np.array(list(comp.values()), dtype=float)
            if not req.formula and req.elements:
                total = int(rng.integers(max(req.min_atoms, len(els)), req.max_atoms + 1)) \
                    if req.max_atoms >= max(req.min_atoms, len(els)) else req.max_atoms
                nums = np.maximum(1, np.round(props / props.sum() * total)).astype(int).tolist()
                if not req.min_atoms <= sum(nums) <= req.max_atoms or not R.group(sg).check_compatible(nums)[0]:
                    continue
            elif not req.formula:
                # the reference crystal's own composition (reduced) times a Z that fits the range and the group
                unit = (props / np.gcd.reduce(props.astype(int))).astype(int)
                zs = [z for z in range(1, req.max_atoms // int(unit.sum()) + 1)
                      if z * unit.sum() >= req.min_atoms and R.group(sg).check_compatible((unit * z).tolist())[0]]
                if not zs:
                    continue
                nums = (unit * int(rng.choice(zs))).tolist()
            c = pyxtal()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    c.from_random(3, sg, els, nums, random_state=int(rng.integers(2 ** 31)))
                except Exception:  # noqa: BLE001
                    continue
            if c.valid:
                struct = c.to_pymatgen()
                break
        info = {"requested_sg": int(sg), "seconds": time.perf_counter() - t0}
        if struct is None:
            info.update(failed=True, reason=f"pyxtal found no random crystal in space group {sg} with "
                        f"{req.min_atoms}..{req.max_atoms} atoms in {tries} tries")
        out.append((None, struct, info))
    return out


# ----------------------------------------------------------------------------------------------- metrics
def smact_valid(counts: dict[str, int]) -> bool:
    """SMACT's validity check (smact.screening.smact_validity, SMACT 4's defaults): some assignment of the ICSD-24
    oxidation states (those reported in at least 3 ICSD entries) is charge neutral and passes the Pauling
    electronegativity test; a single element and an all-metal composition (an alloy) count as valid, as in
    CDVAE/DiffCSP/SymmCD's evaluation."""
    from pymatgen.core import Composition
    from smact.screening import smact_validity

    comp = {el: int(v) for el, v in counts.items() if int(v) > 0}
    if not comp:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(smact_validity(Composition(comp)))


MIN_LENGTH, MAX_LENGTH, MAX_ABS_COS = 0.5, 100.0, 0.98


def degenerate_lattice(matrix) -> bool:
    """A cell no crystal has: a lattice vector shorter than 0.5 A (an atom within 0.5 A of its own image, so
    structurally invalid anyway), longer than 100 A, or nearly flat. Such cells (an untrained model makes them)
    are reported as failed without running spglib or a periodic distance search, whose cost and memory explode on
    them."""
    m = np.asarray(matrix, dtype=float)
    if not np.all(np.isfinite(m)):
        return True
    lengths = np.linalg.norm(m, axis=1)
    if lengths.min() < MIN_LENGTH or lengths.max() > MAX_LENGTH:
        return True
    u = m / lengths[:, None]
    cos = [abs(float(u[i] @ u[j])) for i, j in ((0, 1), (0, 2), (1, 2))]
    return max(cos) > MAX_ABS_COS or abs(float(np.linalg.det(u))) < 0.05


def min_distance(structure) -> float:
    """The smallest interatomic distance (periodic images included; one atom: its shortest lattice vector)."""
    if len(structure) > 1:
        dm = structure.distance_matrix
        return float(np.min(dm[np.triu_indices(len(structure), 1)]))
    return float(min(structure.lattice.abc))


def evaluate(structure, requested_sg: int, claimed_sg: int | None) -> dict[str, Any]:
    """One report row (without ids)."""
    # invariance is a property of the fractional coordinates: checked even when the lattice is degenerate
    inv = bool(R.invariant_under_group(structure, claimed_sg, 1e-4)) if structure is not None and claimed_sg \
        else False
    n_atoms = len(structure) if structure is not None else 0
    if structure is not None and degenerate_lattice(structure.lattice.matrix):
        structure = None  # not a usable crystal; spglib and the distance search are not run on it
    if structure is None:
        return {"requested_space_group": requested_sg, "detected_space_group": 0, "space_group_match": False,
                "requested_ops_found": False,
                "structurally_valid": False, "compositionally_valid": False, "valid": False, "invariant": inv,
                "n_atoms": n_atoms, "formula": "", "volume": 0.0, "density": 0.0, "min_distance": 0.0, "n_elements": 0,
                "failed": True}
    vol = float(structure.volume)
    md = min_distance(structure)
    struct_ok = bool(md > 0.5 and vol > 0.1)
    comp = {el.symbol: int(round(v)) for el, v in structure.composition.items()}
    try:
        detected = R.spacegroup_of(structure, SYMPREC) or 0
    except Exception:  # noqa: BLE001 - spglib rejects some degenerate cells (atoms on top of each other)
        detected = 0
    comp_ok = smact_valid(comp)
    try:
        confirmed = bool(detected) and R.spglib_has_group_ops(structure, requested_sg, SYMPREC)
    except Exception:  # noqa: BLE001 - spglib rejects some degenerate cells
        confirmed = False
    return {"requested_space_group": int(requested_sg), "detected_space_group": int(detected),
            "space_group_match": bool(detected == requested_sg), "requested_ops_found": confirmed, "structurally_valid": struct_ok,
            "compositionally_valid": bool(comp_ok), "valid": bool(struct_ok and comp_ok), "invariant": bool(inv),
            "n_atoms": len(structure), "formula": structure.composition.reduced_formula, "volume": vol,
            "density": float(structure.density), "min_distance": md, "n_elements": len(comp), "failed": False}


def reference_stats(reps: list[R.CrystalRep]) -> dict[str, Any]:
    dens, nel, sgs = [], [], []
    for r in reps:
        s = R.to_structure(r)
        dens.append(float(s.density))
        nel.append(len(s.composition.elements))
        sgs.append(r.space_group)
    return {"density": dens, "n_elements": nel, "space_groups": sgs}


def jsd(p_counts: dict[int, float], q_counts: dict[int, float]) -> float:
    keys = sorted(set(p_counts) | set(q_counts))
    p = np.array([p_counts.get(k, 0.0) for k in keys], dtype=float)
    q = np.array([q_counts.get(k, 0.0) for k in keys], dtype=float)
    if p.sum() == 0 or q.sum() == 0:
        return float(math.log(2))
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(a, b):
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / b[nz])))
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def summarize(rows: list[dict[str, Any]], reference: dict[str, Any], seconds: float, requested: int) -> dict[str, Any]:
    from scipy.stats import wasserstein_distance

    n = sum(not r.get("reason") for r in rows)  # crystals made (a slot with a reason made none)
    ok = [r for r in rows if not r["failed"]]

    def rate(key):
        return float(np.mean([r[key] for r in rows])) if rows else 0.0

    def first_rate(key):  # before re-draws (a row without re-draw fields: its first draw is itself)
        return float(np.mean([r.get(f"first_draw_{key}", r[key]) for r in rows])) if rows else 0.0
    draws = [int(r.get("draws", 1)) for r in rows]
    det: dict[int, float] = {}
    for r in rows:
        det[r["detected_space_group"]] = det.get(r["detected_space_group"], 0) + 1
    ref: dict[int, float] = {}
    for g in reference["space_groups"]:
        ref[g] = ref.get(g, 0) + 1
    dens = [r["density"] for r in ok]
    nel = [r["n_elements"] for r in ok]
    return {
        "n_requested": requested, "n_generated": n, "structural_validity": rate("structurally_valid"),
        "compositional_validity": rate("compositionally_valid"), "validity": rate("valid"),
        "space_group_match_rate": rate("space_group_match"), "invariant_rate": rate("invariant"),
        "requested_ops_found_rate": rate("requested_ops_found"),
        "space_group_jsd": jsd(det, ref),
        "density_wasserstein": float(wasserstein_distance(dens, reference["density"])) if dens else None,
        "n_elements_wasserstein": float(wasserstein_distance(nel, reference["n_elements"])) if nel else None,
        "crystals_per_second": float(n / seconds) if seconds > 0 else 0.0,
        # sample_symmcd's re-draws: the rates of the first draws, how many crystals needed more, how many extra
        "first_draw_space_group_match_rate": first_rate("space_group_match"),
        "first_draw_structural_validity": first_rate("structurally_valid"),
        "first_draw_compositional_validity": first_rate("compositionally_valid"),
        "n_redrawn": int(sum(d > 1 for d in draws)), "extra_draws": int(sum(max(d - 1, 0) for d in draws)),
        "n_failed": int(sum(bool(r.get("reason")) for r in rows)),
        "groups": group_answers(rows),
    }


def group_answers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per requested space group: crystals asked for, made, matching the group, and why any were not
    made (the slots' reasons, deduplicated)."""
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        g = out.setdefault(int(r["requested_space_group"]), {"space_group": int(r["requested_space_group"]),
                                                             "requested": 0, "generated": 0, "matched": 0,
                                                             "reason": ""})
        g["requested"] += 1
        if r.get("reason"):
            if r["reason"] not in g["reason"]:
                g["reason"] = f"{g['reason']}; {r['reason']}" if g["reason"] else r["reason"]
        else:
            g["generated"] += 1
            g["matched"] += int(bool(r["space_group_match"]))
    return [out[k] for k in sorted(out)]


def cif_of(structure) -> str:
    return R.write_cif(structure)
