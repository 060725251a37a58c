"""P05 issue 35 item 5: rebuilt cells use pyxtal's origin choice 2 for 24 groups; the standard setting is offered."""
import warnings

import numpy as np
import pytest
import spglib
from pymatgen.core import Structure, Lattice

from neurips25.sgequidiff.symmetry import space_group
from neurips25.sgequidiff.lattice import apply_bravais
from neurips25.sgequidiff.representation import (AsymCrystal, ORIGIN_CHOICE_2, origin_shift, spglib_quiet,
                                                 standard_setting)
from neurips25.sgequidiff.model import Sample


def _same(s1, s2):
    "Same species at the same fractional coordinates (mod 1), in any order."
    if len(s1) != len(s2): return False
    d = s1.frac_coords[:, None] - s2.frac_coords[None]
    d = np.abs(d - np.round(d)).max(-1)
    sp1, sp2 = np.array([str(x) for x in s1.species]), np.array([str(x) for x in s2.species])
    j = d.argmin(1)
    return bool((d.min(1) < 1e-6).all() and (sp1 == sp2[j]).all() and len(set(j)) == len(s1))


def _crystal(n, rng):
    G = space_group(n)
    lat = apply_bravais([9.0, 10.0, 11.0, 90.0, 90.0, 90.0], n)
    gen, a = G.wyckoffs[-1], G.wyckoffs[0]
    return AsymCrystal(n, lat, (gen.letter, a.letter), ("Si", "O"),
                       np.stack([gen.point(rng.random(3)), a.point(rng.random(a.dof))]))


def test_the_24_groups_are_exactly_those_whose_hall_setting_differs():
    first = {}
    with spglib_quiet():                                  # spglib 2.7+: a DeprecationWarning on every call
        for h in range(1, 531):
            first.setdefault(spglib.get_spacegroup_type(h).number, h)
    assert tuple(n for n in range(1, 231) if space_group(n).hall_number != first[n]) == ORIGIN_CHOICE_2
    assert len(ORIGIN_CHOICE_2) == 24


@pytest.mark.parametrize("n", ORIGIN_CHOICE_2 + (166, 194, 225))
def test_standard_setting_combines_with_from_spacegroup(n):
    cr = _crystal(n, np.random.default_rng(n))
    lat = Lattice.from_parameters(*cr.lattice)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Structure.from_spacegroup(n, lat, list(cr.elements), cr.standard_coords())
        naive = Structure.from_spacegroup(n, lat, list(cr.elements), cr.coords)
    ours = cr.to_structure(min_dist=0.0)
    assert _same(ref, cr.to_structure(min_dist=0.0, standard_setting=True))
    assert _same(ref, standard_setting(ours, n))
    # the raw (pyxtal-setting) coordinates give pymatgen a different cell exactly for the 24 groups
    assert _same(naive, ours) == (n not in ORIGIN_CHOICE_2)
    # a translation only: the same crystal
    assert np.allclose(standard_setting(ours, n).lattice.matrix, ours.lattice.matrix)
    if n not in ORIGIN_CHOICE_2: assert not origin_shift(n).any()


def test_sample_cif_in_standard_setting():
    n = 227
    cr = _crystal(n, np.random.default_rng(1))
    s = Sample(n, cr.lattice, cr.wyckoffs, cr.elements, cr.coords, cr.to_structure(min_dist=0.0), 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Structure.from_spacegroup(n, Lattice.from_parameters(*cr.lattice), list(cr.elements), s.standard_coords())
        std = Structure.from_str(s.to_cif(standard_setting=True), fmt="cif")
        raw = Structure.from_str(s.cif, fmt="cif")
    assert _same(ref, std) and not _same(ref, raw)
    with pytest.raises(ValueError, match="1..230"):
        origin_shift(231)
