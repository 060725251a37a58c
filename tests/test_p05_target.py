"""P05 issue 35 item 1: the coordinate diffusion target is G-invariant for the trigonal and hexagonal groups.

The wrapped normal uses the group-averaged metric M = (1/|G|) sum_g A_g^T A_g (the default, metric="invariant");
the port's plain fractional metric (metric="fractional", kept for comparison) is checked to fail. The reference is
an explicit sum over every operation and every lattice image in a box (no minimum-image shortcut).
"""
import itertools

import numpy as np
import pytest
from scipy.special import logsumexp

from neurips25.sgequidiff.symmetry import space_group, apply_ops, invariant_metric, chi_mean
from neurips25.sgequidiff.coord_diffusion import (METRICS, ScoreNorm, make_batch, wrapped_log_density, wrapped_score,
                                                  coord_loss, CoordScoreModel, ve_sigmas)
from neurips25.sgequidiff.model import SGEquiDiffConfig

HEX_LAT = [3.0, 3.0, 5.0, 90.0, 90.0, 120.0]


def brute_logp(G, x0, x, sigma, M, R=4):
    "log sum_g sum_k exp(-|x - (A_g x0 + t_g) - k|_M^2 / 2 sigma^2), k over {-R..R}^3, written out in full."
    ks = np.array(list(itertools.product(range(-R, R + 1), repeat=3)), float)
    out = []
    for xi in np.atleast_2d(x):
        terms = []
        for A, t in zip(G.A, G.t):
            v = xi - (A @ x0 + t) - ks
            terms.append(-np.einsum("ki,ij,kj->k", v, M, v) / (2 * sigma ** 2))
        out.append(logsumexp(np.concatenate(terms)))
    return np.array(out)


def _points(sg, sigma, seed, special=None):
    "(x0, noisy points (4, 3), their images (4, |G|, 3)); x0 on a general or the named special position."
    G = space_group(sg)
    rng = np.random.default_rng(seed)
    wp = G.wyckoffs[-1] if special is None else G.wyckoff(special)
    x0 = wp.point(rng.random(wp.dof))
    xt = np.mod(x0 + sigma * rng.standard_normal((4, 3)), 1.0)
    return G, x0, xt, apply_ops(G, xt)


def test_invariant_metric_all_groups():
    for n in range(1, 231):
        G = space_group(n)
        M = invariant_metric(G)
        assert np.abs(np.einsum("gki,kl,glj->gij", G.A, M, G.A) - M).max() < 1e-12, n
        if not 143 <= n <= 194:
            assert np.array_equal(M, np.eye(3)), n          # unchanged target for every other group
    hexm = np.array([[4 / 3, -2 / 3, 0], [-2 / 3, 4 / 3, 0], [0, 0, 1]])
    for n in (166, 191, 194):
        np.testing.assert_allclose(invariant_metric(n), hexm, atol=1e-12)


@pytest.mark.parametrize("sg", [166, 191, 194])
@pytest.mark.parametrize("sigma", [0.1, 0.3])
@pytest.mark.parametrize("special", [None, "special"])
def test_log_density_invariant_brute_force(sg, sigma, special):
    letter = None if special is None else {166: "h", 191: "o", 194: "k"}[sg]   # 2-D positions (x, -x, z)/(x, 2x, z)
    G, x0, xt, imgs = _points(sg, sigma, seed=sg, special=letter)
    M = invariant_metric(G)
    ref = brute_logp(G, x0, xt, sigma, M)
    for g in range(G.order):
        assert np.abs(brute_logp(G, x0, imgs[:, g], sigma, M) - ref).max() <= 1e-6, (sg, g)
    # the implementation (K = 3, the paper's images) is the brute-force sum
    np.testing.assert_allclose(wrapped_log_density(sg, x0, xt, sigma, K=3), ref, atol=1e-9)
    imp = np.stack([wrapped_log_density(sg, x0, imgs[:, g], sigma, K=3) for g in range(G.order)], 1)
    assert np.abs(imp - ref[:, None]).max() <= 1e-6
    # medium's K = 1 (images around the minimum-image difference) is invariant to the truncation error only
    imp1 = np.stack([wrapped_log_density(sg, x0, imgs[:, g], sigma, K=1) for g in range(G.order)], 1)
    assert np.abs(imp1 - wrapped_log_density(sg, x0, xt, sigma, K=1)[:, None]).max() <= 1e-5


