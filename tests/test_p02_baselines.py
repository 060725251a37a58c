"""P02 online fair selection, issue 31 item 3 (second half): literature baselines (notebook 03b_baselines).

[CCDNF21a]'s multi-colour secretary and prophet rules adapted to k units with per-class budgets: the classical 1/e
success rate (exact over all orders, and within Monte-Carlo error), the prophet rule's stopping rate 1 - (1 - α/n)^n,
decisions equal to a plain-Python reference, capacity and budgets never exceeded, GFQ not guaranteed, clear errors on
bad input, and the registry: CCDNF-secretary is in ALGORITHMS and the other algorithms' rows are unchanged."""
import itertools
import math

import numpy as np
import pandas as pd
import pytest

from neurips25.fair_selection import (ALGORITHMS, GFQ, FairSelectionError, Instance, adversarial_instances,
                                      ccdnf_prophet, ccdnf_secretary, evaluate, from_class_sets, iid_instances)
from neurips25.fair_selection.baselines import SHARES, apportion, class_budgets


def _p_classical(r, n):
    return 1 / n if r == 0 else r / n * sum(1 / (i - 1) for i in range(r + 1, n + 1))


def _wins(inst, a):
    return (a.x * (inst.values == inst.values.max(1, keepdims=True))).sum(1)


def test_one_over_e_exact_over_all_orders():
    n = 7
    perms = np.array(list(itertools.permutations(range(1, n + 1))), dtype=float)
    inst = Instance(perms, np.ones(perms.shape + (1,), bool), 1, 1.0, float(n))
    a = ccdnf_secretary(inst, (0,))
    assert a.extra["cutoff"] == math.floor(n / math.e)
    assert abs(_wins(inst, a).mean() - _p_classical(math.floor(n / math.e), n)) < 1e-12


def test_one_over_e_monte_carlo():
    inst = iid_instances(20000, 60, 1, M=1, theta=50, dist="lognormal", rng=7)
    w = _wins(inst, ccdnf_secretary(inst, (1,)))
    p = _p_classical(math.floor(60 / math.e), 60)
    assert abs(w.mean() - p) < 4 * w.std() / np.sqrt(len(w))
    assert abs(w.mean() - 1 / math.e) < 0.02


def test_prophet_stopping_rate():
    sample = iid_instances(4000, 25, 1, M=1, theta=20, dist="loguniform", rng=20)
    inst = iid_instances(20000, 25, 1, M=1, theta=20, dist="loguniform", rng=21)
    a = ccdnf_prophet(inst, (0,), sample)
    p = 1 - (1 - 0.5 / 25) ** 25
    assert abs(a.used.mean() - p) < 4 * np.sqrt(p * (1 - p) / inst.R) + 0.005


def _reference(values, sets, k, q, tau, M):
    T = len(values)
    r0 = math.floor(tau * T)
    free = k - sum(q)
    qs = list(q) if sum(q) > 0 else [1] * M
    share = [free * w / sum(qs) for w in qs]
    b = [math.floor(s + 1e-12) for s in share]
    for c in sorted(range(M), key=lambda c: -(share[c] - b[c]))[:free - sum(b)]:
        b[c] += 1
    b = [qc + bc for qc, bc in zip(q, b)]
    lam = []
    for c in range(M):
        s = sorted((values[t] for t in range(r0) if c in sets[t]), reverse=True)
        lam.append(math.inf if b[c] == 0 else (s[b[c] - 1] if len(s) >= b[c] else -math.inf))
    used = [0] * M
    out = [0.0] * T
    for t in range(r0, T):
        el = [c for c in sets[t] if values[t] > lam[c] and used[c] < b[c]]
        if el:
            c = max(el, key=lambda c: (b[c] - used[c], -c))
            used[c] += 1
            out[t] = 1.0
    return out


