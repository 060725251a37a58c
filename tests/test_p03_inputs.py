"""P03 review fixes (issue 32 items 1-2): silent inputs of `extra_epochs`, the memory bound of `gd_path`, clear errors
on malformed or singular moments, and the lower bound judged on population moments."""
import tracemalloc

import numpy as np
import pytest

from neurips25.bias_amplification.theory import (ToyModel, extra_iterations_bound, extra_iterations_exact,
                                                 full_data_theta, gap_closure_time, gd_path, population_moments,
                                                 sample_closed_forms, sample_toy)
from neurips25.bias_amplification.train import extra_epochs

CURVE = [0.5, 0.8, 0.91, 0.93, 0.95, 0.97, 0.99]
MINORITY = [0.1, 0.2, 0.3, 0.5, 0.9, 0.92, 0.99]


def test_accuracies_in_percent_are_refused_or_read_with_percent():
    pc, pm = [100 * v for v in CURVE], [100 * v for v in MINORITY]
    with pytest.raises(ValueError, match="accuracies in percent need percent=True"):
        extra_epochs(pc, pm, 0.9, 0.9)                       # was T_es = T_final = 1, silently
    assert extra_epochs(pc, pm, 0.9, 0.9, percent=True) == extra_epochs(CURVE, MINORITY, 0.9, 0.9)
    with pytest.raises(ValueError, match=r"outside \[0, 100\]"):
        extra_epochs([150.0] * 7, pm, 0.9, 0.9, percent=True)


def test_nan_accuracy_is_an_error():
    bad = MINORITY[:2] + [float("nan")] + MINORITY[3:]
    with pytest.raises(ValueError, match="acc_min is NaN or inf at epoch 3"):
        extra_epochs(CURVE, bad)
    with pytest.raises(ValueError, match="acc is NaN or inf at epoch 1"):
        extra_epochs([float("nan")] + CURVE[1:], MINORITY)


def _args(zeta=0.03):
    mo = population_moments(ToyModel(), zeta)
    return [mo[k] for k in ("Sigma0", "Sigma1", "b0", "b1", "c0", "c1")]


def test_gd_path_memory_is_bounded():
    a, th1 = _args(), ToyModel().theta_group(1)
    with pytest.raises(ValueError, match="more than max_points"):
        gd_path(*a, 0.03, th1, 10 ** 6)                      # would record 10^6 points: refused, naming the `every`
    tracemalloc.start()
    p = gd_path(*a, 0.03, th1, 10 ** 6, every=10)
    peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    assert len(p["t"]) == 100_001 and p["t"][-1] == 10 ** 6
    assert peak < 40, f"peak {peak:.0f} MiB"                 # the old all-at-once path peaked at 592 MB for 10^6 steps
    tracemalloc.start()
    gd_path(*a, 0.03, th1, 10 ** 6, every=10, keep_theta=False)
    assert tracemalloc.get_traced_memory()[1] / 2 ** 20 < 15
    tracemalloc.stop()
    full = gd_path(*a, 0.03, th1, 200)
    thin = gd_path(*a, 0.03, th1, 200, every=9)
    np.testing.assert_allclose(thin["L0"], full["L0"][thin["t"]], rtol=1e-12)


def test_malformed_or_singular_moments_are_clear_errors():
    S0, S1, b0, b1, c0, c1 = _args()
    z = np.zeros(10)
    with pytest.raises(ValueError, match="b0 must be a vector of length d = 10"):
        gd_path(S0, S1, b0[:-1], b1, c0, c1, 0.1, z, 5)
    with pytest.raises(ValueError, match="b1 must be a vector of length d = 10"):
        gd_path(S0, S1, b0, np.r_[b1, 0.0], c0, c1, 0.1, z, 5)
    with pytest.raises(ValueError, match="square matrices of one shape"):
        gd_path(S0, S1[:4, :4], b0, b1, c0, c1, 0.1, z, 5)
    with pytest.raises(ValueError, match="H is singular"):
        gd_path(np.zeros((10, 10)), np.zeros((10, 10)), b0, b1, c0, c1, 0.1, z, 5)
    sing = np.diag(np.r_[np.ones(9), 0.0])
    with pytest.raises(ValueError, match="is singular"):
        full_data_theta(sing, sing, z, z, 0.1)
    X, y, s = sample_toy(ToyModel(), 2000, 0.1, seed=0)
    X[:, 2] = 1.0
    X[:, 3] = X[:, 2]                                        # a duplicated feature makes both groups' Σ̂ singular
    with pytest.raises(ValueError, match="singular"):
        sample_closed_forms(X, y, s)


def test_population_bound_holds_on_population_moments():
    for s1 in (0.03, 0.1, 0.3):
        m = ToyModel(sigma_small=s1)
        for zeta in np.geomspace(0.003, 0.5, 12):
            T, B = extra_iterations_exact(m, zeta), extra_iterations_bound(m, zeta)
            mo = population_moments(m, zeta)
            p = gd_path(mo["Sigma0"], mo["Sigma1"], mo["b0"], mo["b1"], mo["c0"], mo["c1"], zeta, m.theta_group(1),
                        int(2 * T + 50), keep_theta=False)
            T_pop = int(p["t"][gap_closure_time(p["L0"], p["L0_star"])])
            assert T_pop == T and T_pop >= B, (s1, zeta, T_pop, T, B)
