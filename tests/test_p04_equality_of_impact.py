"""P04 Equality of Impact: checks of the public API from outside the notebooks.

* the EoI gap is monotone; the offline optimum equals a brute-force grid search and the closed form;
* concavity envelopes bound the true function on every grid point; the certified interval contains the root;
* Algorithm 1: bisection-level rate, constant fairness regret (FR at 1e5 within 1e-6 of FR at 1e3), boundary case,
  equality-of-opportunity special case;
* Algorithm 3: sublinear fairness regret under noise, ahead of the trivial baselines;
* clear errors on bad input; the benchmark CLI; runs.yaml's small profile equals the notebooks' defaults.
"""
import os, subprocess, sys
from pathlib import Path

import numpy as np
import pytest

from neurips25.equality_of_impact import (ENV_NAMES, Environment, FunctionResponse, LogResponse, Quadratic, SatExp,
                                          Discovery, EqualSplit, NoisyEoI, NonNoisyEoI, Proportional, brute_force_optimum,
                                          certified_root_interval, check_response, concave_envelopes, fairness_regret,
                                          gap_envelopes, make_env, next_alloc, offline_optimum, run_grid, simulate,
                                          summarise, welfare_optimum)

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "nbs" / "p04_equality_of_impact"


@pytest.mark.parametrize("name", ENV_NAMES)
def test_gap_monotone_and_optimum_matches_brute_force(name):
    env = make_env(name)
    a = np.linspace(0, env.B, 5001)
    assert np.all(np.diff(env.gap(a)) >= -1e-12)
    o = offline_optimum(env)
    a_bf, v_bf = brute_force_optimum(env, n_grid=400_001)
    assert abs(a_bf - o.a_star) <= 10 * env.B / 400_000
    assert abs(env.gap(o.a_star)) <= 1e-9 and v_bf >= 0


def test_closed_form_roots():
    # 1 - exp(-c1 a) = 1 - exp(-c2 (B - a))  =>  a* = c2 B / (c1 + c2)
    for c1, c2, B in [(2.0, 1.5, 1.0), (0.7, 4.0, 3.0), (5.0, 0.3, 2.0)]:
        env = Environment("t", SatExp(c1), SatExp(c2), LogResponse(1.0), LogResponse(1.0), B)
        assert abs(offline_optimum(env).a_star - c2 * B / (c1 + c2)) < 1e-12


def test_boundary_optimum_and_alg1_commits():
    env = Environment("left", FunctionResponse(lambda a: 0.9 + 0.05 * (1 - np.exp(-a))), SatExp(2.0, 0.5),
                      LogResponse(4), LogResponse(4))
    o = offline_optimum(env)
    assert o.a_star == 0.0 and o.where == "left" and abs(o.V_star - (0.9 - 0.5 * (1 - np.exp(-2)))) < 1e-12
    r = simulate(NonNoisyEoI.for_env(env, best_fair=False), env, 10_000)    # first-fair rule: commits at round 1
    assert np.all(r.allocations() == 0.0)
    assert r.curves(env, o, [10_000])["FR"][0] == 0.0
    r = simulate(NonNoisyEoI.for_env(env), env, 10_000)                      # best-fair search (default): one probe, then 0
    c = r.curves(env, o, [100, 10_000])
    assert r.allocations()[-1] == 0.0 and c["FR"][1] == c["FR"][0] and c["FR"][1] < 0.2


def test_envelopes_bound_true_function_on_grid():
    rng = np.random.default_rng(7)
    z = np.linspace(0, 1, 2001)
    for _ in range(100):
        c = rng.uniform(0.2, 6, 2); s = rng.uniform(0.1, 2, 2)
        f = lambda a: s[0] * -np.expm1(-c[0] * a) + s[1] * np.log1p(c[1] * a)
        x = np.unique(rng.uniform(0, 1, rng.integers(2, 10)))
        lo, hi = concave_envelopes(x, f(x), z)
        tol = 1e-12 * (1 + np.abs(f(z)))
        assert np.all(lo <= f(z) + tol) and np.all(f(z) <= hi + tol)
        w = np.full(x.size, 0.02); y = f(x) + rng.uniform(-0.02, 0.02, x.size)
        lo, hi = concave_envelopes(x, y, z, w=w)
        assert np.all(lo <= f(z) + tol) and np.all(f(z) <= hi + tol)


def test_certified_interval_contains_root_and_next_alloc_in_bracket():
    rng = np.random.default_rng(1)
    for _ in range(50):
        c1, c2 = rng.uniform(0.3, 6, 2)
        env = Environment("r", SatExp(c1), SatExp(c2), LogResponse(1), LogResponse(1))
        a_star = c2 / (c1 + c2)
        a = np.unique(np.r_[0.0, 1.0, rng.uniform(0, 1, 4)]); V = env.values(a)
        r_lo, r_hi = certified_root_interval(lambda zz: gap_envelopes(a, V[:, 0], V[:, 1], 1.0, zz), 0.0, 1.0)
        assert r_lo - 1e-12 <= a_star <= r_hi + 1e-12
        d = env.gap(a); lo, hi = a[d < 0].max(), a[d > 0].min()
        q_lo, q_hi, q = next_alloc(a, V[:, 0], V[:, 1], lo, hi, 1.0)
        assert lo <= q_lo <= q <= q_hi <= hi and q_lo - 1e-12 <= a_star <= q_hi + 1e-12


