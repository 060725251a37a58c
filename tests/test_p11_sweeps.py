"""P11 sweeps: the BRC loader (truncated-normal angles), the angle readout and the angular speed used by
15_fig_dimension_sweep / 16_fig_brc_speed. Real assertions against scipy, brute force and closed forms; fast."""
import numpy as np
import pytest
import torch
from scipy import stats

from neurips25.ebm_geometry import render_char, rotate, rotated_characters, shortest_arc, train_char_ae, encode_images
from neurips25.ebm_geometry.characters import brc_angles, biased_rotated_characters, angle_readout, angular_speed


@pytest.mark.parametrize("std,seed", [(40.0, 0), (40.0, 7), (90.0, 1)])
def test_brc_angles_follow_the_truncated_normal(std, seed):
    a = brc_angles(20000, std=std, seed=seed, whole_degrees=False)
    assert a.min() > -180 and a.max() <= 180
    tn = stats.truncnorm(-180 / std, 180 / std, loc=0, scale=std)
    assert stats.kstest(a, tn.cdf).pvalue > 1e-3
    test_mean, test_sd = a.mean(), a.std()
    assert abs(test_mean - tn.mean()) < 4 * tn.std() / np.sqrt(len(a)) and abs(test_sd / tn.std() - 1) < 0.03


def test_ks_has_power_and_rounding_stays_close():
    a = brc_angles(20000, std=40.0, seed=3, whole_degrees=False)
    assert stats.kstest(a, stats.truncnorm(-180 / 45, 180 / 45, scale=45).cdf).pvalue < 1e-4   # a 12% wider law is rejected
    assert stats.kstest(a, stats.norm(0, 40).cdf).pvalue > 1e-3      # at std 40 the truncation at +-4.5 sd is invisible
    r = brc_angles(20000, std=40.0, seed=3)
    assert np.array_equal(r, np.round(r))
    ks = stats.kstest(r, stats.truncnorm(-180 / 40, 180 / 40, scale=40).cdf).statistic
    assert ks < 0.02                                                   # rounding offset <= 0.5 deg x peak pdf ~ 0.005, plus noise
    wide = brc_angles(20000, std=500.0, seed=0, whole_degrees=False)   # the truncation bites: the untruncated law is rejected
    assert wide.min() > -180 and wide.max() <= 180
    assert stats.kstest(wide, stats.truncnorm(-180 / 500, 180 / 500, scale=500).cdf).pvalue > 1e-3
    assert stats.kstest(wide, stats.norm(0, 500).cdf).pvalue < 1e-6


def test_biased_rotated_characters_structure_and_errors():
    d = biased_rotated_characters(chars=("5", "J"), n_per_char=40, seed=4, binarize=False)
    assert d["images"].shape == (80, 32, 32) and d["chars"] == ("5", "J")
    assert np.array_equal(d["labels"], np.repeat([0, 1], 40))
    np.testing.assert_array_equal(d["images"][45], rotate(render_char("J"), d["angles"][45], False))
    assert not np.array_equal(d["angles"][:40], d["angles"][40:])
    np.testing.assert_array_equal(d["angles"], biased_rotated_characters(chars=("5", "J"), n_per_char=40, seed=4)["angles"])
    assert (np.abs(d["angles"]) < 40).mean() > 0.5                     # concentrated near 0 (P(|Z| < 1) = 0.68)
    with pytest.raises(ValueError, match="n_per_char"): biased_rotated_characters(n_per_char=2.5)
    with pytest.raises(ValueError, match="std must be positive"): biased_rotated_characters(std=0.0)
    with pytest.raises(ValueError, match="n must be"): brc_angles(0)


def test_angle_readout_matches_brute_force_and_respects_labels():
    rng = np.random.default_rng(0)
    R = rng.normal(size=(300, 5)); rl = rng.integers(0, 3, 300); ra = rng.uniform(-180, 180, 300)
    Z = rng.normal(size=(97, 5)); zl = rng.integers(0, 3, 97)
    brute = np.array([ra[np.flatnonzero(rl == l)[np.argmin(((R[rl == l] - z) ** 2).sum(1))]] for z, l in zip(Z, zl)])
    np.testing.assert_array_equal(angle_readout(Z, zl, R, rl, ra, chunk=10), brute)
    np.testing.assert_array_equal(angle_readout(R, rl, R, rl, ra), ra)
    with pytest.raises(ValueError, match="no reference latents"): angle_readout(Z, np.full(97, 5), R, rl, ra)
    with pytest.raises(ValueError, match="NaN"): angle_readout(np.full((2, 5), np.nan), [0, 0], R, rl, ra)
    with pytest.raises(ValueError, match="lengths"): angle_readout(Z, zl[:-1], R, rl, ra)


def test_angular_speed_closed_forms():
    sp, mid = angular_speed(np.stack([shortest_arc(-170, 170, 5), shortest_arc(10, -80, 5)]))
    np.testing.assert_allclose(sp, [[20.0] * 5, [90.0] * 5])           # |total turn| on a unit time interval
    np.testing.assert_allclose(mid[0], [-172, -176, 180, 176, 172])
    sp2, _ = angular_speed(np.array([[0.0, 0.0, 90.0, 90.0]]))         # a jump: all the turn in one segment
    np.testing.assert_allclose(sp2, [[0.0, 270.0, 0.0]])
    with pytest.raises(ValueError, match="theta must be"): angular_speed(np.zeros(4))


def test_angle_readout_on_held_out_rotations_of_a_trained_autoencoder():
    """The estimator of 16_fig_brc_speed on images it never saw: a small triplet AE on 'F' every 5 degrees, references
    every 1 degree, held-out continuous angles; the readout must be within a few degrees."""
    torch.manual_seed(0)
    data = rotated_characters(chars=("F",), angles=np.arange(-175, 180.1, 5.0), binarize=False)
    ae, _ = train_char_ae(data, latent=8, steps=80, seed=0, device="cpu")
    ref_a = np.arange(-179.0, 181.0)
    ref = encode_images(ae, np.stack([rotate(render_char("F"), a, False) for a in ref_a])).numpy()
    held = np.random.default_rng(1).uniform(-180, 180, 60)
    Zh = encode_images(ae, np.stack([rotate(render_char("F"), a, False) for a in held])).numpy()
    est = angle_readout(Zh, np.zeros(60, int), ref, np.zeros(360, int), ref_a)
    err = np.abs((est - held + 180) % 360 - 180)
    assert np.median(err) < 2.0 and np.quantile(err, 0.9) < 5.0, (np.median(err), np.quantile(err, 0.9))
