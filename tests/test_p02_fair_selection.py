"""P02 (online multi-class selection with group fairness): the issue's checks on the public API.

Rounding marginals (exact enumeration of U0 and Monte Carlo), capacity on every run of every algorithm, GFQ quotas,
the 1 + ln θ threshold bound on adversarial instances, λ = 1 with perfect advice = OPT, the offline optimum against
brute force, the vectorised engine against the agent-by-agent reference, and the documented errors.
"""
import subprocess, sys

import numpy as np
import pytest
from scipy import stats

import neurips25.fair_selection as fs
from neurips25.fair_selection import (GFQ, PF, FairSelectionError, iid_instances, adversarial_instances, from_class_sets,
                                      threshold_worst_case, cluster_trace_instances, offline_optimum, brute_force_optimum,
                                      threshold_only, frac_gfq, d_setaside_gfq, frac_pf, greedy, quota_first,
                                      random_selection, lossless_round, rounding_step, exact_marginals, independent_round,
                                      r_setaside_gfq, advice_from_optimum, follow_advice, la_setaside, Advice, noisy_advice,
                                      frac_gfq_loop)


@pytest.mark.parametrize("seed", range(6))
def test_rounding_marginals_exact_by_enumeration(seed):
    rng = np.random.default_rng(seed)
    x = rng.random((2, 12)) * (rng.random((2, 12)) < 0.8)
    x[:, rng.integers(0, 12)] = 1.0
    np.testing.assert_allclose(exact_marginals(x), x, atol=1e-9)
    # brute-force enumeration on a fine U0 grid: piecewise-constant pieces, average -> x (to the grid resolution)
    grid = (np.arange(5000) + 0.5) / 5000
    Y = lossless_round(np.repeat(x[:1], len(grid), 0), u0=grid)
    np.testing.assert_allclose(Y.mean(0), x[0], atol=1e-3)


def test_rounding_matches_paper_interface_and_capacity():
    rng = np.random.default_rng(3)
    x = rng.random(60) * 0.5; x *= 10 / x.sum()                # sum x = k = 10 exactly
    for u0 in rng.random(20):
        kappa, S, ys = 1, 0.0, []
        for xt in x:
            y, kappa = rounding_step(kappa, S, S + xt, xt, u0); ys.append(y); S += xt
        y_vec = lossless_round(x, u0=[u0], capacity=10)[0]
        assert list(y_vec) == ys and y_vec.sum() <= 10


def test_rounding_monte_carlo_ci_and_value():
    rng = np.random.default_rng(7); T, k, R = 25, 6, 20000
    x = rng.random(T); x *= k / x.sum(); v = rng.uniform(1, 20, T)
    Y = lossless_round(np.repeat(x[None], R, 0), rng=rng, capacity=k)
    assert (Y.sum(1) <= k).all()
    lo, hi = stats.binom.interval(1 - 0.01 / T, R, x)
    assert ((Y.sum(0) >= lo) & (Y.sum(0) <= hi)).all()
    val = Y @ v
    assert abs(val.mean() - v @ x) < 4 * val.std(ddof=1) / np.sqrt(R)
    Yi = independent_round(np.repeat(x[None], R, 0), rng, k)     # the baseline loses value when capacity binds
    assert (Yi @ v).mean() < v @ x - 4 * (Yi @ v).std(ddof=1) / np.sqrt(R)


def _all_allocations(I, q, rng):
    yield greedy(I); yield random_selection(I, rng); yield threshold_only(I); yield threshold_only(I, integral=True)
    yield quota_first(I, q); yield frac_pf(I, 0.5)
    for integral in (False, True):
        for charging in ("multi", "single"):
            for release in (False, True):
                yield fs.set_aside(I, GFQ(q), integral, charging=charging, release=release)
    yield r_setaside_gfq(I, q, rng=rng, n_draws=20)
    yield r_setaside_gfq(I, q, rng=rng, n_draws=20, rounding="independent")


@pytest.mark.parametrize("seed", range(5))
def test_capacity_never_exceeded_property(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 25)); M = int(rng.integers(1, 5)); T = int(rng.integers(20, 200))
    q = tuple(int(v) for v in rng.multinomial(int(rng.integers(0, k + 1)), np.ones(M) / M))
    gens = [iid_instances(6, T, k, M=M, theta=float(rng.uniform(1.5, 100)), p_multi=float(rng.random()), rng=rng),
            adversarial_instances(6, T, k, kind=["increasing", "minority_last", "bursts"][seed % 3], M=M, rng=rng)]
    for I in gens:
        for a in _all_allocations(I, q, rng):
            assert (a.used <= I.k + 1e-9).all(), a.name
            assert a.x.min() >= -1e-12 and a.x.max() <= 1 + 1e-12, a.name
            if a.reserve_used is not None and not a.name.endswith("PF"):
                assert (a.reserve_used <= sum(q) + 1e-9).all(), a.name


@pytest.mark.parametrize("seed", range(4))
def test_quotas_met_whenever_feasible(seed):
    rng = np.random.default_rng(100 + seed)
    I = iid_instances(10, 150, 12, M=3, theta=30, p_multi=[0, .2, .5, 1][seed], class_shift=(0, -1, -2), rng=rng)
    q = (4, 3, 3); tg = GFQ(q).targets(I)
    for charging in ("multi", "single"):
        d = d_setaside_gfq(I, q, charging=charging)
        assert (d.counts >= tg).all()                         # ex post, every run
        f = frac_gfq(I, q, charging=charging)
        assert (f.counts >= tg - 1e-9).all()                  # fractional counts
    assert (quota_first(I, q).counts >= tg).all()
    _, y = offline_optimum(I, GFQ(q), return_solution=True)   # the optimum is feasible and meets them too
    assert (fs.class_counts(I, y) >= tg).all() and (y.sum(1) <= 12).all()