@pytest.mark.parametrize("name", ENV_NAMES)
def test_alg1_constant_fairness_regret(name):
    env = make_env(name); o = offline_optimum(env)
    r = simulate(NonNoisyEoI.for_env(env), env, 100_000)
    c = r.curves(env, o, [1_000, 100_000])
    bound = abs(env.gap(0.0)) + abs(env.gap(env.B)) + env.lipschitz_gap() * env.B
    assert c["FR"][1] - c["FR"][0] < 1e-6 and c["FR"][1] <= bound
    # the per-round definition gives the same number
    assert abs(fairness_regret(env, r.allocations()[:1000], o)[-1] - c["FR"][0]) < 1e-9


def test_alg1_bisection_rate():
    env = make_env("iie"); o = offline_optimum(env)
    at = simulate(NonNoisyEoI.for_env(env, use_envelopes=False), env, 80).allocations()
    t = np.arange(1, 81)
    assert np.all(np.abs(at[2:] - o.a_star) <= env.B * 2.0 ** -(t[2:] - 2) + 1e-15)
    assert abs(env.gap(at[59])) < 1e-10


def test_equality_of_opportunity_special_case():
    env = make_env("eo"); a = simulate(NonNoisyEoI.for_env(env), env, 500).allocations()[-1]
    k = np.arange(0, 1000)
    from scipy.stats import poisson
    disc = lambda lam, x: (np.minimum(k, x) * poisson.pmf(k, lam)).sum() / lam     # at integer x only
    # the learnt allocation equalises discovery probabilities; check the Discovery response at integers too
    assert abs(env.I1(a) - env.I2(60 - a)) < 1e-6
    assert abs(Discovery(30, 60)(17.0) - disc(30, 17)) < 1e-10


def test_alg3_sublinear_and_beats_trivial_baselines():
    env = make_env("water", sigma=0.05); o = offline_optimum(make_env("water"))
    fr = np.array([simulate(NoisyEoI.for_env(env), env, 50_000, s).curves(env, o, [1_000, 50_000])["FR"] for s in range(3)]).mean(0)
    slope = np.log(fr[1] / fr[0]) / np.log(50)
    assert slope < 0.8 and fr[1] / 50_000 < 0.01
    for P in (EqualSplit, Proportional):
        assert simulate(P.for_env(env), env, 50_000).curves(env, o, [50_000])["FR"][0] > 10 * fr[1]


def test_welfare_optimum_and_price_of_fairness():
    env = make_env("ire")
    assert abs(welfare_optimum(env) - 0.75) < 1e-6         # 8/(1+4a) = 4/(1+4(1-a))
    s = summarise(run_grid(["ire"], [0.0], ["alg1", "equal"], 2000, 1))
    eq = s[s.method == "equal"].iloc[0]
    assert eq.mean_welfare_ratio > 1.0 and eq.tail_gap > 0.1   # unfair but more welfare: the price of fairness


def test_errors():
    with pytest.raises(ValueError, match="budget B must be positive"): make_env("ire").__class__("x", SatExp(1), SatExp(1), SatExp(1), SatExp(1), B=0)
    with pytest.raises(ValueError, match="budget B must be positive"): Environment("x", SatExp(1), SatExp(1), SatExp(1), SatExp(1), B=-1.0)
    with pytest.raises(ValueError, match="sigma must be >= 0"): make_env("iie", sigma=-0.01)
    with pytest.raises(ValueError, match="not nondecreasing"): Environment("x", Quadratic(0, 2, 2), SatExp(1), SatExp(1), SatExp(1))
    with pytest.raises(ValueError, match="not concave"): Environment("x", SatExp(1), FunctionResponse(lambda a: a ** 3), SatExp(1), SatExp(1))
    with pytest.raises(ValueError, match="not concave"): check_response(lambda a: np.exp(a), 1.0)
    with pytest.raises(ValueError, match="finite"): fairness_regret(make_env("ire"), [0.1, np.nan])
    with pytest.raises(ValueError, match="integer >= 1"): simulate(EqualSplit(), make_env("ire"), 0)
    with pytest.raises(ValueError, match="unknown environment"): make_env("moon")
    with pytest.raises(ValueError, match="sorted and distinct"): concave_envelopes([0.3, 0.1], [0, 1], [0.2])
    with pytest.raises(ValueError, match="delta must be in"): NoisyEoI(delta=0.0)


def test_benchmark_cli():
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURIPS25_PROGRESS="0")
    r = subprocess.run([sys.executable, "-m", "neurips25.equality_of_impact.benchmark", "--T", "1000", "--runs", "10"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Rounds per second per method" in r.stdout and "per-round loop (naive)" in r.stdout


def test_runs_yaml_small_equals_defaults(notebook_defaults):
    yaml = pytest.importorskip("yaml")
    runs = yaml.safe_load((SERIES / "runs.yaml").read_text())
    assert runs["series"] == "p04_equality_of_impact" and runs["module"] == "equality_of_impact"
    for name, art in runs["artefacts"].items():
        d = notebook_defaults(SERIES / art["notebook"])
        assert art["small"] == d, (name, art["small"], d)
        for prof in ("medium", "full"):
            assert set(art[prof]) <= set(d), (name, prof, set(art[prof]) - set(d))
