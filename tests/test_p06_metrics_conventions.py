"""P06 (neurips25.care), issue 29: the paper's metric conventions and clear errors.

* NSD: the default is DeepMind's surfel NSD (the `surface_distance` package, which the paper's step5_calculateMetrics.py
  calls); the earlier boundary-voxel NSD is `convention="voxel"` and keeps its old numbers.
* clDice of a mask whose skimage skeleton is empty (thick, even-width 3-D blobs) falls back to the mask as its own
  skeleton, so clDice(x, x) = 1; the reference code's 0/0 = NaN is `empty_skeleton="nan"`.
* Integer sinograms are reconstructed in float64 (the ramp filter was cast to int: all-zero FBP); NaN images are
  refused by `segment` / `train_enhancer`; a non-integer or non-positive `n_iter` is refused with one message.
"""
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from scipy import ndimage as ndi
from skimage.morphology import skeletonize

from neurips25.care import (GROUPS, nsd, cldice, structure_scores, group_scores, anatomical_phantom, view_angles, radon_t,
                            fbp_t, sirt_t, sart_t, shepp_logan)

sdist = pytest.importorskip("surface_distance")


def nsd_reference(pred, gt, spacing, tol):
    "What step5_calculateMetrics.py computes: compute_surface_distances(truth, pred, spacing_mm), then the surface Dice."
    return sdist.compute_surface_dice_at_tolerance(sdist.compute_surface_distances(gt, pred, spacing), tol)


def random_masks(rng, shape, n):
    "Pairs of smooth random blobs (gaussian-filtered noise, thresholded, opened)."
    out = []
    while len(out) < n:
        a, b = (ndi.binary_opening(ndi.gaussian_filter(rng.random(shape), 1.5) > 0.5) for _ in range(2))
        if a.any() and b.any(): out.append((a, b))
    return out


# ---------------------------------------------------------------------------------------------------------- NSD
@pytest.mark.parametrize("shape,spacing", [((30, 36), (0.8, 1.7)), ((30, 36), (6.0, 6.0)), ((40, 24), (3.0, 0.7)),
                                           ((10, 16, 18), (2.5, 0.9, 1.3)), ((12, 14, 16), (5.0, 3.0, 3.0)),
                                           ((14, 12, 12), (0.7, 2.0, 1.1))])
def test_nsd_equals_surface_distance(shape, spacing):
    rng = np.random.default_rng(100 * len(shape) + int(10 * sum(spacing)))
    gaps = []
    for pred, gt in random_masks(rng, shape, 5):
        for tol in (0.5 * min(spacing), 2.0, 2.5 * max(spacing)):
            ours = nsd(pred, gt, spacing, tol)
            assert ours == pytest.approx(nsd_reference(pred, gt, spacing, tol), abs=1e-12)
            assert nsd(pred, gt, spacing, tol, convention="surfel") == ours
            gaps.append(ours - nsd(pred, gt, spacing, tol, convention="voxel"))
    assert max(np.abs(gaps)) > 1e-3                  # the default is no longer the voxel NSD


def test_nsd_voxel_convention_keeps_the_old_numbers():
    "Numbers of the boundary-voxel NSD computed with the code before issue 29 (then the only convention)."
    rng = np.random.default_rng(2024)
    old = [0.7, 0.6918489065606361, 0.7633744855967078, 0.6832116788321168, 0.73172569706104, 0.6630350194552529]
    got = []
    for shape, sp in (((32, 40), (0.8, 1.7)), ((10, 16, 18), (2.5, 0.9, 1.3))):
        for _ in range(3):
            a = ndi.binary_opening(ndi.gaussian_filter(rng.random(shape), 1.5) > 0.5)
            b = ndi.binary_opening(ndi.gaussian_filter(rng.random(shape), 1.5) > 0.5)
            got.append(nsd(b, a, sp, 2.0, convention="voxel"))
    np.testing.assert_allclose(got, old, rtol=0, atol=1e-12)
    # a one-pixel shift of the 64² phantom (6 mm pixels) at τ = 2 mm, per structure, old code
    P = anatomical_phantom(64, seed=0)
    s = structure_scores(np.roll(P.labels, 1, 1), P.labels, P.spacing, convention="voxel")
    old_s = {12: 0.338461538461538, 10: 0.315789473684211, 11: 0.235294117647059, 13: 0.384615384615385,
             17: 0.470588235294118, 8: 0.375, 2: 0.25, 3: 0.25, 5: 0.0, 7: 0.379310344827586}
    for k, v in old_s.items():
        assert s[k] == pytest.approx(v, abs=1e-12)