@pytest.mark.parametrize("sg", [166, 191, 194])
def test_old_fractional_target_is_not_invariant(sg):
    "The port's target (plain fractional metric): log p changes under a group operation (fails on the old code path)."
    G, x0, xt, imgs = _points(sg, 0.1, seed=sg)
    ref = brute_logp(G, x0, xt, 0.1, np.eye(3))
    worst = max(np.abs(brute_logp(G, x0, imgs[:, g], 0.1, np.eye(3)) - ref).max() for g in range(G.order))
    imp = max(np.abs(wrapped_log_density(sg, x0, imgs[:, g], 0.1, K=3, metric="fractional")
                     - wrapped_log_density(sg, x0, xt, 0.1, K=3, metric="fractional")).max() for g in range(G.order))
    assert worst > 1e-3 and imp > 1e-3, (worst, imp)


@pytest.mark.parametrize("sg", [166, 191, 194])
def test_training_target_is_equivariant(sg):
    "wrapped_score (the training target) transforms like the symmetrised network: t(g x) = A_g t(x); not so for the port."
    G, x0, xt, imgs = _points(sg, 0.2, seed=3)
    x0s = np.repeat(x0[None], 4, 0)
    sig = np.full(4, 0.2)
    design = [(sg, HEX_LAT, [len(G.wyckoffs) - 1] * 4, [8] * 4)]
    errs = {}
    for metric in METRICS:
        bt = make_batch(design, metric=metric)
        t = wrapped_score(bt, x0s, xt, sig, K=3)
        tg = np.stack([wrapped_score(bt, x0s, imgs[:, g], sig, K=3) for g in range(G.order)], 1)
        errs[metric] = np.abs(tg - np.einsum("gij,nj->ngi", G.A, t)).max() / np.abs(t).max()
    assert errs["invariant"] < 1e-10 and errs["fractional"] > 1e-2, errs


def test_special_position_target_tangent_and_equivariant():
    "194 k (x, 2x, z): the target lies in the position's direction space and is equivariant under its stabiliser."
    G = space_group(194)
    wp = G.wyckoff("k")
    rng = np.random.default_rng(5)
    x0 = wp.point(rng.random(2))
    bt = make_batch([(194, HEX_LAT, [wp.index] * 4, [8] * 4)])
    xt = np.mod(x0 + 0.15 * rng.standard_normal((4, 3)) @ bt.C[0].T, 1.0)   # metric noise stays on the plane
    x0s = np.repeat(x0[None], 4, 0)
    t = wrapped_score(bt, x0s, xt, np.full(4, 0.15), K=3)
    assert np.abs(t @ (np.eye(3) - wp.P).T).max() < 1e-10 * np.abs(t).max()
    for g in wp.stabiliser:
        gx = np.mod(np.einsum("ij,nj->ni", G.A[g], xt) + G.t[g], 1.0)
        tg = wrapped_score(bt, x0s, gx, np.full(4, 0.15), K=3)
        np.testing.assert_allclose(tg, t @ G.A[g].T, atol=1e-10 * np.abs(t).max())


def test_score_norm_small_sigma_limit_invariant_metric():
    "sigma * s_bar -> E chi_d with M-norms for 1-, 2- and 3-D positions of 194 (brief check 3)."
    sn = ScoreNorm(0.002, 0.5, n_grid=3, n_mc=4000, K=0)
    G = space_group(194)
    for L in ("h", "k", "l"):
        wp = G.wyckoff(L)
        est = sn(np.array([194]), np.array([wp.index]), np.array([0.002]))[0] * 0.002
        assert abs(est / chi_mean(wp.dof) - 1) < 0.03, (L, est)


def test_defaults_and_bad_metric():
    assert SGEquiDiffConfig().coord_metric == "invariant"
    assert make_batch([(194, HEX_LAT, [0], [8])]).metric == "invariant"
    assert ScoreNorm(0.01, 0.5).metric == "invariant"
    with pytest.raises(ValueError, match="metric must be one of"):
        make_batch([(194, HEX_LAT, [0], [8])], metric="cartesian")
    with pytest.raises(ValueError, match="metric must be one of"):
        ScoreNorm(0.01, 0.5, metric="cartesian")
    G = space_group(194)
    bt = make_batch([(194, HEX_LAT, [len(G.wyckoffs) - 1], [8])], metric="fractional")
    with pytest.raises(ValueError, match="the batch uses metric 'fractional' but the ScoreNorm 'invariant'"):
        coord_loss(CoordScoreModel(hidden=8, n_layers=1), bt, np.full((1, 3), 0.3), ve_sigmas(5, 0.01, 0.5),
                   ScoreNorm(0.01, 0.5, n_grid=3, n_mc=8), np.random.default_rng(0))
