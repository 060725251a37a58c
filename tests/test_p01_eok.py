"""Cross-cutting checks of the P01 series (neurips25.eok): the benchmark CLI and the public API surface.
The notebooks in nbs/p01_eok/ are the unit tests; this file checks what only runs from outside a notebook."""
import subprocess, sys
import numpy as np
import pytest


def test_benchmark_cli_tiny():
    "python -m neurips25.eok.benchmark runs, prints samples/s and agrees with the naive dense implementation."
    r = subprocess.run([sys.executable, "-m", "neurips25.eok.benchmark", "--n-quad", "500", "--n-linear", "5000",
                        "--naive-mem-gb", "0.01", "--repeat", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "samples_per_s" in r.stdout and "speed-up" in r.stdout
    diff = float(r.stdout.rsplit("|difference| ", 1)[1].split()[0])
    assert diff < 1e-10


def test_public_api_and_errors():
    from neurips25.eok.estimators import eo_k, dp_mmd, calibration_mmd, eo_k_test
    from neurips25.eok.certificate import eo_k_certificate
    from neurips25.eok.synthetic import sample_gm
    z, s, y = sample_gm(300, delta=1.0, rng=0)
    for est in ("u", "v", "linear", "block", "rff"):
        for variant in ("stratified", "cross"):
            r = eo_k(z, s, y, variant=variant, estimator=est, kernel="laplace")
            assert np.isfinite(r.sq) and r.root >= 0
    assert dp_mmd(z, s).sq > 0
    c = eo_k_certificate(z, s, y, delta=0.1)
    assert c.lower <= c.estimate <= c.upper
    with pytest.raises(ValueError, match="same length"):
        eo_k(z, s[:-1], y)
    with pytest.raises(ValueError, match="binary"):
        eo_k(z, np.arange(300) % 3, y, variant="cross")


def test_population_values_and_unbiased_case():
    "Estimates agree with the closed-form population EO_k; under Y indep. S the cross EO_k tracks the independence MMD."
    from neurips25.eok import eo_k, dp_mmd, Kernel, sample_gm, population_eo_k, population_dp_mmd
    k1 = Kernel("gaussian", 1.0)
    vals = [eo_k(*sample_gm(4000, delta=0.5, rng=r), kernel=k1).sq for r in range(3)]
    assert abs(np.mean(vals) - population_eo_k(0.5)) < 4 * np.std(vals) + 0.005
    z, s, y = sample_gm(4000, delta=0.5, p1=(.45, .45), rng=7)
    assert abs(population_eo_k(0.5, p1=(.45, .45), variant="cross") - population_dp_mmd(0.5, p1=(.45, .45))) < 1e-9
    assert abs(eo_k(z, s, y, "cross", kernel=k1).sq - dp_mmd(z, s, kernel=k1).sq) < 0.01


def test_brute_force_tiny():
    "U-statistic EO_k^2 equals a literal double loop over pairs on a tiny sample (stratified, marginal weights)."
    from neurips25.eok import eo_k, Kernel
    rng = np.random.default_rng(3)
    z = rng.normal(size=(24, 2)); s = np.arange(24) % 2; y = (np.arange(24) // 2) % 2
    k = Kernel("gaussian", 0.8)
    kf = lambda a, b: np.exp(-((a - b) ** 2).sum() / (2 * 0.8 ** 2))
    tot = 0.0
    for yv in (0, 1):
        w = (y == yv).mean()
        A, B = z[(s == 0) & (y == yv)], z[(s == 1) & (y == yv)]
        uu = lambda X: np.mean([kf(X[i], X[j]) for i in range(len(X)) for j in range(len(X)) if i != j])
        tot += w ** 2 * (uu(A) + uu(B) - 2 * np.mean([kf(a, b) for a in A for b in B]))
    assert abs(eo_k(z, s, y, kernel=k).sq - tot) < 1e-12


def test_bad_inputs_fail_fast():
    "Continuous / high-cardinality S is refused at once; tiny cells are refused by linear and block; NaN bandwidth data."
    import time
    from neurips25.eok import eo_k, median_bandwidth
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="distinct values among"):
        eo_k(rng.normal(size=(50000, 2)), rng.normal(size=50000), rng.integers(0, 2, 50000))
    assert time.perf_counter() - t0 < 2.0
    z = rng.normal(size=(2000, 2)); y = rng.integers(0, 2, 2000); s = rng.integers(0, 2, 2000)
    s[(y == 1) & (s == 1)] = 0; s[np.flatnonzero(y == 1)[:3]] = 1                     # a 3-sample cell
    for est in ("linear", "block"):
        with pytest.raises(ValueError, match="at least 4 per"):
            eo_k(z, s, y, estimator=est)
    with pytest.raises(ValueError, match="NaN or infinite"):
        median_bandwidth(np.array([0.0, np.nan, 1.0]))


def test_block_memory_bounded_with_small_cell():
    "A 10-sample cell at n = 32,000 keeps the block estimator's memory O(B^2) and warns that samples are unused."
    import tracemalloc, warnings
    from neurips25.eok import eo_k, Kernel
    rng = np.random.default_rng(1)
    n = 32000; z = rng.normal(size=(n, 2)); y = rng.integers(0, 2, n); s = rng.integers(0, 2, n)
    s[(y == 1) & (s == 1)] = 0; s[np.flatnonzero(y == 1)[:10]] = 1
    tracemalloc.start()
    with pytest.warns(UserWarning, match="uses"):
        r = eo_k(z, s, y, estimator="block", kernel=Kernel("gaussian", 1.0), block_size=64)
    peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
    assert peak < 60e6 and np.isfinite(r.se)


def test_numpy_api_does_not_import_torch():
    code = ("import sys; import neurips25.eok as e; z, s, y = e.sample_gm(300, rng=0); e.eo_k(z, s, y); "
            "e.eo_k_certificate(z, s, y); assert 'torch' not in sys.modules; e.train_fair; assert 'torch' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_benchmark_reports_dense_blas_ratio():
    from neurips25.eok.benchmark import run_benchmark, dense_blas_eo_k, naive_eo_k
    from neurips25.eok.synthetic import sample_gm
    z, s, y = sample_gm(400, delta=0.5, rng=2)
    assert abs(dense_blas_eo_k(z, s, y, "cross") - naive_eo_k(z, s, y, "cross")) < 1e-12
    _, cmp = run_benchmark(n_quad=300, n_linear=3000, naive_mem_gb=0.005, repeat=1)
    assert cmp["speedup_vs_blas"] > 0 and cmp["abs_diff_blas"] < 1e-10


def test_cell_weights_O_GC_at_the_cap():
    "Issue 22: the stratified weights are O(GC): G*C = MAX_CELLS = 1024 cells, tracemalloc peak far below a dense (GC)^2 W."
    import time, tracemalloc
    from neurips25.eok import Kernel
    from neurips25.eok.estimators import eo_k, eo_k_test, cell_gram, encode_cells, weight_matrix, MAX_CELLS
    G, C, n = 2, 512, 4096
    assert G * C == MAX_CELLS
    rng = np.random.default_rng(0)
    y = np.arange(n) % C; s = (np.arange(n) // C) % G; z = rng.normal(size=(n, 2)) + 0.3 * s[:, None]
    k = Kernel("gaussian", 1.0); dense_bytes = (G * C) ** 2 * 8                   # 8 MiB for one dense W
    eo_k(z, s, y, kernel=k)                                                         # warm-up (imports, caches)
    for est in ("u", "v", "linear", "block", "rff"):
        tracemalloc.start(); t0 = time.perf_counter()
        r = eo_k(z, s, y, estimator=est, kernel=k)
        dt = time.perf_counter() - t0; peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
        assert peak < dense_bytes / 8, (est, peak)                                  # the old code peaked at > 2 (GC)^2 * 8
        assert dt < 10, (est, dt)
        assert np.isfinite(r.sq)
    tracemalloc.start(); eo_k_test(z, s, y, kernel=k, n_perm=9)
    peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
    assert peak < dense_bytes / 2, peak
    # the same number as the dense formula <W, Gamma^> (dense W and Gamma built here, outside the memory check)
    gam, cells, _ = cell_gram(z, s, y, "stratified", k)
    W, _ = weight_matrix(cells, "stratified")
    assert abs(eo_k(z, s, y, kernel=k).sq - np.where(W != 0, W * np.nan_to_num(gam), 0.0).sum()) < 1e-12


def test_cell_weights_equal_dense_small():
    "CellWeights.inner / block / dense equal the dense W of the definition (sum over pairs) on small cases, and eo_k = <W, Gamma^>."
    from neurips25.eok import Kernel
    from neurips25.eok.estimators import eo_k, encode_cells, cell_weights, cell_gram
    rng = np.random.default_rng(1); n = 240
    s, y = rng.integers(0, 3, n), rng.integers(0, 4, n); z = rng.normal(size=(n, 2)) + 0.4 * s[:, None]
    _, cells = encode_cells(z, s, y); G, C = 3, 4
    for wts in ("marginal", "uniform", [0.1, 0.0, 0.5, 0.4]):
        cw = cell_weights(cells, "stratified", wts); w = cw.w[0]
        Wref = np.zeros((G * C, G * C))
        for yv in range(C):
            for a in range(G):
                for b in range(a + 1, G):
                    v = np.zeros(G * C); v[a * C + yv], v[b * C + yv] = 1, -1
                    Wref += w[yv] ** 2 * np.outer(v, v) / (G * (G - 1) / 2)
        assert np.abs(cw.dense() - Wref).max() < 1e-15
        M = rng.normal(size=(G * C, G * C)); M = M @ M.T
        assert abs(cw.inner(np.arange(G * C), M) - (Wref * M).sum()) < 1e-12
        for yv in range(C):
            ii = np.arange(G) * C + yv
            assert np.abs(cw.block(ii) - Wref[np.ix_(ii, ii)]).max() < 1e-15
        gam = cell_gram(z, s, y, "stratified", Kernel("gaussian", 1.0))[0]
        ref = np.where(Wref != 0, Wref * np.nan_to_num(gam), 0.0).sum()
        assert abs(eo_k(z, s, y, kernel=Kernel("gaussian", 1.0), weights=wts).sq - ref) < 1e-12
    s2 = s % 2; _, c2 = encode_cells(z, s2, y)
    cw = cell_weights(c2, "cross", "symmetric")
    a = [np.concatenate([wr, -wr]) for wr in cw.w]
    M = rng.normal(size=(2 * C, 2 * C)); M = M @ M.T
    assert np.abs(cw.dense() - (np.outer(a[0], a[0]) + np.outer(a[1], a[1])) / 2).max() < 1e-15
    assert abs(cw.inner(np.arange(2 * C), M) - (a[0] @ M @ a[0] + a[1] @ M @ a[1]) / 2) < 1e-12
    r = eo_k(z, s2, y, "cross", kernel=Kernel("gaussian", 1.0), weights="symmetric")
    assert r.W.shape == (2 * C, 2 * C) and np.abs(r.W - cw.dense()).max() == 0
