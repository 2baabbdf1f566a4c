"""SymmCD's representation: asymmetric-unit round trip of every shipped ordered structure the built-in set uses
(space group by spglib and structure by StructureMatcher), Wyckoff snapping and orbits, the masked log-lattice,
reachable atom counts, CIF validation."""
from __future__ import annotations

import io
import warnings
import zipfile

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.design.crystals import data as D
from services.design.crystals import representation as R


@pytest.fixture(scope="module")
def shipped():
    return D.shipped_structures()


def test_round_trip_of_every_shipped_ordered_structure(shipped):
    from pymatgen.analysis.structure_matcher import StructureMatcher

    sm = StructureMatcher()
    assert len(shipped) >= 400  # the real structures of at most 64 atoms (AFLOW, ASE, pymatgen, pyxtal, MP)
    used = 0
    for name, s in shipped:
        s = s.copy()
        s.remove_oxidation_states()
        rep = D.represent(s, name)
        if D.usable(rep, s) is not None:
            continue  # not in the built-in set (too large for the CPU model, or symmetrised to another group)
        used += 1
        back = R.parse_cif(R.write_cif(R.to_structure(rep)))
        # at the tolerance the representation was made with (a few real cells are within 0.1 of a higher group)
        assert R.spacegroup_of(back, 0.01) == R.spacegroup_of(s, 0.01) == rep.space_group, name
        assert sm.fit(s, back), name
        # the representation itself survives serialisation
        again = R.CrystalRep.from_dict(rep.to_dict())
        assert again.space_group == rep.space_group and [a.wyckoff for a in again.atoms] == \
            [a.wyckoff for a in rep.atoms]
        assert all(a.site_symm.shape == (R.N_AXES, R.N_CLASSES) and a.site_symm.sum() == R.N_AXES
                   for a in rep.atoms)
    assert used >= 380


@pytest.mark.parametrize("sg", [1, 2, 5, 14, 15, 47, 62, 74, 99, 123, 141, 148, 160, 166, 186, 191, 194, 205,
                                216, 221, 225, 227, 229, 230])
def test_snapped_orbits_are_invariant_and_have_the_multiplicity(sg):
    from pymatgen.core import Lattice, Structure

    rng = np.random.default_rng(sg)
    occupied: set[str] = set()
    for w in R.wyckoff_table(sg):
        x = rng.random(3)
        got, p, ss_dist, proj = R.snap(sg, w.site_symm, x)
        assert ss_dist == 0.0 and got.site_symm.tolist() == w.site_symm.tolist()
        orb = R.orbit(got, p)
        d = np.linalg.norm(R._wrap(orb[:, None] - orb[None]), axis=-1) + np.eye(len(orb))
        assert len(orb) == got.multiplicity and d.min() > 1e-6
        ks = R.mask_ks(rng.normal(size=6) * 0.2 + [0, 0, 0, 0, 0, 1.3], sg)
        s = Structure(Lattice(R.ks_to_lattice(ks)), ["Si"] * len(orb), orb)
        assert R.invariant_under_group(s, sg)
        # the projection is the closest point of the orbit set to x: no orbit member is farther than the snap
        assert proj <= np.min(np.linalg.norm(R._wrap(orb - x), axis=1)) + 1e-9
    # fixed positions are used once: a second atom asking for an occupied one gets another position
    fixed = [w for w in R.wyckoff_table(sg) if w.dof == 0]
    if fixed:
        first = R.snap(sg, fixed[0].site_symm, rng.random(3))[0]
        occupied.add(first.label)
        second = R.snap(sg, fixed[0].site_symm, rng.random(3), occupied)[0]
        assert second.label != first.label or len(R.wyckoff_table(sg)) == 1


def test_a_broken_structure_is_not_invariant():
    from pymatgen.core import Lattice, Structure

    s = Structure(Lattice.cubic(4.0), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    assert R.invariant_under_group(s, 221)
    s2 = Structure(Lattice.cubic(4.0), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.4, 0.5]])
    assert not R.invariant_under_group(s2, 221)


@pytest.mark.parametrize("sg,family", [(2, "triclinic"), (14, "monoclinic"), (62, "orthorhombic"),
                                       (139, "tetragonal"), (166, "hexagonal"), (194, "hexagonal"), (225, "cubic")])
def test_masked_log_lattice_has_the_family_metric(sg, family):
    rng = np.random.default_rng(0)
    for _ in range(20):
        lat = R.ks_to_lattice(R.mask_ks(rng.normal(size=6) * 0.4, sg))
        a, b, c = np.linalg.norm(lat, axis=1)
        cos = lambda u, v: float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))  # noqa: E731
        alpha, beta, gamma = cos(lat[1], lat[2]), cos(lat[0], lat[2]), cos(lat[0], lat[1])
        assert R.crystal_family(sg) == family
        if family in ("orthorhombic", "tetragonal", "cubic"):
            assert max(abs(alpha), abs(beta), abs(gamma)) < 1e-9
        if family == "monoclinic":
            assert abs(alpha) < 1e-9 and abs(gamma) < 1e-9
        if family in ("tetragonal", "hexagonal"):
            assert abs(a - b) < 1e-9
        if family == "hexagonal":
            assert abs(gamma + 0.5) < 1e-9 and abs(alpha) < 1e-9 and abs(beta) < 1e-9
        if family == "cubic":
            assert abs(a - b) < 1e-9 and abs(b - c) < 1e-9
        # ks -> lattice -> ks is the identity on masked vectors
        ks = R.mask_ks(rng.normal(size=6) * 0.4, sg)
        assert np.allclose(R.lattice_to_ks(R.ks_to_lattice(ks)), ks, atol=1e-9)


