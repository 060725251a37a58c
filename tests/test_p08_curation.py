"""P08 (embedding similarity for curation): the three criteria, the selector and the proxy on constructed cases."""
import numpy as np
import pandas as pd
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import pdist, squareform
from sklearn.metrics import adjusted_rand_score

from neurips25.curation.criteria import (balanced_assign, balanced_assign_lp, balanced_kmeans, diversity_select,
                                         edge_recall, eps_pairs_blocked, eps_pairs_ivf, epsilon_graph, preprocess,
                                         purity, rac_complete, random_balanced_labels, random_select,
                                         variance_reduction, within_cluster_variance)
from neurips25.testing import assert_close_or_below, gamma

# scipy's pdist and the library's ((Z[i] - Z[j]) ** 2).sum(1) add the same d squares in different orders: each sum of
# d non-negative terms is within gamma_d relative of the exact one, so they differ by at most 2 gamma_d (5e-15 at
# d = 12). PDIST_RTOL sits 200x above that, far below any real excess of a diameter over eps.
PDIST_RTOL = 1e-12


def _own_sqdist_pairs(Z, idx):
    "Squared distances of all pairs i < j of rows idx, by the selector's own formula (epsilon_graph's exact differences)."
    i, j = np.triu_indices(len(idx), 1)
    return ((Z[idx[i]] - Z[idx[j]]) ** 2).sum(1)


@pytest.fixture(scope="module")
def Z():
    rng = np.random.default_rng(42)
    return preprocess(rng.normal(size=(600, 12)))


def test_preprocess_unit_norm_and_dims():
    X = np.random.default_rng(0).normal(size=(200, 100)) * np.linspace(0.01, 100, 100)
    P = preprocess(X)
    assert P.shape == (200, 64)
    np.testing.assert_allclose(np.linalg.norm(P, axis=1), 1.0, atol=1e-12)
    with pytest.raises(ValueError, match="NaN or inf"):
        preprocess(np.where(np.eye(5, 3) > 0, np.nan, 1.0))


