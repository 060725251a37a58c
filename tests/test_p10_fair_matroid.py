"""P10 (fair matroid selection): the brief's checks 1–6 across every matroid type, error handling, and the benchmark CLI.

The notebooks in nbs/p10_fair_matroid/ are the main unit tests; this file re-runs the cross-cutting checks with fresh
seeds on every matroid type in one place.
"""
import subprocess, sys

import numpy as np
import pytest

from neurips25.fair_matroid.matroids import (GraphicMatroid, UniformMatroid, MatchingMatchoid, LaminarMatroid,
                                             UnknownElementError, ParameterTooSmallError, LaminarFamilyError)
from neurips25.fair_matroid.arboricity import (arboricity, matroid_partition, random_tiny_matroid, MATROID_KINDS,
                                               offline_optimum_lp, min_partition_bruteforce)
from neurips25.fair_matroid.instances import (order_max_colour, tree_union, random_laminar, random_bipartite,
                                              order_random)
from neurips25.fair_matroid.online import estimate_fairness, clopper_pearson
from neurips25.fair_matroid.greedy import (GreedyColouring, MatchoidGreedyColouring, UniformRoundRobin, OfflineBaseline,
                                           check_alg1_invariants)
from neurips25.fair_matroid.laminar import LaminarColouring, check_laminar_invariants, as_laminar
from neurips25.fair_matroid.oblivious import (ObliviousWrapper, alg1_factory, wrapper_exact_probs, wrapper_guarantee,
                                              laminar_factory, h_paper)
from neurips25.fair_matroid.random_order import alg3_for_alpha, alg3_bound


@pytest.mark.parametrize("kind", MATROID_KINDS)
def test_check1_alg1_every_type(kind):
    rng = np.random.default_rng(101)
    M = random_tiny_matroid(kind, rng, n=11); a, k = arboricity(M), M.rank()
    alg = GreedyColouring(M, alpha=a, k=k)
    for order in (rng.permutation(M.n), order_max_colour(M)):
        events = []
        cols = alg.colouring(order, events)
        assert events == [] and check_alg1_invariants(M, cols, a)["colours_used"] <= alg.m
    assert estimate_fairness(alg, rng.permutation(M.n), 2000, np.random.default_rng(5)).consistent_with(1 / alg.m)


def test_check1_alg4_matchings():
    rng = np.random.default_rng(7)
    Mb = MatchingMatchoid(random_bipartite(8, 8, 0.35, rng))
    alg = MatchoidGreedyColouring(Mb, beta=Mb.max_degree(), k=Mb.rank())
    cols = alg.colouring(order_max_colour(Mb))
    assert cols.min() >= 1 and cols.max() <= alg.m
    assert all(Mb.is_independent(np.flatnonzero(cols == c)) for c in range(1, cols.max() + 1))


@pytest.mark.parametrize("seed", range(4))
def test_check2_alg2_invariants(seed):
    rng = np.random.default_rng(seed)
    for L in (random_laminar(30, 1 + seed, rng), as_laminar(UniformMatroid(12, 3))):
        col = LaminarColouring(L, L.alpha_lower()).colourer(lambda *x: pytest.fail(f"unexpected event {x}"))
        for e in rng.permutation(L.n).tolist():
            col.colour(e); check_laminar_invariants(col)
        assert max(col.col.values()) <= 2 * L.alpha_lower() - 1


def test_check3_uniform_round_robin():
    rng = np.random.default_rng(3)
    U = UniformMatroid(14, 4); a = 4; alg = UniformRoundRobin(U, a); o = order_random(14, rng)
    assert all(len(alg.run(o, np.random.default_rng(s)).accepted) <= 4 for s in range(30))
    assert estimate_fairness(alg, o, 3000, np.random.default_rng(1)).consistent_with(1 / a)


def test_check4_alg3_forest_and_bound():
    G = GraphicMatroid(tree_union(30, 2, np.random.default_rng(4)))
    est = estimate_fairness(alg3_for_alpha(G, 2), "random", 2000, np.random.default_rng(6))
    lo, _ = clopper_pearson(est.counts, est.R, 1 - 0.01 / G.n, side="lower")
    assert est.invalid_runs == 0 and lo.min() >= alg3_bound(3)["p_min"]