def test_nsd_edge_cases_and_validation():
    g = np.zeros((20, 20), bool); g[5:12, 5:12] = True
    e = np.zeros_like(g)
    for conv in ("surfel", "voxel"):
        assert nsd(g, g, 1.0, convention=conv) == 1.0
        assert np.isnan(nsd(g, e, 1.0, convention=conv))                           # GT empty: NaN (excluded)
        assert nsd(e, g, 1.0, convention=conv) == 0.0                              # missed structure: 0
        assert np.isnan(nsd(e, g, 1.0, missing="nan", convention=conv))
    for bad in ("monai", "Surfel", None):
        with pytest.raises(ValueError, match="convention must be 'surfel' or 'voxel'"):
            nsd(g, g, 1.0, convention=bad)
    with pytest.raises(ValueError, match="spacing must be given"):
        nsd(g, g, None)
    with pytest.raises(ValueError, match="spacing must be finite and > 0"):
        nsd(g, g, (1.0, -1.0))
    with pytest.raises(ValueError, match="2 entries"):
        nsd(g, g, (1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="convention must be"):
        structure_scores(np.zeros((8, 8), np.uint8) + 12, np.zeros((8, 8), np.uint8) + 12, 1.0, convention="vox")


def test_structure_scores_passes_the_convention_through():
    P = anatomical_phantom(64, seed=0)
    sh = np.roll(P.labels, 1, 1)
    surf, vox = structure_scores(sh, P.labels, P.spacing), structure_scores(sh, P.labels, P.spacing, convention="voxel")
    for l in (12, 10, 11, 13, 17, 8, 2, 3, 5, 7):                                 # NSD structures
        p, t = sh == l, P.labels == l
        if t.any():
            assert surf[l] == pytest.approx(nsd_reference(p, t, P.spacing, 2.0), abs=1e-12)
            assert vox[l] == nsd(p, t, P.spacing, 2.0, convention="voxel")
    gs, gv = group_scores(surf), group_scores(vox)
    assert gs["large_organs"] > gv["large_organs"] + 0.1                            # 6 mm pixels, τ = 2 mm: large gap
    assert gs["vessels"] == gv["vessels"] and gs["intestines"] == gv["intestines"]  # clDice is unaffected


def test_nsd_names_the_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "surface_distance", None)                      # import → ImportError
    g = np.zeros((10, 10), bool); g[2:6, 2:6] = True
    with pytest.raises(ImportError, match="surface-distance"):
        nsd(g, g, 1.0)
    assert nsd(g, g, 1.0, convention="voxel") == 1.0                               # the voxel variant needs no package


# ------------------------------------------------------------------------------------------------------- clDice
def test_cldice_empty_skeleton_identity():
    cube = np.zeros((6, 6, 6), bool); cube[2:4, 2:4, 2:4] = True
    prism = np.zeros((24, 10, 10), bool); prism[2:22, 2:8, 2:8] = True
    for m in (cube, prism):
        assert not skeletonize(m).any()
        assert cldice(m, m) == 1.0
        assert np.isnan(cldice(m, m, empty_skeleton="nan"))                         # the reference code's 0/0
    with pytest.raises(ValueError, match="empty_skeleton must be"):
        cldice(cube, cube, empty_skeleton="zero")


def test_cldice_identity_on_50_random_3d_phantoms():
    from neurips25.care.volumes import anatomical_phantom_3d
    n_struct = n_empty = 0
    for s in range(50):
        V = anatomical_phantom_3d((12, 48, 48), (2.5, 4.0, 4.0), seed=1000 + s)
        for l in GROUPS["intestines"] + GROUPS["vessels"]:
            m = V.labels == l
            if m.any():
                n_struct += 1; n_empty += not skeletonize(m).any()
                assert cldice(m, m) == 1.0, (s, l)
        gs = group_scores(structure_scores(V.labels, V.labels, V.spacing))
        assert all(v == 1.0 for v in gs.values() if np.isfinite(v)) and np.isfinite(gs["vessels"]), (s, gs)  # perfect → 1
    assert n_struct > 200 and n_empty > 0                                           # the fallback was exercised


def test_cldice_random_thick_masks():
    rng = np.random.default_rng(5)
    for _ in range(50):
        m = np.zeros((10, 14, 14), bool)
        z0, y0, x0 = rng.integers(1, 4, 3); dz, dy, dx = rng.integers(2, 7, 3)
        m[z0:z0 + dz, y0:y0 + dy, x0:x0 + dx] = True                               # boxes with even and odd sides
        assert cldice(m, m) == 1.0
        other = np.roll(m, 5, axis=2)                                              # and a shifted copy scores below 1
        assert 0.0 <= cldice(other, m) < 1.0


# ---------------------------------------------------------------------------------------------- clear errors
def test_integer_sinograms_are_reconstructed_in_float():
    from neurips25.care.operators import ParallelBeam, FanBeam, os_sart, asd_pocs
    x = torch.tensor(shepp_logan(32)) * 100
    th = view_angles(12)
    y = radon_t(x, th).round().long()
    ref = fbp_t(y.double(), th)
    assert float(ref.abs().max()) > 0
    assert torch.allclose(fbp_t(y, th), ref, rtol=0, atol=1e-12)                   # was all zeros (int ramp filter)
    for op in (ParallelBeam(32, th), FanBeam(32, view_angles(12, 360.0), 64.0)):
        yi = op(x).round().long()
        assert float(op.fbp(yi).abs().max()) > 0
        assert torch.allclose(op.fbp(yi), op.fbp(yi.double()), rtol=0, atol=1e-12)
    op = ParallelBeam(32, th); yi = op(x).round().int()
    assert torch.allclose(os_sart(op, yi, 2, 3), os_sart(op, yi.double(), 2, 3), rtol=0, atol=1e-12)
    assert torch.allclose(asd_pocs(op, yi, 2, 3), asd_pocs(op, yi.double(), 2, 3), rtol=0, atol=1e-12)
    assert torch.allclose(sirt_t(y, th, n_iter=2), sirt_t(y.double(), th, n_iter=2), rtol=0, atol=1e-12)
    with pytest.raises(TypeError, match="must be real"):
        fbp_t(y.to(torch.complex128), th)


