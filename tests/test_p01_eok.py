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