@pytest.mark.parametrize("kind", MATROID_KINDS)
def test_check5_wrapper_every_type(kind):
    rng = np.random.default_rng(55)
    M = random_tiny_matroid(kind, rng, n=9); o = order_max_colour(M)
    a, k = arboricity(M), M.rank()
    used = int(GreedyColouring(M, alpha=a, k=k).colouring(o).max())
    p = wrapper_exact_probs(alg1_factory(M), o, L0=used)
    np.testing.assert_allclose(p.min(), 1 / h_paper(used) - 1 / h_paper(2 ** 20 + 1), rtol=1e-12)
    f = GreedyColouring(M, alpha=a, k=k).m
    assert p.min() >= wrapper_guarantee(f)
    assert estimate_fairness(ObliviousWrapper(M, alg1_factory(M)), o, 3000, np.random.default_rng(2)).consistent_with(p)


@pytest.mark.parametrize("kind", MATROID_KINDS)
def test_check6_offline(kind):
    rng = np.random.default_rng(66)
    M = random_tiny_matroid(kind, rng, n=9); off = OfflineBaseline(M)
    assert off.alpha == min_partition_bruteforce(M)
    assert off.alpha - 1 < offline_optimum_lp(M) <= off.alpha + 1e-9
    assert estimate_fairness(off, rng.permutation(M.n), 2000, np.random.default_rng(3)).consistent_with(1 / off.alpha)


def test_errors():
    G = GraphicMatroid([[0, 1], [1, 2], [0, 2]])
    run = GreedyColouring(G, alpha=2, k=2).start(np.random.default_rng(0))
    run.offer(0)
    with pytest.raises(UnknownElementError, match="arrived twice"): run.offer(0)
    with pytest.raises(UnknownElementError, match="not in the ground set"): run.offer(3)
    with pytest.raises(LaminarFamilyError, match="not a laminar family"): LaminarMatroid(4, [[0, 1], [1, 2]], [1, 1])
    with pytest.raises(ParameterTooSmallError, match="below its true value"):
        GreedyColouring(G, alpha=1, k=1, on_problem="raise").run([0, 1, 2], np.random.default_rng(0))


