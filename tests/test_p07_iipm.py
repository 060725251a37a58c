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
    assert list(df.K) == [40, 40, 8, 8]
    assert (df.vectorised_points_per_s > 0).all()
    assert "speedup_vs_loop" in capsys.readouterr().out


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
