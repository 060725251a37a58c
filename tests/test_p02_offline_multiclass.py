"""P02 offline optimum with quotas summing to more than k (issue 31 item 1): multi-class credit, brute force agrees."""
import numpy as np
import pytest

from neurips25.fair_selection.instances import GFQ, PF, FairSelectionError, Instance
from neurips25.fair_selection.offline import brute_force_optimum, offline_optimum
from neurips25.fair_selection.setaside import frac_gfq


def _inst(values, classes, k):
    v = np.atleast_2d(np.asarray(values, float))
    return Instance(v, np.asarray(classes, bool)[None] if np.ndim(classes) == 2 else np.asarray(classes, bool), k, 0.1, 1.0)


def test_one_agent_in_both_classes_meets_two_quotas_with_k_1():
    I = _inst([0.285, 0.9], [[1, 1], [1, 0]], 1)               # k = 1, q = (1, 1): only agent 0 meets both
    np.testing.assert_allclose(offline_optimum(I, GFQ((1, 1))), [0.285])
    np.testing.assert_allclose(brute_force_optimum(I, GFQ((1, 1))), [0.285])
    with pytest.raises(FairSelectionError, match="quotas exceed capacity"):   # the online set-aside still needs sum q <= k
        frac_gfq(I, (1, 1))


def test_infeasible_is_consistent():
    I = _inst([0.5, 0.9], [[1, 0], [0, 1]], 1)                 # single-class agents: q = (1, 1) cannot be met with k = 1
    with pytest.raises(FairSelectionError, match="infeasible"):
        offline_optimum(I, GFQ((1, 1)))
    assert offline_optimum(I, GFQ((1, 1)), on_infeasible="-inf")[0] == -np.inf == brute_force_optimum(I, GFQ((1, 1)))[0]
    with pytest.raises(FairSelectionError, match="on_infeasible"):
        offline_optimum(I, GFQ((1, 1)), on_infeasible="zero")


def test_brute_force_agrees_on_random_instances_with_quotas_above_k():
    rng = np.random.default_rng(31)
    n_above, n_feasible = 0, 0
    for trial in range(40):
        T, M, k = int(rng.integers(4, 9)), int(rng.integers(2, 4)), int(rng.integers(1, 4))
        C = rng.random((2, T, M)) < rng.uniform(0.3, 0.7)
        C[..., 0] |= ~C.any(-1)                                     # every agent in at least one class
        I = Instance(rng.uniform(0.1, 1.0, (2, T)), C, k, 0.1, 1.0)
        q = tuple(int(x) for x in rng.integers(0, k + 1, M))
        n_above += sum(q) > k
        for fair in (GFQ(q), PF(float(rng.uniform(0.5, 1.0)))):
            bf = brute_force_optimum(I, fair)
            ours = offline_optimum(I, fair, on_infeasible="-inf")
            np.testing.assert_allclose(ours, bf, atol=1e-9, err_msg=f"trial {trial} {fair}")
            n_feasible += int(np.isfinite(bf).sum())
    assert n_above >= 15 and n_feasible >= 60, (n_above, n_feasible)
