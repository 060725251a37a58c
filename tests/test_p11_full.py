"""P11's `full` profile (issue 29, P11 item 6): AFHQ cats -> dogs through the user's SD-VAE folder, both from the data
layer, at tiny size on the CPU. Fixtures in the sources' exact on-disk formats: an AFHQ folder of 512 x 512 PNGs
(afhq/{train,val}/{cat,dog,wild}) and a diffusers-format AutoencoderKL folder (config.json +
diffusion_pytorch_model.safetensors) written by `SDVAE.save_folder`. diffusers is not installed in the reference
environment, so `load_vae` (the data layer's loader, diffusers' AutoencoderKL.from_pretrained) refuses there and
`load_sd_vae` reads the same folder with the plain-torch SDVAE; where diffusers imports, the two are compared."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from neurips25.ebm_geometry import afhq as A
from neurips25.sources import loaders as L
from neurips25.sources import registry as R
from neurips25.sources.registry import SourceError

TINTS = {"cat": (200, 60, 40), "dog": (40, 80, 200), "wild": (120, 120, 120)}


def write_afhq(root, per_class=6, size=512, seed=0):
    from PIL import Image
    rng = np.random.default_rng(seed)
    for split in ("train", "val"):
        for c, tint in TINTS.items():
            d = root / "afhq" / split / c
            d.mkdir(parents=True, exist_ok=True)
            for k in range(per_class if split == "train" else 1):
                a = np.clip(np.asarray(tint) + rng.normal(0, 25, (size, size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(a).save(d / f"{c}_{k}.png")
    return root


def tiny_vae(seed=0):
    torch.manual_seed(seed)
    return A.SDVAE(block_out_channels=[8, 16], layers_per_block=1, latent_channels=4, norm_num_groups=4).eval()


@pytest.fixture
def sources(tmp_path, monkeypatch):
    "The AFHQ and SD-VAE fixtures under the data layer's per-source environment variables."
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)
    afhq = write_afhq(tmp_path / "afhq")
    vae = tmp_path / "sd_vae_ft_mse"
    tiny_vae().save_folder(vae)
    monkeypatch.setenv(R.SOURCES["afhq"].env_var, str(afhq))
    monkeypatch.setenv(R.SOURCES["sd_vae_ft_mse"].env_var, str(vae))
    return afhq, vae


def _has_diffusers() -> bool:
    import importlib.util
    return importlib.util.find_spec("diffusers") is not None


def test_sd_vae_folder_loads_through_the_data_layer(sources):
    afhq, vae = sources
    assert R.verify("sd_vae_ft_mse")["status"] == "unverified"
    lv = A.load_sd_vae(device="cpu", backend="torch")
    ref = tiny_vae()
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(lv.vae.decode(lv.vae.encode(x)[0]), ref.decode(ref.encode(x)[0]))
    assert lv.backend == "torch" and lv.scaling_factor == 0.18215
    if not _has_diffusers():                  # the data layer's own loader needs diffusers: one clear error
        with pytest.raises(SourceError, match="needs diffusers"):
            L.load_vae()
        assert A.load_sd_vae(device="cpu").backend == "torch"          # auto: the plain-torch reader
    R.pin("sd_vae_ft_mse")
    w = vae / "diffusion_pytorch_model.safetensors"
    b = bytearray(w.read_bytes())
    b[-10] ^= 0xFF
    w.write_bytes(bytes(b))
    with pytest.raises(SourceError, match="diffusion_pytorch_model.safetensors: sha256"):
        A.load_sd_vae(device="cpu", backend="torch")


@pytest.mark.skipif(not _has_diffusers(), reason="diffusers is not installed (not a requirement of the project)")
def test_sdvae_equals_diffusers_autoencoderkl(tmp_path):
    "The sd-vae-ft-mse layout (4 levels, 128..512 channels) with random weights: SDVAE = diffusers to float32 rounding."
    from diffusers import AutoencoderKL
    torch.manual_seed(0)
    ref = AutoencoderKL(down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        block_out_channels=(128, 256, 512, 512), layers_per_block=2, latent_channels=4,
                        norm_num_groups=32).eval()
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    ref.save_pretrained(tmp_path / "vae", safe_serialization=True)
    ours = A.SDVAE.from_folder(tmp_path / "vae")
    x = torch.rand(2, 3, 64, 64) * 2 - 1
    with torch.no_grad():
        post = ref.encode(x).latent_dist
        m, lv = ours.encode(x)
        torch.testing.assert_close(m, post.mean, rtol=0, atol=2e-5)
        torch.testing.assert_close(lv, post.logvar, rtol=0, atol=2e-5)
        torch.testing.assert_close(ours.decode(m), ref.decode(post.mean).sample, rtol=0, atol=2e-4)


def test_afhq_images_and_latents(sources):
    lv = A.load_sd_vae(device="cpu", backend="torch")
    ims, y, classes = A.afhq_images("train", size=32, max_per_class=4)
    assert ims.shape == (8, 32, 32, 3) and ims.dtype == np.uint8 and classes == ["cat", "dog"]
    assert y.tolist() == [0] * 4 + [1] * 4
    assert ims[:4, ..., 0].mean() > ims[4:, ..., 0].mean() + 50                # cats reddish, dogs bluish
    data = A.afhq_latent_data(lv, "train", size=32, max_per_class=4, ref_split="val")
    assert tuple(data["Z"].shape) == (8, 1024) and data["shape"] == (4, 16, 16) and float(data["Z"].abs().max()) <= 1
    assert len(data["ref_images"]) == 2                                          # the val cat and dog
    with pytest.raises(ValueError, match=r"unknown AFHQ class\(es\) \['horse'\]"):
        A.afhq_images(classes=("cat", "horse"))
    afhq, _ = sources
    write = __import__("PIL.Image", fromlist=["Image"])
    write.fromarray(np.zeros((256, 256, 3), np.uint8)).save(afhq / "afhq" / "train" / "dog" / "dog_0.png")
    with pytest.raises(SourceError, match="dog_0.png: image of 256x256 pixels, expected 512x512"):
        A.afhq_images("train", size=32)


def test_full_afhq_path_through_papermill(sources, tmp_path):
    "13_tab_digits_latent with full's dataset=afhq (the data layer, CD + DSM EBM, U-Net interpolants, scores, claims)."
    from neurips25.runner.executors import plan
    jobs = {j.art.id.split("/")[1]: j for j in plan(["p11"], profile="full", device="cpu", force=True,
                                                     outputs=tmp_path / "o")}
    job = jobs["tab_digits_latent"]
    assert job.effective["dataset"] == "afhq" and job.effective["n_pairs"] == 50_000 and job.art.gpu
    assert set(job.art.needs.get("full", [])) == {"afhq", "sd_vae_ft_mse"}
    assert not getattr(jobs["fig_dimension_sweep"].art, "needs", {}).get("full")  # a rotated-MNIST sweep: no AFHQ
    tiny = dict(dataset="afhq", n_seeds=1, seed0=1, ebm_steps=3, ebm_width=8, n_pairs=4, T=4, land_n=8, rbf_K=3,
                afhq_size=32, afhq_per_class=5, cd_langevin=2, interp_steps=2, interp_batch=2, interp_ch=4,
                fid_times="0.5", pixel_side=4, device="cpu", vae_backend="torch", geodesic="interpolant",
                fid_weights="")
    out = tmp_path / "run"
    env = {**os.environ, "NEURIPS25_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1", "NEURIPS25_DEVICE": "cpu",
           "NEURIPS25_PROFILE": "full", "NEURIPS25_CACHE": "0", "NEURIPS25_PROGRESS": "0"}
    nb = job.art.notebook
    args = [sys.executable, "-m", "papermill", str(nb), str(tmp_path / "out.ipynb"), "-k", "python3", "--cwd",
            str(nb.parent)]
    for k, v in tiny.items():
        args += ["-r", k, v] if isinstance(v, str) else ["-p", k, json.dumps(v)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    tab = pd.read_csv(out / "afhq.csv")
    assert tab.metric.tolist() == ["linear", "slerp", "G_1/p", "G_E", "G_RBF", "G_LAND"]
    assert tab.fid_mean.isna().all() and np.isfinite(tab.pixel_fd_mean).all() and np.isfinite(tab.latent_fd_mean).all()
    assert tab.paper_fid.tolist() == [42.47, 32.67, 16.47, 20.79, 37.98, 39.17]
    assert (out / "afhq_strips.png").is_file() and (out / "afhq_gates.csv").is_file()
    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())}
    afhq_ids = {"afhq_fid_inv_vs_linear", "afhq_fid_ge_vs_linear", "afhq_fid_slerp_vs_linear",
                "afhq_fid_inv_vs_kernels", "afhq_pixel_fd_inv_vs_linear"}
    assert set(claims) == afhq_ids                                    # the digits claims belong to small / medium
    assert all(claims[c]["verdict"] == "not comparable" for c in afhq_ids)       # no Inception weights, 1 seed
    assert "no Inception-v3 weights" in claims["afhq_fid_inv_vs_linear"]["ours"]
