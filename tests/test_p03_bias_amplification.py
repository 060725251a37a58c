"Public API of neurips25.bias_amplification (P03): closed forms, bounds, counters, data protocols, training."
import math

import numpy as np
import pytest
import torch

import neurips25.bias_amplification as ba

torch.set_num_threads(1)


def _random_psd(rng, d):
    A = rng.standard_normal((d, d))
    return A @ A.T / d + 0.1 * np.eye(d)


@pytest.mark.parametrize("seed", range(5))
def test_full_data_theta_is_the_weighted_minimiser(seed):
    rng = np.random.default_rng(seed); d = 6
    S0, S1 = _random_psd(rng, d), _random_psd(rng, d)
    t0, t1 = rng.standard_normal(d), rng.standard_normal(d)
    z = float(rng.uniform(0.01, 0.5))
    ts = ba.full_data_theta(S0, S1, t0, t1, z)
    # stationarity of ζL_0 + (1−ζ)L_1 with L_s = ½(θ−θ_s)ᵀΣ_s(θ−θ_s)
    np.testing.assert_allclose(z * S0 @ (ts - t0) + (1 - z) * S1 @ (ts - t1), 0, atol=1e-10)
    # the exact linearisation θ* − θ_1 = −ζ H^{-1} ∇L_0(θ_1) and the proximity bound
    H = z * S0 + (1 - z) * S1
    np.testing.assert_allclose(ts - t1, -z * np.linalg.solve(H, S0 @ (t1 - t0)), atol=1e-10)
    assert np.linalg.norm(ts - t1) <= z * np.linalg.norm(S0 @ (t1 - t0)) / np.linalg.eigvalsh(H).min() + 1e-12


@pytest.mark.parametrize("zeta", [0.01, 0.05, 0.3])
def test_sample_closed_forms_match_lstsq(zeta):
    m = ba.ToyModel(d1=3, d2=4, sigma_small=0.2, noise=0.3)
    X, y, s = ba.sample_toy(m, 5000, zeta, seed=7)
    cf = ba.sample_closed_forms(X, y, s)
    np.testing.assert_allclose(cf["theta_star"], np.linalg.lstsq(X, y, rcond=None)[0], rtol=0, atol=1e-8)
    for g in (0, 1):
        np.testing.assert_allclose(cf[f"theta{g}"], np.linalg.lstsq(X[s == g], y[s == g], rcond=None)[0], rtol=0, atol=1e-8)
    assert cf["zeta"] == pytest.approx((s == 0).mean())


def test_population_closed_form_of_the_toy_model():
    m = ba.ToyModel(sigma_small=0.1, sigma_v=1.0)
    for z in (0.01, 0.03, 0.1, 0.3):
        cf = ba.toy_closed_forms(m, z)
        r = z * 100 / (z * 100 + 1 - z)
        assert cf["dist"] == pytest.approx(r * np.linalg.norm(m.beta_v), rel=1e-12)
        assert cf["dist"] + cf["dist_to_minority"] == pytest.approx(np.linalg.norm(m.beta_v), rel=1e-12)
        assert ba.proximity_ratio(z, m.rho) == pytest.approx(r)
    # a large sample agrees with the population closed form
    X, y, s = ba.sample_toy(m, 100_000, 0.1, seed=0)
    assert ba.sample_closed_forms(X, y, s)["dist"] == pytest.approx(ba.toy_closed_forms(m, 0.1)["dist"], rel=0.03)


def _pop_path(m, z, n_steps):
    mo = {}
    for g in (0, 1):
        S, th = m.cov(g), m.theta_group(g)
        mo[g] = (S, S @ th, float(th @ S @ th + m.noise ** 2))
    return ba.gd_path(mo[0][0], mo[1][0], mo[0][1], mo[1][1], mo[0][2], mo[1][2], z, m.theta_group(1), n_steps)


def test_lower_bound_holds_in_every_simulated_configuration():
    rng = np.random.default_rng(0); checked = 0
    for _ in range(60):
        m = ba.ToyModel(d1=int(rng.integers(1, 6)), d2=int(rng.integers(1, 6)), sigma_small=float(10 ** rng.uniform(-2, -0.3)),
                        sigma_v=float(10 ** rng.uniform(-0.3, 0.5)), noise=0.1)
        z = float(10 ** rng.uniform(-2.5, -0.3)); eps = float(rng.uniform(0.02, 0.5))
        T = ba.extra_iterations_exact(m, z, eps)
        p = _pop_path(m, z, T + 5)
        # independent count: simulate GD and count iterations until the minority's excess loss gap is closed
        T_sim = ba.gap_closure_time(p["L0"], p["L0_star"], eps)
        assert T_sim == T
        assert T_sim >= ba.extra_iterations_bound(m, z, eps) - 1e-9
        checked += 1
    assert checked == 60


def test_extra_iterations_scale_as_inverse_zeta():
    m = ba.ToyModel()
    T = [ba.extra_iterations_exact(m, z) for z in (0.01, 0.03, 0.1, 0.3)]
    assert T == [98, 41, 12, 4]
    m0 = ba.ToyModel(sigma_small=0.0)            # no majority variance: exactly Θ(1/ζ), no saturation
    zT = [z * ba.extra_iterations_exact(m0, z) for z in np.geomspace(1e-3, 0.05, 6)]
    assert max(zT) / min(zT) < 1.2


