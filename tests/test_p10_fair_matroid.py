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
