"""P02 online fair selection, issue 31 item 4: every silent input of the rounding and PF set-aside is one clear error."""
import warnings

import numpy as np
import pytest

from neurips25.fair_selection import FairSelectionError, iid_instances
from neurips25.fair_selection.rounding import independent_round, lossless_round, rounding_step
from neurips25.fair_selection.setaside import frac_pf


def _no_warnings(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # a RuntimeWarning is not an answer
        return fn()


@pytest.mark.parametrize("u0", [[np.nan], np.nan, [np.inf], [-np.inf]])
def test_lossless_round_non_finite_u0(u0):
    with pytest.raises(FairSelectionError, match="u0 contains NaN or infinity"):
        _no_warnings(lambda: lossless_round([0.5, 0.5, 0.7], u0=u0))


@pytest.mark.parametrize("u0", [[0.1, 0.2], [0.1, 0.2, 0.3, 0.4], [[0.1, 0.2, 0.3]]])
def test_lossless_round_wrong_length_u0(u0):
    with pytest.raises(FairSelectionError, match=r"u0 must be one offset or one per run \(R = 3\)"):
        lossless_round(np.full((3, 5), 0.4), u0=u0)


def test_lossless_round_good_u0_shapes():
    x = np.full((3, 5), 0.4)
    assert lossless_round(x, u0=0.5).shape == (3, 5)
    assert (lossless_round(x, u0=[0.5]) == lossless_round(x, u0=0.5)).all()      # one offset for all runs
    assert (lossless_round(x, u0=[0.5, 0.5, 0.5]) == lossless_round(x, u0=0.5)).all()


@pytest.mark.parametrize("cap", [2.5, -1, np.nan, "2", True])
def test_capacity_must_be_a_whole_number_of_units(cap):
    with pytest.raises(FairSelectionError, match="capacity must be"):
        lossless_round([0.5, 0.5], capacity=cap)
    with pytest.raises(FairSelectionError, match="capacity must be"):
        independent_round([0.5, 0.5], capacity=cap)


def test_capacity_integral_float_accepted():
    assert lossless_round([0.5, 0.5, 1.0], u0=0.25, capacity=2.0)[0].tolist() == [1, 0, 1]


@pytest.mark.parametrize("kappa", [0, -1, -5])
def test_rounding_step_kappa_positive(kappa):
    with pytest.raises(FairSelectionError, match="kappa .* must be an integer >= 1"):
        rounding_step(kappa, 0.0, 0.5, 0.5, 0.3)


@pytest.mark.parametrize("kappa", [1.5, np.nan, None])
def test_rounding_step_kappa_integer(kappa):
    with pytest.raises(FairSelectionError, match="kappa .* must be an integer"):
        rounding_step(kappa, 0.0, 0.5, 0.5, 0.3)


def test_rounding_step_levels_finite():
    with pytest.raises(FairSelectionError, match="z_p must be a finite level, got nan"):
        rounding_step(1, np.nan, 0.5, 0.5, 0.3)
    for bad in (True, "0.5", [0.5]):                     # not coerced or compared
        with pytest.raises(FairSelectionError, match="z_n must be a finite level"): rounding_step(1, 0.0, bad, 0.5, 0.3)
    assert rounding_step(1, 0.0, 0.5, 0.5, 0.3) == (1, 2) and rounding_step(2, 0.0, 0.5, 0.5, 0.3) == (0, 2)


def test_frac_pf_horizon_shorter_than_instance():
    I = iid_instances(2, 30, 5, M=2, theta=10, rng=0)
    with pytest.raises(FairSelectionError, match=r"horizon 3 is shorter than the instance \(T = 30 arrivals\)"):
        frac_pf(I, 0.5, horizon=3)
    with pytest.raises(FairSelectionError, match="horizon 29 is shorter"):
        frac_pf(I, 0.5, horizon=29)
    a, b = frac_pf(I, 0.5), frac_pf(I, 0.5, horizon=30)
    assert np.array_equal(a.x, b.x)
    assert (frac_pf(I, 0.5, horizon=60).used <= 5 + 1e-9).all()