def test_gap_closure_and_bad_inputs():
    assert ba.gap_closure_time([10.0, 5.0, 0.9, 0.2], 0.0) == 2
    assert ba.gap_closure_time([5.0, 4.0, 3.0], 0.0) is None          # not reached: reported, not waited for
    for bad in (0, 1, -0.5, 2.0, float("nan"), True):
        with pytest.raises(ValueError, match="zeta"): ba.check_zeta(bad)
    with pytest.raises(ValueError, match="no samples"): ba.sample_toy(ba.ToyModel(), 50, 0.001)
    with pytest.raises(ValueError, match="fewer than"):
        X, y, s = ba.sample_toy(ba.ToyModel(), 200, 0.02)
        ba.sample_closed_forms(X, y, s)


def test_gradient_ratio_against_finite_differences():
    m = ba.ToyModel(d1=2, d2=2); z = 0.05
    S0, S1, t0, t1 = m.cov(0), m.cov(1), m.theta_group(0), m.theta_group(1)
    th = np.array([0.3, -0.2, 0.5, 1.0])
    L = lambda S, ts, x: 0.5 * (x - ts) @ S @ (x - ts)
    fd = lambda S, ts: np.array([(L(S, ts, th + 1e-6 * e) - L(S, ts, th - 1e-6 * e)) / 2e-6 for e in np.eye(4)])
    want = (1 - z) * np.linalg.norm(fd(S1, t1)) / (z * np.linalg.norm(fd(S0, t0)))
    assert ba.gradient_ratio(th[None], S0, S1, t0, t1, z)[0] == pytest.approx(want, rel=1e-6)
    assert ba.majority_dominated_fraction(m, 0.01, n_points=5000) > ba.majority_dominated_fraction(m, 0.3, n_points=5000)


def test_group_metrics_hand_case_and_fairlearn():
    y = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1]); s = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    pred = torch.tensor([0, 0, 0, 1, 1, 1, 0, 1])        # minority 2/3 right, majority 4/5 right
    gm = ba.group_metrics(torch.nn.functional.one_hot(pred, 2).float() * 3, y, s)
    assert gm["acc_0"] == pytest.approx(2 / 3) and gm["acc_1"] == pytest.approx(4 / 5) and gm["acc"] == pytest.approx(6 / 8)
    from fairlearn.metrics import MetricFrame
    from sklearn.metrics import accuracy_score
    mf = MetricFrame(metrics=accuracy_score, y_true=y.numpy(), y_pred=pred.numpy(), sensitive_features=s.numpy())
    assert mf.by_group.loc[0] == pytest.approx(gm["acc_0"]) and mf.by_group.loc[1] == pytest.approx(gm["acc_1"])
    # a group absent from the batch is NaN, not an error or a zero
    gm1 = ba.group_metrics(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long))
    assert math.isnan(gm1["acc_0"]) and gm1["acc_1"] == 1.0


def test_extra_epochs_on_a_scripted_learning_curve():
    acc = [0.3, 0.6, 0.85, 0.91, 0.95, 0.97, 0.98, 0.99]
    acc0 = [0.0, 0.0, 0.1, 0.3, 0.6, 0.85, 0.95, 0.99]
    r = ba.extra_epochs(acc, acc0, tau=0.9, kappa=0.9)
    assert (r["T_es"], r["T_final"], r["duration"]) == (4, 7, 3.0) and r["ratio"] == pytest.approx(75.0)
    r = ba.extra_epochs(acc, acc0, tau=0.9, kappa=0.995)
    assert r["T_final"] is None and not r["reached"] and math.isnan(r["duration"])
    with pytest.raises(ValueError, match="fraction"): ba.extra_epochs(acc, acc0, tau=90, kappa=90)


def test_groupdata_and_protocols():
    with pytest.raises(ValueError, match="s=0 has no samples"):
        ba.GroupData(np.zeros((3, 2)), np.zeros(3, int), np.ones(3, int), 2)
    with pytest.raises(ValueError, match="out of range"):
        ba.GroupData(np.zeros((3, 2)), np.array([0, 1, 5]), np.array([0, 1, 1]), 2)
    assert ba.minority_count(0.03, 5000) == 154             # CIFAR-2: 154 cars vs 5,000 trucks
    tr, te = ba.image_groups("mnist", "class", zeta=0.2, minority_class=3, seed=1)
    assert (tr.y[tr.s == 0] == 3).all() and (tr.y[tr.s == 1] != 3).all() and 0.015 < tr.share < 0.03
    tt, _ = ba.image_groups("mnist", "transformed", zeta=0.1, seed=1)
    assert tt.share == pytest.approx(0.1, abs=1e-3) and tt.X[tt.s == 0].mean() > 0.8
    with pytest.raises(ValueError, match="protocol"): ba.image_groups("mnist", "blur")


def test_training_learns_the_majority_first():
    tr, te = ba.synthetic_tabular(1500, 0.03, seed=0)
    r = ba.train_groups(ba.make_model("mlp", (10,), 2, hidden=16), tr, te, epochs=200, lr=0.1, batch_size=64, device="cpu")
    assert r.summary["reached"] and r.summary["T_final"] > r.summary["T_es"]
    assert r.history.acc.iloc[-1] > 0.9 and "test_acc_0" in r.history
    short = ba.train_groups(ba.make_model("mlp", (10,), 2, hidden=32), tr, epochs=1, device="cpu")
    assert not short.summary["reached"] and len(short.history) == 1