def test_reachable_atom_counts():
    assert sorted(R.reachable_counts(225, 16)) == [4, 8, 12, 16]  # Fm-3m: 4a, 4b, 8c, then 24+
    assert not any(1 <= n <= 3 for n in R.reachable_counts(225, 3))
    assert sorted(R.reachable_counts(1, 5)) == [1, 2, 3, 4, 5]
    assert 1 in R.reachable_counts(221, 8) and 2 in R.reachable_counts(221, 8)


NACL = """data_NaCl
_symmetry_space_group_name_H-M   'F m -3 m'
_cell_length_a   5.64
_cell_length_b   5.64
_cell_length_c   5.64
_cell_angle_alpha   90
_cell_angle_beta   90
_cell_angle_gamma   90
_symmetry_Int_Tables_number   225
loop_
 _symmetry_equiv_pos_as_xyz
  'x, y, z'
  '-x, -y, -z'
  'x+1/2, y+1/2, z'
  'x+1/2, y, z+1/2'
  'x, y+1/2, z+1/2'
  '-x+1/2, -y+1/2, -z'
  '-x+1/2, -y, -z+1/2'
  '-x, -y+1/2, -z+1/2'
loop_
 _atom_site_label
 _atom_site_type_symbol
 _atom_site_fract_x
 _atom_site_fract_y
 _atom_site_fract_z
 _atom_site_occupancy
  Na1 Na 0.0 0.0 0.0 1
  Cl1 Cl 0.5 0.5 0.5 1
"""
DISORDERED = NACL.replace("Cl1 Cl 0.5 0.5 0.5 1", "Cl1 Cl 0.5 0.5 0.5 0.5\n  Br1 Br 0.5 0.5 0.5 0.5")


def test_import_validates_every_file_and_names_each_bad_one():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok = D.import_cifs([("nacl.cif", NACL.encode())], source="t")
        assert len(ok.crystals) == 1 and ok.crystals[0].space_group in (221, 225)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("good.cif", NACL)
            zf.writestr("mixed.cif", DISORDERED)
        with pytest.raises(InvalidArgument) as e:
            D.import_cifs([("a.cif", NACL.encode()), ("b.cif", b"data_x\n_cell_length_a oops\n"),
                           ("set.zip", buf.getvalue()), ("c.cif", b"\xff\xfe")], source="t")
    v = {x.field: x.description for x in e.value.violations}
    assert set(v) == {"artifact_ids[1]", "artifact_ids[2]:mixed.cif", "artifact_ids[3]"}
    assert "unparsable" in v["artifact_ids[1]"] and "disordered" in v["artifact_ids[2]:mixed.cif"]
    assert "UTF-8" in v["artifact_ids[3]"]
    assert e.value.reason == "INVALID_CIF"


def test_fixed_split_depends_only_on_the_source():
    names = [f"pyxtal-random:0:{i}" for i in range(400)]
    splits = [D.split_of(n) for n in names]
    assert splits == [D.split_of(n) for n in reversed(names)][::-1]
    assert 0.7 < splits.count("train") / 400 < 0.9 and splits.count("test") > 10


def test_formulas_and_their_wyckoff_placements():
    assert R.parse_formula("CaTiO3") == (("Ca", 1), ("O", 3), ("Ti", 1)) == R.parse_formula("Ca2Ti2O6")
    assert R.formula_text(R.parse_formula("O3TiCa")) == "CaTiO3"
    for bad in ("Xx2", "", "NaCl0.5"):
        with pytest.raises(ValueError):
            R.parse_formula(bad)
    f = R.parse_formula("CaTiO3")
    for sg in (221, 166, 62, 194, 1):
        plans = R.wyckoff_plans(sg, f, 1, 48)
        assert plans, sg
        for plan in plans:
            counts: dict[str, int] = {}
            for el, label in plan:
                counts[el] = counts.get(el, 0) + R.wyckoff_by_label(sg, label).multiplicity
            z = counts["Ca"]
            assert counts == {"Ca": z, "Ti": z, "O": 3 * z} and 5 * z <= 48
            fixed = [label for _, label in plan if R.wyckoff_by_label(sg, label).dof == 0]
            assert len(fixed) == len(set(fixed))  # a fixed site holds one atom
    assert [("Ca", "1b"), ("O", "3c"), ("Ti", "1a")] in R.wyckoff_plans(221, f, 1, 5)  # the perovskite itself
    assert R.wyckoff_plans(225, f, 1, 10) == []  # Fm-3m cannot hold CaTiO3 x Z in 10 atoms
