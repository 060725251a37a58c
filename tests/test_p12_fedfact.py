"""P12 FedFACT: assertions on the public API (neurips25.fedfact), plus the cross-cutting checks the notebooks cannot make.

* data: integer codes, contiguous groups, Dirichlet splits at small alpha (fail fast or `min_policy="reserve"`),
* metrics: hand-computed disparities, fairlearn agreement, predictions that are scores rather than labels,
* the fair LP, post-processing (reaches the LP; safeguard and violation flag independent of the history) and
  in-processing (a client's update does not depend on the order of the clients),
* every exported module works on its own, the benchmark CLI, runs.yaml's small profile equals the notebooks' defaults.
"""
import os, subprocess, sys, warnings
from pathlib import Path

import numpy as np
import pytest

from neurips25.fedfact import (FedDataset, dirichlet_split, synthetic_federated, disparity, evaluate, FairSpec,
                               FairProblem, fair_lp, fedfact_post, fedfact_in)
from neurips25.fedfact.data import federate, int_codes
from neurips25.fedfact.bayes import priors_from, confusion_tensor

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "nbs" / "p12_fedfact"


# ---------------------------------------------------------------- data
def test_integer_codes_are_checked_not_truncated():
    X = np.zeros((4, 2))
    with pytest.raises(ValueError, match="a must hold integer codes, got 0.7"):
        FedDataset(X, [0, 0.7, 0, 1], [0, 0, 1, 1], [0, 0, 1, 1], 2, 2, 2)
    with pytest.raises(ValueError, match="y must hold integer codes"):
        FedDataset(X, [0, 1, 0, 1], [0, 0.5, 1, 1], [0, 0, 1, 1], 2, 2, 2)
    np.testing.assert_array_equal(int_codes(np.array([0.0, 1.0, 2.0]), "a"), [0, 1, 2])


def test_group_codes_must_be_contiguous():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3)); y = rng.integers(0, 2, 600); a = rng.integers(0, 2, 600)
    with pytest.raises(ValueError, match=r"group codes must be 0, 1, \.\.\., G-1.*\[0, 2\]"):
        federate(X, 2 * a, y, n_clients=2, min_per_group=5)
    with pytest.raises(ValueError, match="alpha must be > 0 and finite"):
        federate(X, a, y, n_clients=2, alpha=float("nan"), min_per_group=5)
    tr, te = federate(X, a, y, n_clients=2, min_per_group=5)
    assert len(tr) + len(te) == 600 and tr.counts().min() >= 3


def test_dirichlet_small_alpha_fails_fast_or_reserves():
    rng = np.random.default_rng(0)
    a = (rng.random(20000) < 0.33).astype(int)
    with pytest.raises(ValueError, match="min_policy='reserve'"):
        dirichlet_split(a, 5, 0.01, np.random.default_rng(1), max_tries=50)
    for al in (0.01, 0.05, 0.1):
        k = dirichlet_split(a, 5, al, np.random.default_rng(2), min_policy="reserve")
        assert (k >= 0).all() and np.bincount(a * 5 + k, minlength=10).min() >= 20
    share = lambda k: np.array([a[k == c].mean() for c in range(5)])
    k_small = dirichlet_split(a, 5, 0.05, np.random.default_rng(3), min_policy="reserve")
    k_big = dirichlet_split(a, 5, 100.0, np.random.default_rng(3), min_policy="reserve")
    assert share(k_small).std() > 5 * share(k_big).std()


# ---------------------------------------------------------------- metrics
def test_disparity_hand_case_and_fairlearn():
    from fairlearn.metrics import demographic_parity_difference, equalized_odds_difference
    y = np.array([1, 0, 1, 0, 1, 0]); a = np.array([0, 0, 0, 1, 1, 1]); k = np.zeros(6, int)
    yh = np.array([1, 1, 0, 1, 0, 0])
    d = disparity(y, yh, a, k, 2, 2, 1, "dp")
    assert abs(d["global_pair"] - 1 / 3) < 1e-12 and abs(d["global_sub"] - 1 / 6) < 1e-12
    rng = np.random.default_rng(4)
    y2, a2, yh2 = rng.integers(0, 2, 500), rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    k2 = np.zeros(500, int)
    assert abs(disparity(y2, yh2, a2, k2, 2, 2, 1, "dp")["global_pair"]
               - demographic_parity_difference(y2, yh2, sensitive_features=a2)) < 1e-12
    assert abs(disparity(y2, yh2, a2, k2, 2, 2, 1, "eo")["global_pair"]
               - equalized_odds_difference(y2, yh2, sensitive_features=a2)) < 1e-12


def test_scores_are_not_labels():
    y = np.array([1, 0, 1, 0]); a = np.array([0, 0, 1, 1]); k = np.zeros(4, int)
    with pytest.raises(ValueError, match="1-D predictions must be integer labels"):
        disparity(y, np.array([0.9, 0.2, 0.4, 0.6]), a, k, 2, 2, 1)
    with pytest.raises(ValueError, match="a must hold integer codes"):
        disparity(y, np.array([1, 0, 1, 0]), a * 0.7, k, 2, 2, 1)
    P = np.array([[0.1, 0.9], [0.8, 0.2], [0.6, 0.4], [0.4, 0.6]])         # probability rows are fine
    assert abs(disparity(y, P, a, k, 2, 2, 1)["global_pair"] - abs(0.55 - 0.5)) < 1e-12


