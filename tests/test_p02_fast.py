"""P02 online fair selection, issue 31 item 5: the compiled single-stream engine of set_aside (notebook 03a_fast).

Same decisions (<= 1e-12) as the numpy engine and as the plain-Python loop frac_gfq_loop on random instances of every
covered kind, for R = 1 and R = 3; >= 5x the plain loop on one stream; clear errors for what it does not cover."""
import time
import warnings

import numpy as np
import pytest

pytest.importorskip("numba")

import neurips25.fair_selection.fast as fast
from neurips25.fair_selection import FairSelectionError, GFQ, iid_instances
from neurips25.fair_selection.setaside import d_setaside_gfq, frac_gfq, frac_gfq_loop, frac_pf, set_aside
from neurips25.fair_selection.thresholds import GreedyThreshold, OneWayTradingThreshold


def _diff(a, b):
    return max(np.abs(a.x - b.x).max(), np.abs(a.x_reserve - b.x_reserve).max(),
               np.abs(a.credits - b.credits).max(), np.abs(a.reserve_used - b.reserve_used).max())


def _instance(seed, R):
    rng = np.random.default_rng(1000 + seed)
    M, k, T = int(rng.integers(1, 5)), int(rng.integers(3, 40)), int(rng.integers(30, 400))
    inst = iid_instances(R, T, k, M=M, theta=float(rng.uniform(2, 80)), p_multi=float(rng.uniform(0, .9)), rng=seed)
    q = GFQ(tuple(int(v) for v in rng.integers(0, k // M + 1, M)))
    return inst, q, float(rng.uniform(0.1, 0.95))


@pytest.mark.parametrize("R", [1, 3])
@pytest.mark.parametrize("seed", range(10))
def test_compiled_equals_numpy_engine(seed, R):
    inst, q, beta = _instance(seed, R)
    for phi in (OneWayTradingThreshold(inst.L, inst.U), GreedyThreshold()):
        for integral in (False, True):
            for charging in ("multi", "single"):
                for release in (False, True):
                    c = set_aside(inst, q, integral, phi, charging, release, engine="compiled")
                    n = set_aside(inst, q, integral, phi, charging, release, engine="numpy")
                    assert c.extra["engine"] == "compiled" and n.extra["engine"] == "numpy"
                    assert _diff(c, n) <= 1e-12, (phi, integral, charging, release)
        assert _diff(frac_pf(inst, beta, phi, engine="compiled"), frac_pf(inst, beta, phi, engine="numpy")) <= 1e-12


@pytest.mark.parametrize("R", [1, 3])
@pytest.mark.parametrize("seed", range(10))
def test_compiled_equals_plain_loop(seed, R):
    inst, q, _ = _instance(seed, R)
    for release in (False, True):
        x = frac_gfq(inst, q, release=release, engine="compiled").x
        for r in range(R):
            sets = [set(np.flatnonzero(row)) for row in inst.classes[r]]
            lo = frac_gfq_loop(inst.values[r], sets, inst.k, q.q, inst.L, inst.U, release=release)
            assert np.abs(x[r] - np.array(lo)).max() <= 1e-12


def test_auto_is_compiled_and_identical():
    inst, q, _ = _instance(3, 2)
    a, n = frac_gfq(inst, q), frac_gfq(inst, q, engine="numpy")
    assert a.extra["engine"] == "compiled" and _diff(a, n) <= 1e-12
    assert d_setaside_gfq(inst, q).extra["engine"] == "compiled"


def test_single_stream_at_least_5x_the_loop():
    inst = iid_instances(1, 20_000, 50, M=3, theta=50, p_multi=0.3, rng=0)
    q = (5, 5, 5)
    frac_gfq(inst, q, engine="compiled")                     # compile (or load the cached kernel) first
    sets = [set(np.flatnonzero(row)) for row in inst.classes[0]]
    t = time.perf_counter()
    lo = frac_gfq_loop(inst.values[0], sets, 50, q, inst.L, inst.U)
    t_loop = time.perf_counter() - t
    t_c = np.inf
    for _ in range(3):
        t = time.perf_counter()
        x = frac_gfq(inst, q).x
        t_c = min(t_c, time.perf_counter() - t)
    assert np.abs(x[0] - np.array(lo)).max() <= 1e-12
    assert t_loop / t_c >= 5, (t_loop, t_c)


def test_engine_errors():
    inst, q, _ = _instance(0, 1)

    class Other(OneWayTradingThreshold):
        "Not covered by the kernel."

    phi = Other(inst.L, inst.U)
    assert frac_gfq(inst, q, phi).extra["engine"] == "numpy"
    with pytest.raises(FairSelectionError, match="covers OneWayTradingThreshold and GreedyThreshold"):
        frac_gfq(inst, q, phi, engine="compiled")
    with pytest.raises(FairSelectionError, match="engine must be one of"):
        frac_gfq(inst, q, engine="fast")


def test_without_numba(monkeypatch):
    inst, q, _ = _instance(1, 2)
    ref = frac_gfq(inst, q, engine="numpy").x
    monkeypatch.setattr(fast, "numba", None)
    monkeypatch.setattr(fast, "_jit", None)
    monkeypatch.setattr(fast, "_warned", [])
    with pytest.raises(FairSelectionError, match="needs numba, which is not installed"):
        frac_gfq(inst, q, engine="compiled")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a, b = frac_gfq(inst, q), frac_gfq(inst, q)
    assert sum("numba is not installed" in str(x.message) for x in w) == 1
    assert a.extra["engine"] == "numpy" and np.array_equal(a.x, ref) and np.array_equal(b.x, ref)