def test_n_iter_must_be_a_positive_integer():
    from neurips25.care.operators import ParallelBeam, os_sart, asd_pocs
    th = view_angles(8); op = ParallelBeam(32, th)
    y = op(torch.tensor(shepp_logan(32)))
    for bad in (2.5, 0, -3, True, "2"):
        with pytest.raises(ValueError, match="n_iter must be an integer >= 1"):
            os_sart(op, y, bad, 2)
        with pytest.raises(ValueError, match="n_iter must be an integer >= 1"):
            asd_pocs(op, y, bad, 2)
        with pytest.raises(ValueError, match="n_iter must be an integer >= 1"):
            sart_t(y, th, n_iter=bad)
    with pytest.raises(ValueError, match="tv_iter must be an integer >= 0"):
        asd_pocs(op, y, 1, 2, tv_iter=1.5)
    assert os_sart(op, y, np.int64(2), 2).shape == (32, 32)                         # numpy integers are fine


def test_segment_and_train_enhancer_refuse_nan():
    from neurips25.care import make_cases, train_segmenter, segment, train_enhancer, enhance
    D = make_cases(2, 64, 8, seed=3)
    seg, _ = train_segmenter(D["gt_hu"], D["labels"], steps=2, width=4, depth=1)
    bad = D["gt_hu"].clone(); bad[0, 0, 4, 4] = float("nan")
    with pytest.raises(ValueError, match="images_hu contains NaN"):
        segment(seg, bad)                                                          # was: a background pixel
    with pytest.raises(ValueError, match="rec_hu contains NaN"):
        train_enhancer(bad, D["gt_hu"], steps=1, width=4, depth=1)                 # was: a NaN model
    with pytest.raises(ValueError, match="gt_hu contains NaN"):
        train_enhancer(D["rec_hu"], bad, steps=1, width=4, depth=1)
    with pytest.raises(ValueError, match="images_hu contains NaN"):
        train_segmenter(bad, D["labels"], steps=1, width=4, depth=1)
    enh, h = train_enhancer(D["rec_hu"], D["gt_hu"], steps=2, width=4, depth=1)
    assert np.isfinite(h).all()
    with pytest.raises(ValueError, match="rec_hu contains NaN"):
        enhance(enh, bad)
    with pytest.raises(TypeError, match="torch tensor"):
        segment(seg, bad.numpy())


def test_surfel_nsd_without_scipy_deprecated_namespaces():
    ("surface-distance 0.1 calls scipy.ndimage.filters.correlate and scipy.ndimage.morphology.distance_transform_edt, "
     "deprecated aliases that SciPy 2.0 removes: `nsd` points them at scipy.ndimage's own functions, so it warns "
     "nothing and gives exactly what the unpatched package gives in a fresh interpreter (through the aliases).")
    rng = np.random.default_rng(7)
    cases = [(ndi.binary_opening(ndi.gaussian_filter(rng.random(s), 1.5) > 0.5),
              ndi.binary_opening(ndi.gaussian_filter(rng.random(s), 1.5) > 0.5), sp, tol)
             for s, sp, tol in (((30, 36), (0.8, 1.7), 2.0), ((10, 16, 18), (2.5, 0.9, 1.3), 2.5))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        ours = [nsd(p, g, sp, tol) for p, g, sp, tol in cases]
    assert sdist.metrics.ndimage.filters.correlate is ndi.correlate
    assert sdist.metrics.ndimage.morphology.distance_transform_edt is ndi.distance_transform_edt
    code = ("import sys, pickle, warnings; warnings.simplefilter('ignore'); import surface_distance as s; "
            "cases = pickle.load(sys.stdin.buffer); "
            "print(repr([s.compute_surface_dice_at_tolerance(s.compute_surface_distances(g, p, sp), t) "
            "for p, g, sp, t in cases]))")
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(cases), capture_output=True, check=True)
    assert ours == eval(out.stdout.decode()), (ours, out.stdout)


def test_sparse_operator_warns_nothing_in_a_fresh_process():
    ("torch warns once per process when a sparse CSR tensor is built (beta notice; invariant checks left implicit): "
     "the operators opt out explicitly, so a fresh process building and applying one raises under -W error.")
    code = ("import torch; from neurips25.care.operators import ParallelBeam; "
            "op = ParallelBeam(16, [0.0, 45.0, 90.0]); y = op.forward(torch.rand(1, 16, 16, dtype=torch.float64)); "
            "assert y.shape[-2:] == (3, 16), y.shape")
    subprocess.run([sys.executable, "-W", "error", "-c", code], check=True, capture_output=True)
