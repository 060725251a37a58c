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
