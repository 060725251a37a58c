"""P02 online fair selection, issue 31 item 5: an offline MILP past its HiGHS time limit returns the LP bound with a
note (status, incumbent, gap, warning) instead of raising; the runtime benchmark's table carries the note."""
import warnings

import numpy as np
import pytest

from neurips25.fair_selection import GFQ, iid_instances, offline_optimum
from neurips25.fair_selection.benchmark import bench_opt
from neurips25.fair_selection.offline import solve_time


def test_time_limit_returns_lp_bound_with_note():
    inst = iid_instances(3, 400, 20, M=4, p_multi=0.3, rng=2)
    q = GFQ((2, 2, 2, 2))
    with pytest.warns(UserWarning, match="MILP time limit 1e-06 s reached; returned the LP bound"):
        val, y, info = offline_optimum(inst, q, time_limit=1e-6, return_solution=True, return_info=True)
    lp = offline_optimum(inst, q, integral=False)
    exact = offline_optimum(inst, q)
    np.testing.assert_allclose(val, lp, rtol=1e-9)
    assert (val >= exact - 1e-9).all()
    assert list(info["status"]) == ["time_limit_lp_bound"] * 3 and len(info["notes"]) == 3
    assert (y.sum(1) <= inst.k + 1e-9).all()


def test_no_note_when_optimal():
    inst = iid_instances(2, 200, 10, M=3, p_multi=0.3, rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        val, info = offline_optimum(inst, GFQ((1, 1, 1)), return_info=True)
    assert list(info["status"]) == ["optimal"] * 2 and info["notes"] == []
    np.testing.assert_allclose(info["incumbent"], val)
    assert offline_optimum(inst, GFQ((1, 1, 1))).shape == (2,)            # default return unchanged


def test_solve_time_and_bench_opt_report_the_note():
    secs, note = solve_time(300, 15, time_limit=1e-6, return_note=True)
    assert secs > 0 and "returned the LP bound" in note
    o = bench_opt([300], milp_time_limit=1e-6)
    assert o.milp_note[0].startswith("run 0: MILP time limit 1e-06 s reached") and np.isfinite(o.milp_s[0])
    assert bench_opt([300]).milp_note[0] == ""
