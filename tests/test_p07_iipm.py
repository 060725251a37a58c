"P07 (neurips25.iipm): cross-cutting checks — the benchmark CLI, the public error messages, batch consistency."
import numpy as np
import pytest

from neurips25.iipm.benchmark import main as benchmark_main
from neurips25.iipm.capacities import lower_envelope, conjugate
from neurips25.iipm.choquet import mmi
from neurips25.iipm.measures import (mmi_tv, mmi_lin, generalized_hartley, entropy_difference, mutual_information,
                                     upper_entropy)


def test_benchmark_cli_tiny(capsys):
    df = benchmark_main(["--n-points", "60", "--K", "40", "8", "--m", "4", "--block", "25", "--loop-points", "20"])
    assert list(df.K) == [40] * 3 + [8] * 3
    assert (df.vectorised_points_per_s > 0).all() and (df.read_floor_s > 0).all()
    out = capsys.readouterr().out
    assert "speedup_vs_loop" in out and "ceiling" in out            # the explanation of the MMI-Lin ratio is printed


@pytest.mark.parametrize("fn", [mmi_tv, mmi_lin, generalized_hartley, entropy_difference, mutual_information])
def test_bad_inputs_rejected(fn):
    good = np.full((2, 3, 4), 0.25)
    with pytest.raises(ValueError, match="shape"): fn(good[0])
    with pytest.raises(ValueError, match="empty ensemble"): fn(np.zeros((2, 0, 4)))
    with pytest.raises(ValueError, match="sum to 1"): fn(good * 0.9)
    bad = good.copy(); bad[0, 0, :2] = [0.75, -0.25]
    with pytest.raises(ValueError, match="non-negative"): fn(bad)
    nan = good.copy(); nan[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"): fn(nan)


def test_exact_methods_name_the_scalable_alternative():
    p = np.full((1, 2, 20), 0.05)
    with pytest.raises(ValueError, match="mmi_lin"): generalized_hartley(p)
    with pytest.raises(ValueError, match="method='pairwise'"): mmi_tv(p, "brute")
    assert mmi_tv(p) == pytest.approx([0.0]) and mmi_lin(p) == pytest.approx([0.0])


def test_batch_equals_pointwise_and_capacity_level():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(6, 0.4), size=(25, 7))
    for fn in (mmi_tv, mmi_lin, generalized_hartley, mutual_information, upper_entropy):
        np.testing.assert_allclose(fn(p), np.concatenate([fn(p[i:i + 1]) for i in range(len(p))]), atol=1e-9)
    lo = lower_envelope(p)
    np.testing.assert_allclose(mmi_tv(p), [mmi(nu) for nu in lo], atol=1e-12)
    np.testing.assert_allclose(mmi_tv(p), (conjugate(lo) - lo).max(-1), atol=1e-12)


# ---- issue 22: input tolerance, capacity validation, label checks -------------------------------------------------
from neurips25.iipm.capacities import check_probs, prob_atol, precise_capacity
from neurips25.iipm.choquet import choquet, iipm
from neurips25.iipm.selective import selective_scores


def _float32_softmax(shape, seed=0):
    x = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / np.cumsum(e, -1)[..., -1:]                          # float32, sequential sum: error grows with K


def test_float32_softmax_accepted_at_large_k_but_errors_refused():
    p = _float32_softmax((3, 4, 20000))
    assert np.abs(p.astype(np.float64).sum(-1) - 1).max() > 1e-6   # a fixed 1e-6 tolerance would refuse it
    for fn in (mmi_tv, mmi_lin, mutual_information):
        assert np.isfinite(fn(p)).all()
    with pytest.raises(ValueError, match="sum to 1"): mmi_lin(p[..., :-100])   # a missing block of classes
    assert prob_atol(3) == 1e-6 and prob_atol(10**5) == pytest.approx(10**5 * 2.0**-23)


@pytest.mark.parametrize("fn", [mmi_tv, mmi_lin, generalized_hartley, entropy_difference, mutual_information])
def test_rounding_negatives_are_clipped_consistently(fn):
    tiny = np.array([[[0.5 + 5e-7, 0.5, -5e-7], [0.2, 0.3, 0.5]]])
    v = fn(tiny)
    assert np.isfinite(v).all()                                    # used to be NaN for E-Diff and MI
    np.testing.assert_allclose(v, fn(np.maximum(tiny, 0)), atol=1e-6)
    assert tiny[0, 0, 2] < 0                                       # the caller's array is not modified
    with pytest.raises(ValueError, match="non-negative"): fn(np.array([[[0.5 + 1e-3, 0.5, -1e-3]]]))
    assert check_probs(tiny).min() == 0.0


def test_choquet_validates_its_capacity():
    f = np.array([1.0, 4.0, 2.0])
    nu = precise_capacity(np.array([0.2, 0.5, 0.3]))
    assert choquet(f, nu) == pytest.approx(0.2 + 2.0 + 0.6)
    bad = nu.copy(); bad[3] = 0.0                                  # nu({0,1}) = 0 < nu({1}) = 0.5: not monotone
    with pytest.raises(ValueError, match="not monotone"): choquet(f, bad)
    with pytest.raises(ValueError, match=r"nu\(X\) = 1"): choquet(f, nu * 0.5)
    nan = nu.copy(); nan[2] = np.nan
    with pytest.raises(ValueError, match="NaN"): choquet(f, nan)
    with pytest.raises(ValueError, match="not monotone"): iipm(bad, nu)


def test_selective_scores_rejects_out_of_range_labels():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=(30, 3)); y = rng.integers(0, 4, 30)
    ok = selective_scores(p, y, names=("mmi", "mmi_lin"))
    assert 0 <= ok["accuracy"] <= 1
    for bad, msg in ((y + 4, "0..3"), (y - 1, "0..3"), (y + 0.5, "integer class ids")):
        with pytest.raises(ValueError, match=msg): selective_scores(p, bad, names=("mmi",))


def test_mmi_lin_small_k_paths_agree_with_the_loop():
    from neurips25.iipm.benchmark import loop_mmi_lin, random_block
    for K in (2, 10, 63, 64, 255, 256, 700):                       # both sides of the small-K switches
        p = random_block(np.random.default_rng(K), 120, 6, K)
        np.testing.assert_allclose(mmi_lin(p), loop_mmi_lin(p), atol=1e-13)
