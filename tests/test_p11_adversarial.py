"""P11 adversarial inputs (audit of 2026-12-07): degenerate paths read finite, well-defined values; bad arguments raise
early errors naming the argument instead of silent garbage (uninitialised memory, NaN, a wrong path) or torch's message.
"""
import math

import numpy as np
import pytest
import torch

from neurips25.ebm_geometry import (CircularMixture, euclidean, energy_metrics, langevin, land_h, lerp_path, path_stats,
                                    shoot, turning_angle, ucg, verify_geodesic)
from neurips25.ebm_geometry.geodesics import grad_log_lambda
from neurips25.ebm_geometry.autoencoder import sample_triplets
from neurips25.ebm_geometry.characters import angle_readout, shortest_arc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_turning_angle_skips_repeated_points(dtype):
    # a stop (zero-length segment) has no direction: it added pi/2 in float64 and NaN in float32
    sq = torch.tensor([[0.0, 0], [1, 0], [1, 0], [1, 0], [1, 1], [1, 1]], dtype=dtype)
    assert abs(float(turning_angle(sq)) - math.pi / 2) < 1e-6
    assert float(turning_angle(torch.ones(1, 5, 2, dtype=dtype))) == 0.0          # x0 == x1: no turn


def test_speed_cv_of_still_and_one_segment_paths():
    assert float(path_stats(torch.ones(1, 5, 2), euclidean())["speed_cv"]) == 0.0  # was 0/0 = NaN
    one = lerp_path(torch.zeros(1, 2), torch.ones(1, 2), 1)
    assert float(path_stats(one, euclidean())["speed_cv"]) == 0.0                # was std of one value = NaN


def test_geodesic_ode_on_a_constant_metric():
    # euclidean's lambda does not depend on x: autograd raised "element 0 of tensors does not require grad"
    x = torch.randn(4, 2, dtype=torch.float64)
    assert torch.equal(grad_log_lambda(x, euclidean()), torch.zeros_like(x))
    a, b = torch.zeros(2, 2, dtype=torch.float64), torch.tensor([[1.0, 2.0], [-3.0, 0.5]], dtype=torch.float64)
    assert torch.allclose(shoot(a, b - a, euclidean(), 8), lerp_path(a, b, 8), atol=1e-12)
    assert float(verify_geodesic(lerp_path(a, b, 8), euclidean()).max()) < 1e-12


def test_lerp_path_integer_endpoints_are_cast():
    # the int linspace was 0 inside: the "line" sat on x0 and jumped to x1 at its last point
    P = lerp_path(torch.tensor([[0, 0]]), torch.tensor([[4, 8]]), 4)
    assert torch.equal(P, lerp_path(torch.zeros(1, 2), torch.tensor([[4.0, 8.0]]), 4))
    with pytest.raises(ValueError, match="contain NaN"):
        lerp_path(torch.tensor([[float("nan"), 0.0]]), torch.ones(1, 2), 4)


@pytest.mark.parametrize("kw, msg", [(dict(step=-0.1), "step must be"), (dict(noise=-1.0), "noise must be"),
                                     (dict(step=float("nan")), "step must be"), (dict(generator=3), "generator must")])
def test_langevin_rejects_bad_step_noise_generator(kw, msg):
    with pytest.raises((ValueError, TypeError), match=msg):                     # step < 0 climbed the energy
        langevin(lambda x: (x ** 2).sum(-1), torch.ones(3, 2), 2, **kw)


def test_mixture_rejects_non_finite_parameters():
    with pytest.raises(ValueError, match="must be finite"):                      # log_prob was NaN everywhere
        CircularMixture(torch.zeros(2, 2), torch.tensor([float("nan"), 1.0]))


def test_negative_chunks_no_longer_return_garbage():
    X = ucg(K=8).sample(50, seed=0)
    with pytest.raises(ValueError, match="chunk must be"):                       # h was 0 everywhere
        land_h(X, 1.0, chunk=-1)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="chunk must be"):                       # np.empty's values came back
        angle_readout(rng.normal(size=(5, 2)), [0] * 5, rng.normal(size=(4, 2)), [0] * 4, [0.0] * 4, chunk=-1)
    L, A = torch.zeros(72, dtype=torch.long), torch.arange(-180, 180, 5.0)
    with pytest.raises(ValueError, match="chunk must be"):                       # torch.empty's values came back
        sample_triplets(L, A, 4, chunk=-1)
    with pytest.raises(ValueError, match="T must be"):
        shortest_arc(0, 90, 0)


def test_valid_input_still_works():
    mix = ucg()
    G = energy_metrics(mix.energy)["G_1/p"]
    P = lerp_path(mix.means[10:12], mix.means[-12:-10], 16)
    st = path_stats(P, G, mix.log_prob)
    assert all(torch.isfinite(v).all() for v in st.values())