@pytest.mark.parametrize("seed", range(25))
def test_secretary_matches_reference(seed):
    rng = np.random.default_rng(100 + seed)
    M, T, k = int(rng.integers(1, 4)), int(rng.integers(4, 50)), int(rng.integers(1, 9))
    q = tuple(int(v) for v in rng.multinomial(int(rng.integers(0, k + 1)), [1 / M] * M))
    tau = float(rng.choice([0.0, 0.25, 1 / math.e, 0.7]))
    inst = iid_instances(2, T, k, M=M, theta=10, p_multi=0.5, rng=seed)
    a = ccdnf_secretary(inst, q, tau=tau)
    for r in range(2):
        sets = [list(np.flatnonzero(inst.classes[r, t])) for t in range(T)]
        assert a.x[r].tolist() == _reference(inst.values[r].tolist(), sets, k, q, tau, M)


@pytest.mark.parametrize("kind", ["increasing", "minority_last"])
def test_capacity_and_budgets(kind):
    inst = adversarial_instances(50, 100, 10, kind=kind, M=3, theta=20, p_multi=0.3, rng=3)
    sample = adversarial_instances(20, 100, 10, kind=kind, M=3, theta=20, p_multi=0.3, rng=4)
    for sh in SHARES:
        for a in (ccdnf_secretary(inst, (3, 2, 1), shares=sh), ccdnf_prophet(inst, (3, 2, 1), sample, shares=sh)):
            b = a.extra["budgets"]
            assert a.integral and set(np.unique(a.x)) <= {0.0, 1.0}
            assert (a.used <= 10).all() and (a.credits <= b).all() and (a.credits.sum(1) == a.used).all()
            assert (b.sum(1) == 10).all() and (b >= [3, 2, 1]).all()


def test_apportion_and_budgets():
    assert apportion([5, 5], [[1, 1, 0], [0, 0, 0]]).tolist() == [[3, 2, 0], [2, 2, 1]]
    inst = from_class_sets([1.0] * 3, [[0], [1], [0, 1]], M=2, k=4, L=1, U=1)
    assert class_budgets(inst, (1, 0), [[1.0, 3.0]]).tolist() == [[2.0, 2.0]]


def test_gfq_not_guaranteed():
    inst = from_class_sets([5, 1, 2, 3, 4, 6], [[1], [0], [0], [0], [0], [0]], M=2, k=2, L=1, U=10)
    assert ccdnf_secretary(inst, (1, 1), tau=0.4).counts[0, 1] == 0.0


def test_bad_input():
    inst = iid_instances(3, 30, 6, M=2, theta=10, rng=0)
    sample = iid_instances(3, 30, 6, M=2, theta=10, rng=1)
    bad = [
        (lambda: ccdnf_secretary(inst, (1, 1), tau=1.0), "tau"),
        (lambda: ccdnf_secretary(inst, (1, 1), tau=-0.1), "tau"),
        (lambda: ccdnf_secretary(inst, (1, 1), shares="equal"), "shares"),
        (lambda: ccdnf_secretary(inst, (1, 1), horizon=10), "horizon"),
        (lambda: ccdnf_secretary(inst, (1,)), "quotas"),
        (lambda: ccdnf_secretary(inst, (4, 4)), "exceed capacity"),
        (lambda: ccdnf_prophet(inst, (1, 1), sample, alpha=0.0), "alpha"),
        (lambda: ccdnf_prophet(inst, (1, 1), sample.values), "sample must be an Instance"),
        (lambda: ccdnf_prophet(inst, (1, 1), iid_instances(2, 30, 6, M=3, theta=10, rng=2)), "classes"),
        (lambda: apportion([1], [[np.nan, 1.0]]), "finite"),
    ]
    for f, msg in bad:
        with pytest.raises(FairSelectionError, match=msg):
            f()


def test_registry_rows_unchanged():
    assert ALGORITHMS[-1] == "CCDNF-secretary" and "CCDNF-prophet" not in ALGORITHMS
    inst = iid_instances(4, 80, 10, M=3, theta=20, p_multi=0.3, class_shift=(0, -0.7, -1.2), rng=5)
    q = GFQ((3, 2, 2))
    old = [a for a in ALGORITHMS if a != "CCDNF-secretary"]
    df = evaluate(inst, q, ALGORITHMS, rng=11, n_draws=20)
    pd.testing.assert_frame_equal(df[df.algorithm.isin(old)].reset_index(drop=True),
                                  evaluate(inst, q, old, rng=11, n_draws=20))
    s = df[df.algorithm == "CCDNF-secretary"]
    assert len(s) == 4 and (s.used_max <= 10).all()