def test_purity_separated_sources_is_one_and_random_matches_expectation():
    src = np.repeat(np.arange(4), [100, 60, 30, 10])
    labels = np.concatenate([np.arange(100) // 20, 5 + np.arange(60) // 20, 8 + np.arange(30) // 15, [10] * 10])
    assert purity(labels, src) == 1.0
    # random balanced clusters of size 20: E[max share] by simulation of the multinomial
    p = np.bincount(src) / len(src)
    rand = np.mean([purity(random_balanced_labels(200, 20, s), src) for s in range(20)])
    sim = np.random.default_rng(1).multivariate_hypergeometric(np.bincount(src), 20, size=20000).max(1).mean() / 20
    assert rand >= p.max() and abs(rand - sim) < 0.03


def test_vr_maximum_for_cluster_constant_losses_and_closed_form():
    lab = np.repeat(np.arange(7), 3)
    ell = np.repeat(np.random.default_rng(0).normal(size=7), 3)
    assert variance_reduction(ell, lab) == np.inf
    assert (within_cluster_variance(ell, lab) == 0).all()
    # closed form: k clusters of size m, means mu_c, common deviation pattern delta
    rng = np.random.default_rng(3); k, m = 12, 9
    mu = rng.normal(size=k) * 2; delta = rng.normal(size=m); delta -= delta.mean()
    ell = (mu[:, None] + delta).ravel(); lab = np.repeat(np.arange(k), m)
    s2 = delta.var(ddof=1)
    expected = ((k * (m - 1) * s2 + m * ((mu - mu.mean()) ** 2).sum()) / (k * m - 1)) / s2
    assert variance_reduction(ell, lab) == pytest.approx(expected, rel=1e-10)


def test_vr_random_clusters_about_one():
    # 10 partitions of 4000 points into clusters of 25: SE of the mean VR ~ 0.01, tolerance 0.08
    ell = np.random.default_rng(5).lognormal(size=4000)
    vr = [variance_reduction(ell, random_balanced_labels(4000, 25, s)) for s in range(10)]
    assert abs(np.mean(vr) - 1) < 0.08


def test_vr_bad_inputs():
    with pytest.raises(ValueError, match="needs >= 2"):
        variance_reduction([1.0, 2.0, 3.0], [0, 1, 1])
    with pytest.raises(ValueError, match="0/0"):
        variance_reduction(np.ones(4), [0, 0, 1, 1])


def test_balanced_kmeans_sizes_differ_by_at_most_one(Z):
    for s in (7, 25, 60):
        sizes = np.bincount(balanced_kmeans(Z, s, seed=1, sizes="equal"))
        assert sizes.sum() == len(Z) and sizes.max() - sizes.min() <= 1 and len(sizes) == round(len(Z) / s)
    with pytest.raises(ValueError, match=r"avg_size \(average cluster size\) must be an integer in \[1, "):
        balanced_kmeans(Z, 0)
    with pytest.raises(ValueError, match="integer"):
        balanced_kmeans(Z, 3.0)


def test_balanced_kmeans_paper_bounds_hold_on_random_inputs():
    "Issue 30 item 3: sizes in [s/5, 5s] (s = N/k), free to differ; bounds [s, s] give the equal-size variant."
    for t in range(10):
        rng = np.random.default_rng(1000 + t)
        N, s = int(rng.integers(150, 1200)), int(rng.choice([5, 10, 25, 50]))
        X = preprocess(rng.normal(size=(N, 6)) * rng.uniform(0.2, 4, 6)) * rng.exponential(1, size=(N, 1))
        k = round(N / s)
        n = np.bincount(balanced_kmeans(X, s, seed=t), minlength=k)
        assert n.sum() == N and n.min() >= np.ceil(N / k / 5 - 1e-9) and n.max() <= np.floor(5 * N / k + 1e-9)
        assert n.max() - n.min() > 1
    for N, s in ((500, 25), (300, 10)):
        X = preprocess(np.random.default_rng(N).normal(size=(N, 5)))
        assert (balanced_kmeans(X, s, seed=3, sizes=(s, s)) == balanced_kmeans(X, s, seed=3, sizes="equal")).all()
        assert (balanced_assign(X, X[:N // s], sizes=(s, s)) == balanced_assign(X, X[:N // s], sizes="equal")).all()


def test_balanced_assign_greedy_close_to_optimal_lp():
    rng = np.random.default_rng(9)
    X = preprocess(rng.normal(size=(300, 8)) * rng.exponential(1, size=(300, 1)) + 2 * rng.normal(size=(300, 1)))
    C = X[rng.choice(300, 30, replace=False)]
    g, o = balanced_assign(X, C, sizes="paper"), balanced_assign_lp(X, C, sizes="paper")
    cost = lambda lab: float(((X - C[lab]) ** 2).sum())
    for lab in (g, o):
        n = np.bincount(lab, minlength=30)
        assert n.min() >= 2 and n.max() <= 50
    assert cost(o) <= cost(g) + 1e-9 and cost(g) <= 1.05 * cost(o)   # measured: 1.5% above here
    with pytest.raises(ValueError, match="infeasible"):
        balanced_assign(X, C, sizes=(11, 20))


def test_neighbour_search_blocked_exact_and_ivf_recall():
    "Issue 30 item 4 at a test size: torch blocks equal the exact graph; IVF recall >= 0.95, only true edges."
    rng = np.random.default_rng(3)
    Z = preprocess(np.repeat(rng.normal(size=(60, 24)), 50, axis=0) + 0.7 * rng.normal(size=(3000, 24)))
    eps = float(np.quantile(pdist(Z[:600], "sqeuclidean"), 0.005))
    ex = epsilon_graph(Z, eps)
    bl = eps_pairs_blocked(Z, eps, block_rows=512)
    assert len(ex[0]) > 1000 and edge_recall(bl, ex) == 1.0 and len(bl[0]) == len(ex[0])
    iv = eps_pairs_ivf(Z, eps, n_probe=8)
    assert edge_recall(iv, ex) >= 0.95 and edge_recall(ex, iv) == 1.0      # high recall, no false edge
    with pytest.raises(ValueError, match=r"n_probe must be an integer in \[1, 5\]"):
        eps_pairs_ivf(Z, eps, n_lists=5, n_probe=6)


def test_rac_equals_scipy_complete_linkage_and_diameters_bounded(Z):
    Zs = Z[:250]
    res = rac_complete(Zs, eps_max=1.2)
    D2 = squareform(pdist(Zs, "sqeuclidean"))
    L = linkage(pdist(Zs, "sqeuclidean"), method="complete")
    assert 2 * gamma(Zs.shape[1]) * 100 <= PDIST_RTOL
    prev = len(Zs) + 1
    for eps in (0.1, 0.4, 0.8, 1.2):
        lab = res.labels(eps)
        for c in np.unique(lab):
            m = lab == c
            assert (_own_sqdist_pairs(Zs, np.flatnonzero(m)) <= eps).all()      # exact: RAC's own arithmetic
            assert_close_or_below(D2[np.ix_(m, m)].max(), eps, rtol=PDIST_RTOL, msg=f"pdist diameter at eps={eps}")
        assert adjusted_rand_score(lab, fcluster(L, t=eps, criterion="distance")) == 1.0
        assert res.n_clusters(eps) <= prev; prev = res.n_clusters(eps)


def test_selector_exact_budget_deterministic_and_errors(Z):
    a = diversity_select(Z, 120, seed=7)
    b = diversity_select(Z, 120, seed=7)
    assert len(a.indices) == 120 and np.array_equal(a.indices, b.indices)
    assert len(np.unique(a.labels[a.indices])) == 120                       # one per cluster
    # a.eps is a merge height, i.e. the diameter of some cluster by the selector's own formula: in that arithmetic every
    # pair of a cluster is an edge with d <= eps (exact check); pdist rounds differently (issue 27: 1 ulp above eps)
    D2 = squareform(pdist(Z, "sqeuclidean"))
    own_diam = 0.0
    for c in np.unique(a.labels):
        m = a.labels == c
        own = _own_sqdist_pairs(Z, np.flatnonzero(m))
        assert (own <= a.eps).all()
        own_diam = max(own_diam, own.max(initial=0.0))
        assert_close_or_below(D2[np.ix_(m, m)].max(), a.eps, rtol=PDIST_RTOL, msg=f"pdist diameter of cluster {c}")
    assert own_diam == a.eps                                                # eps is attained: the largest feasible one
    assert len(random_select(600, 120, 3).indices) == 120
    with pytest.raises(ValueError, match="larger than the pool"):
        diversity_select(Z, 601)
    with pytest.raises(ValueError, match="NaN or inf"):
        diversity_select(np.full((5, 2), np.nan), 2)


def test_selector_ties_keep_exact_budget_under_seed():
    # 40 exact duplicates of 10 points (4 copies each) + budget 7: ties at eps=0 leave 10 clusters -> seeded subset of 7
    base = preprocess(np.random.default_rng(0).normal(size=(10, 5)))
    Zd = np.repeat(base, 4, axis=0)
    s1, s2, s3 = diversity_select(Zd, 7, seed=0), diversity_select(Zd, 7, seed=0), diversity_select(Zd, 7, seed=1)
    assert len(s1.indices) == 7 and np.array_equal(s1.indices, s2.indices)
    assert len(set(s1.indices // 4)) == 7                                     # never two copies of the same point
    assert len(s3.indices) == 7


def test_proxy_losses_match_lm_score():
    from neurips25 import lm
    from neurips25.curation.proxy import evaluate_docs, fit_tokenizer, toy_corpus, train_proxy
    texts, src = toy_corpus(12, n_words=40, seed=3)
    tok = fit_tokenizer(texts, vocab_size=300)
    px = train_proxy(texts, tokenizer=tok, n_layer=1, d_model=16, n_head=2, n_ctx=16, steps=5, batch_size=8,
                     device="cpu", cache=False)
    ev = evaluate_docs(px.model, tok, texts)
    sc = lm.score(px.model, tok, texts, truncation="right", add_eos=False)
    np.testing.assert_allclose(ev.loss.to_numpy(), sc.loss.to_numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="shorter than the context"):
        evaluate_docs(px.model, tok, ["a b"])
