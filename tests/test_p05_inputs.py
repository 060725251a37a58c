"""P05 SGEquiDiff: bad-input guards (issue 35 item 3) and device consistency of the likelihood (item 2).

Each bad input raises one ValueError with a message (before spglib, which segfaults on NaN or a negative symprec).
The device test runs on CPU: a TorchFunctionMode records every tensor factory called from likelihood.py and checks
that each names the device (and a dtype where it builds floats from numpy), so the ODE state and the score
normaliser follow the model's device instead of defaulting to the CPU."""
import inspect, warnings
import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

warnings.filterwarnings("ignore")
from pymatgen.core import Structure, Lattice

from neurips25.sgequidiff import (AsymCrystal, from_structure, structure_validity, wdist_density, wdist_nelements,
                                  random_crystal)
from neurips25.sgequidiff.metrics import sg_preservation
from neurips25.sgequidiff.coord_diffusion import make_batch, CoordScoreModel, ScoreNorm
import neurips25.sgequidiff.likelihood as lik

LAT = [4.0] * 3 + [90.0] * 3


def _al():
    return Structure(Lattice.cubic(4.05), ["Al"] * 4, [[0, 0, 0], [.5, .5, 0], [.5, 0, .5], [0, .5, .5]])


# ---------- item 3: bad inputs ----------
def test_from_structure_nan_coordinate():
    s = _al(); s.replace(0, "Al", [np.nan, 0, 0])
    with pytest.raises(ValueError, match="NaN or infinite"): from_structure(s)


@pytest.mark.parametrize("symprec", [-1, 0, np.nan, np.inf])
def test_from_structure_bad_symprec(symprec):
    with pytest.raises(ValueError, match="symprec must be a positive finite number"): from_structure(_al(), symprec=symprec)


def test_from_structure_valid_unchanged():
    c = from_structure(_al())
    assert c.sg == 225 and c.wyckoffs == ("a",) and np.allclose(c.lattice, [4.05] * 3 + [90] * 3)


def test_structure_validity_empty_and_nan():
    with pytest.raises(ValueError, match="empty"): structure_validity(Structure(Lattice.cubic(4.0), [], []))
    s = _al(); s.replace(1, "Al", [np.nan, 0.5, 0])
    with pytest.raises(ValueError, match="NaN or infinite"): structure_validity(s)
    assert structure_validity(_al())


def test_asym_crystal_bravais_ties():
    with pytest.raises(ValueError, match="Bravais ties of group 225"):
        AsymCrystal(225, [5, 6, 7, 90, 90, 90], ("a",), ("Al",), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="Bravais ties of group 225"):
        AsymCrystal(225, [5, 5, 5, 90, 90, 100], ("a",), ("Al",), np.zeros((1, 3)))
    c = AsymCrystal(225, [5, 5, 5, 90, 90, 90], ("a",), ("Al",), np.zeros((1, 3)))
    assert len(c.to_structure()) == 4
    AsymCrystal(1, [5, 6, 7, 80, 95, 100], ("a",), ("Al",), np.full((1, 3), 0.3))     # triclinic: no ties


def test_random_crystals_satisfy_ties():
    for s, sg in enumerate((2, 12, 62, 139, 166, 191, 225)):
        random_crystal(np.random.default_rng(s), sg, max_sites=8)                   # builds AsymCrystal: no error


def test_sg_preservation_bad_group():
    s = _al()
    for bad in ([999], [0], [-3], [225.5]):
        with pytest.raises(ValueError, match="integers 1..230"): sg_preservation([s], bad)
    assert sg_preservation([s], [225]) == 1.0


def test_make_batch_bad_tokens_and_lattice():
    with pytest.raises(ValueError, match="element tokens must be in 0..97"): make_batch([(221, LAT, [0], [200])])
    with pytest.raises(ValueError, match="element tokens must be in 0..97"): make_batch([(221, LAT, [0], [-1])])
    with pytest.raises(ValueError, match="lattice must be 6 finite numbers"): make_batch([(221, [np.nan] + LAT[1:], [0], [8])])
    with pytest.raises(ValueError, match="lattice must be 6 finite numbers"): make_batch([(221, LAT[:5], [0], [8])])
    assert make_batch([(221, LAT, [0], [97])]).n_crystals == 1