def test_full_overlap_reserve_is_max_quota():
    I = iid_instances(5, 100, 20, M=3, p_multi=1.0, rng=0)
    assert np.allclose(d_setaside_gfq(I, (5, 2, 3)).reserve_used, 5)
    assert np.allclose(d_setaside_gfq(I, (5, 2, 3), charging="single").reserve_used, 10)


@pytest.mark.parametrize("theta", [5.0, 20.0, 100.0])
def test_threshold_ratio_on_adversarial_instances(theta):
    W = threshold_worst_case(K=10, theta=theta, levels=150)
    ratio = offline_optimum(W) / threshold_only(W).value
    assert ratio.max() <= 1 + np.log(theta) + 1e-6
    assert ratio.max() >= 0.95 * (1 + np.log(theta))
    A = adversarial_instances(10, 300, 15, kind="increasing", M=1, theta=theta, p_multi=0, rng=1)
    assert (offline_optimum(A) / threshold_only(A).value <= 1 + np.log(theta) + 1e-6).all()


def test_static_setaside_ratio_bound():
    I = adversarial_instances(15, 200, 20, kind="increasing", M=2, theta=40, p_multi=0.3, rng=5)
    q = (3, 2); bound = (1 + np.log(40)) * 20 / (20 - 5)
    assert (offline_optimum(I, GFQ(q)) / frac_gfq(I, q, release=False).value <= bound + 1e-9).all()


def test_learning_augmented_perfect_advice_reaches_opt():
    q = (2, 2, 1)
    I = iid_instances(10, 120, 10, M=3, theta=25, p_multi=0.0, class_shift=(0, -0.8, -1.5), rng=9)
    adv = advice_from_optimum(I, q)
    np.testing.assert_allclose(la_setaside(I, q, adv, 1.0).value, offline_optimum(I, GFQ(q)), rtol=1e-9)
    np.testing.assert_array_equal(la_setaside(I, q, adv, 0.0).x, frac_gfq(I, q).x)
    vals = [la_setaside(I, q, adv, lam).value.sum() for lam in np.linspace(0, 1, 5)]
    assert all(b >= a - 1e-9 for a, b in zip(vals, vals[1:]))
    bad = noisy_advice(adv, 0.5, rng=0)
    assert (follow_advice(I, q, bad).used <= 10).all()


def test_offline_optimum_matches_brute_force():
    for s in range(4):
        I = iid_instances(2, 10, 3, M=2, theta=10, p_multi=0.5, rng=s)
        for fair in (None, GFQ((1, 1)), PF(0.5)):
            np.testing.assert_allclose(offline_optimum(I, fair), brute_force_optimum(I, fair), atol=1e-6)


def test_vectorised_engine_matches_reference():
    I = cluster_trace_instances(3, 300, 20, rng=2); q = (2, 2, 2, 2)
    x = frac_gfq(I, q).x
    for r in range(3):
        sets = [set(np.flatnonzero(row)) for row in I.classes[r]]
        np.testing.assert_allclose(frac_gfq_loop(I.values[r], sets, 20, q, I.L, I.U), x[r], atol=1e-9)


def test_documented_errors():
    I = iid_instances(2, 30, 5, M=2, rng=0)
    with pytest.raises(FairSelectionError, match="quotas exceed capacity"): frac_gfq(I, (3, 3))
    with pytest.raises(FairSelectionError, match="values outside"): from_class_sets([0.5], [{0}], 1, 1, 1, 10)
    with pytest.raises(FairSelectionError, match="empty class set"): from_class_sets([2.0, 3.0], [{0}, set()], 1, 1, 1, 10)
    with pytest.raises(FairSelectionError, match="trust lambda must be in"):
        la_setaside(I, (1, 1), Advice(np.ones((2, 2)), np.ones((2, 2))), 1.2)
    with pytest.raises(FairSelectionError, match="NaN"): fs.Instance([np.nan], [[True]], 1, 1, 2)
    with pytest.raises(FairSelectionError, match="k must be an integer"): iid_instances(2, 10, 2.5)
    with pytest.raises(FairSelectionError, match="must lie in"): lossless_round([0.3, 1.4])
    with pytest.raises(FairSelectionError, match="> capacity"): lossless_round([1.0, 1.0, 1.0], capacity=2)
    with pytest.raises(FairSelectionError, match="beta must be in"): PF(0.0)
    with pytest.raises(FairSelectionError, match="charging must be one of"): fs.set_aside(I, GFQ((1, 1)), True, charging="double")


def test_benchmark_cli():
    out = subprocess.run([sys.executable, "-m", "neurips25.fair_selection.benchmark", "--runs", "20", "--T", "50",
                          "--opt-T", "100"], capture_output=True, text=True, timeout=120,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "arrivals_per_s" in out.stdout and "milp_s" in out.stdout


@pytest.mark.parametrize("kind", ["iid", "bursts", "minority_last"])
def test_pf_share_met_with_single_class_agents(kind):
    I = (iid_instances(10, 300, 20, M=3, p_multi=0.0, class_shift=(0, -1, -2), rng=4) if kind == "iid"
         else adversarial_instances(10, 300, 20, kind=kind, M=3, p_multi=0.0, rng=4))
    a = frac_pf(I, 0.5)
    assert (a.used <= 20 + 1e-9).all() and (a.reserve_used <= 10 + 1e-9).all()
    assert fs.satisfaction(I, a.x, PF(0.5)).min() > 1 - 1e-9
    y = fs.r_setaside_pf(I, 0.5, rng=0, n_draws=200)              # after rounding: in expectation
    cnt = y.counts.reshape(200, 10, 3).mean(0)
    assert (cnt >= PF(0.5).targets(I) - 0.5).all()