# ---------------------------------------------------------------- LP, post- and in-processing
@pytest.fixture(scope="module")
def syn():
    return synthetic_federated(n=3000, seed=0, shift=1.0, mix_range=0.7)


def test_lp_beats_constant_and_meets_levels(syn):
    spec = FairSpec("dp", 0.02, 0.03)
    prob = FairProblem(spec, priors_from(syn.q, syn.k, 4))
    sol = fair_lp(prob, syn.q, syn.k)
    vg, vl = prob.violation(confusion_tensor(syn.q, sol.h, syn.k, 4))
    assert max(vg, vl) <= 1e-7
    const = syn.q.sum(1).mean(0).max()                                    # best constant rule (exactly fair)
    unc = syn.q.sum(1).max(1).mean()                                      # unconstrained Bayes rule
    assert const - 1e-9 <= sol.value <= unc + 1e-9 and sol.value > const + 0.05


def test_post_reaches_lp_and_flags_unconverged(syn):
    spec = FairSpec("dp", 0.02, 0.03)
    prob = FairProblem(spec, priors_from(syn.q, syn.k, 4))
    lp = fair_lp(prob, syn.q, syn.k)
    r = fedfact_post(syn.q, syn.k, 4, spec, record_every=0)
    P = r.predict(syn.q, syn.k, "soft")
    assert abs((P * syn.q.sum(1)).sum(1).mean() - lp.value) < 0.006
    assert not r.flagged and r.violation["excess"] <= 1e-3
    with pytest.warns(UserWarning, match="exceeds its fairness level"):
        short = fedfact_post(syn.q, syn.k, 4, FairSpec("dp", 0.0, 0.0), rounds=1, record_every=0)
    assert short.flagged


def test_post_safeguard_does_not_depend_on_history(syn):
    spec = FairSpec("dp", 0.02, 0.03)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r0 = fedfact_post(syn.q, syn.k, 4, spec, step_scale=400, rounds=60, record_every=0, check_every=5)
        r5 = fedfact_post(syn.q, syn.k, 4, spec, step_scale=400, rounds=60, record_every=5, check_every=5)
    assert r0.halvings == r5.halvings > 0
    np.testing.assert_allclose(r0.lam, r5.lam, atol=1e-12); np.testing.assert_allclose(r0.mu, r5.mu, atol=1e-12)


def test_in_processing_client_order_invariance(syn):
    spec = FairSpec("dp", 0.02, 0.03)
    kw = dict(rounds=2, local_steps=3, seed=2)
    r1 = fedfact_in(syn, spec, **kw)
    r2 = fedfact_in(syn, spec, shuffle_clients=True, **kw)
    for p1, p2 in zip(r1.theta.parameters(), r2.theta.parameters()):
        np.testing.assert_allclose(p1.detach().numpy(), p2.detach().numpy(), atol=1e-4)
    np.testing.assert_allclose(r1.w, r2.w, atol=1e-6); np.testing.assert_allclose(r1.mu, r2.mu, atol=1e-6)


# ---------------------------------------------------------------- cross-cutting
def test_modules_standalone():
    code = (
        "import numpy as np\n"
        "from neurips25.fedfact.data import load_federated\n"
        "from neurips25.fedfact.experiment import run_setting\n"
        "df = run_setting('synthetic', 'linspace', seed=0, methods=['Constant', 'FedAvg', 'FairFed', 'FedFB-style', 'Reweigh',"
        " 'LP oracle', 'LP blind', 'FedFACT^g&l (In)', 'FedFACT^g&l (Post)'], fedavg_rounds=2, in_rounds=2, in_local_steps=2,"
        " post_rounds=5, data=load_federated('synthetic', 'linspace', n_synthetic=1500, seed=0))\n"
        "assert len(df) == 9 and np.isfinite(df.acc).all(), df\n"
        "print('ok')\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURIPS25_PROGRESS="0", PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_benchmark_cli():
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURIPS25_PROGRESS="0")
    r = subprocess.run([sys.executable, "-m", "neurips25.fedfact.benchmark", "--n", "500"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "samples per second" in r.stdout and "exact LP" in r.stdout


def test_runs_yaml_small_equals_defaults(notebook_defaults):
    yaml = pytest.importorskip("yaml")
    runs = yaml.safe_load((SERIES / "runs.yaml").read_text())
    assert runs["series"] == "p12_fedfact"
    for name, art in runs["artefacts"].items():
        d = notebook_defaults(SERIES / art["notebook"])
        assert art["small"] == d, (name, art["small"], d)
        for prof in ("medium", "full"):
            assert set(art[prof]) <= set(d), (name, prof, set(art[prof]) - set(d))