def test_wdist_none_entries():
    s = _al()
    for f in (wdist_density, wdist_nelements):
        with pytest.raises(ValueError, match="None entries"): f([s, None], [s])
        with pytest.raises(ValueError, match="None entries"): f([s], [None])
        assert f([s], [s]) == 0.0


# ---------- item 2: device consistency ----------
FACTORIES = {torch.as_tensor, torch.tensor, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange,
             torch.linspace, torch.from_numpy}
LIK_FILE = inspect.getsourcefile(lik)


class _FactoryLog(TorchFunctionMode):
    "Record (function, device kwarg, line) of every tensor factory called directly from likelihood.py."
    def __init__(self): super().__init__(); self.calls = []
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES:
            f = inspect.currentframe().f_back
            if f is not None and f.f_code.co_filename == LIK_FILE:
                self.calls.append((func.__name__, kwargs.get("device"), f.f_lineno))
        return func(*args, **kwargs)


def _setup():
    torch.manual_seed(0)
    net = CoordScoreModel(hidden=16, n_layers=1); sn = ScoreNorm(0.01, 0.5, n_grid=3, n_mc=32)
    crs = [random_crystal(np.random.default_rng(s), sg, max_sites=8) for s, sg in enumerate((12, 139))]
    bt = make_batch([(c.sg, c.lattice, list(c.wyckoff_tokens), [8] * len(c.wyckoffs)) for c in crs])
    return net, sn, bt, np.concatenate([c.coords for c in crs])


def test_likelihood_tensors_follow_model_device():
    net, sn, bt, X0 = _setup()
    ref = lik.coords_log_likelihood(net, sn, bt, X0, 0.01, 0.5, n_steps=2)
    log = _FactoryLog()
    with log: ll = lik.coords_log_likelihood(net, sn, bt, X0, 0.01, 0.5, n_steps=2)
    np.testing.assert_array_equal(ll, ref)                                         # the mode changes nothing
    assert log.calls, "no tensor factory seen in likelihood.py"
    dev = net.lo.device
    bad = [c for c in log.calls if c[1] is None or torch.device(c[1]) != dev]
    assert not bad, f"tensor factories in likelihood.py without the model's device: {bad}"


def test_likelihood_device_argument_reaches_ode_state():
    "pf_log_likelihood puts its state on `device`; the score sees x there (a fake device check on CPU)."
    net, sn, bt, X0 = _setup(); seen = []
    def score(x, s):
        seen.append(x.device); return -x
    lik.pf_log_likelihood(score, bt, X0, 0.01, 0.5, lambda x1: np.zeros(bt.n_crystals), n_steps=1, device="cpu")
    assert seen and all(d == torch.device("cpu") for d in seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_likelihood_on_cuda_matches_cpu():
    net, sn, bt, X0 = _setup()
    ref = lik.coords_log_likelihood(net, sn, bt, X0, 0.01, 0.5, n_steps=2)
    out = lik.coords_log_likelihood(net.to("cuda"), sn, bt, X0, 0.01, 0.5, n_steps=2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("old_handling", ["1", "0"])
def test_spglib_failure_under_both_error_conventions(monkeypatch, old_handling):
    ("spglib 2.x returns None where it finds no symmetry dataset (and warns on every call); spglib >= 3 raises "
     "SpglibError instead (SPGLIB_OLD_ERROR_HANDLING=0 selects that convention today). Under both, spacegroup_of "
     "gives 0, from_structure a SymmetryError, fingerprints fall back to the per-site path, and no spglib "
     "DeprecationWarning escapes.")
    from neurips25.sgequidiff.metrics import spacegroup_of
    from neurips25.sgequidiff.representation import SymmetryError, spglib_dataset
    monkeypatch.setenv("SPGLIB_OLD_ERROR_HANDLING", old_handling)
    bad = Structure(Lattice.cubic(4.0), ["H", "H"], [[0, 0, 0], [0, 0, 1e-4]])       # spglib: atoms too close
    good = Structure(Lattice.cubic(4.0), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cell = (bad.lattice.matrix, bad.frac_coords, bad.atomic_numbers)
        assert spglib_dataset(cell, symprec=0.1) is None
        assert spacegroup_of(bad) == 0
        with pytest.raises(SymmetryError, match="spglib cannot symmetrise"): from_structure(bad, min_dist=0)
        assert spacegroup_of(good) == 221
        assert from_structure(good).sg == 221
    assert not [w for w in caught if "OLD_ERROR_HANDLING" in str(w.message)]