def test_benchmark_cli():
    r = subprocess.run([sys.executable, "-m", "neurips25.fair_matroid.benchmark", "--elements", "1500",
                        "--naive-elements", "300", "--partition-elements", "500", "--gf2-rank", "16"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Algorithm 1 (union-find)" in r.stdout and "elements_per_s" in r.stdout


# ---- issue 22: matchoid rank, integer parameters, loops, empty inputs, output size -------------------------------
from neurips25.fair_matroid.matroids import (Matchoid, PartitionMatroid, OracleMatroid, LoopError, FairMatroidError,
                                             check_int)
from neurips25.fair_matroid.instances import (series_parallel_adversary, order_bfs, order_dfs, order_degree,
                                              order_core_first, check_order)
from neurips25.fair_matroid.online import colouring_summary, FairnessEstimate
from neurips25.fair_matroid.random_order import DegeneracyAlgorithm, RandomOrderFromSampling


def test_generic_matchoid_rank():
    # a path of 3 edges as a generic 2-matchoid (rank-1 uniform matroid on each vertex star): max matching 2
    M = Matchoid(3, [([0], UniformMatroid(1, 1)), ([0, 1], UniformMatroid(2, 1)), ([1, 2], UniformMatroid(2, 1)),
                     ([2], UniformMatroid(1, 1))])
    assert M.rank() == 2 and M.rank([0, 1]) == 1 and M.rank([]) == 0   # used to raise NameError: itertools


@pytest.mark.parametrize("make", [lambda: UniformMatroid(10, 2.5), lambda: UniformMatroid(10.9, 2),
                                  lambda: UniformMatroid(10, True), lambda: OracleMatroid(3.0, lambda S: True),
                                  lambda: GraphicMatroid([[0, 1]], n_vertices=2.5)])
def test_non_integer_parameters_refused(make):
    with pytest.raises(FairMatroidError, match="must be an integer"): make()


@pytest.mark.parametrize("cap", [2.0, 2.5, float("nan"), 0, True])
def test_laminar_and_partition_caps_agree(cap):
    with pytest.raises(LaminarFamilyError, match="integer >= 1"): LaminarMatroid(3, [[0, 1, 2]], [cap])
    if cap != 0:
        with pytest.raises(FairMatroidError, match="caps must be ints"): PartitionMatroid([0, 0, 0], [cap])


def test_self_loop_raises_loop_error_in_alg1_and_alg3():
    G = GraphicMatroid([[0, 1], [1, 1], [1, 2]])
    with pytest.raises(LoopError, match="is a loop"):
        GreedyColouring(G, alpha=3, k=2).run([0, 1, 2], np.random.default_rng(0))
    with pytest.raises(LoopError, match="is a loop"):
        estimate_fairness(GreedyColouring(G, alpha=3, k=2), [1, 0, 2], 10, np.random.default_rng(0))
    with pytest.raises(LoopError, match="self-loop"): RandomOrderFromSampling(DegeneracyAlgorithm(G, 3))
    with pytest.raises(LoopError, match="self-loop"): alg3_for_alpha(G, 2)
    # a genuine shortage of colours is still reported as a too-small parameter, not a loop
    K4 = GraphicMatroid([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]])
    with pytest.raises(ParameterTooSmallError):
        GreedyColouring(K4, m=1, on_problem="raise").run(np.arange(6), np.random.default_rng(0))


def test_empty_inputs_give_clear_answers():
    E = GraphicMatroid(np.zeros((0, 2)))
    for f in (order_bfs, order_dfs, order_degree, order_core_first):
        assert f(np.zeros((0, 2), dtype=int)).tolist() == []
    assert check_order([], 0).tolist() == []
    assert GreedyColouring(E, alpha=1, k=1).run([], np.random.default_rng(0)).accepted == []
    with pytest.raises(FairMatroidError, match="no elements"):
        estimate_fairness(GreedyColouring(E, alpha=1, k=1), "random", 10, np.random.default_rng(0))
    with pytest.raises(FairMatroidError, match="no elements"): FairnessEstimate(np.zeros(0, dtype=int), 10, 0.99)


def test_series_parallel_arboricity_formula():
    import math
    for t in (1, 2, 3):
        for j in (1, 2, 3, 4):
            a = arboricity(GraphicMatroid(series_parallel_adversary(j, t)))
            assert a == math.ceil((2 - 2.0 ** (1 - j)) * t) and a <= 2 * t
    assert arboricity(GraphicMatroid(series_parallel_adversary(2, 2))) == 3     # not 2t = 4


def test_output_size_next_to_fairness():
    # exact summary vs Monte Carlo through the full online runner; P(accept nothing) can be large for Algorithm 1
    rng = np.random.default_rng(11)
    G = GraphicMatroid(tree_union(30, 2, rng)); o = order_random(G.n, rng)
    alg = GreedyColouring(G, alpha=2, k=G.rank())
    S = colouring_summary(alg, o)
    assert S["min_p"] == pytest.approx(1 / alg.m) and S["p_empty"] == pytest.approx((alg.m - S["colours_used"]) / alg.m)
    assert S["expected_size"] == pytest.approx(G.n / alg.m)
    est = estimate_fairness(alg, o, 3000, np.random.default_rng(2), fast=False)
    se = np.sqrt(S["p_empty"] * (1 - S["p_empty"]) / 3000)
    assert abs(est.p_empty - S["p_empty"]) < 5 * se and S["p_empty"] > 0.5
    fast = estimate_fairness(alg, o, 3000, np.random.default_rng(2))
    assert fast.empty_runs == est.empty_runs and fast.expected_size == pytest.approx(est.expected_size)


def test_brief_h_partial_sums_cross_one_near_1_7e7():
    from neurips25.fair_matroid.oblivious import h_brief
    def partial(L, chunk=2 ** 21):
        return sum((1 / h_brief(np.arange(a, min(a + chunk, L + 1), dtype=float))).sum() for a in range(1, L + 1, chunk))
    assert partial(16_900_000) < 1 < partial(16_950_000)
