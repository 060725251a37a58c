"""P06's `full` (issue 29 item 8): the paper's kind of CTs — AbdomenAtlas in the BDMAP layout, read through the data
layer — at the paper's views and resolution, with the cone beam (FDK) where the paper uses TIGRE's. Each P06
figure/table notebook runs its `full` code path end to end on a NIfTI format fixture at tiny sizes on the CPU
(papermill, the full profile's parameters with only the sizes shrunk); the dry run names the data."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from neurips25.care.atlas import atlas_split, groups_present, load_atlas
from neurips25.care.phantoms import GROUPS
from neurips25.sources import registry as R
from neurips25.sources.registry import SourceError

REPO = Path(__file__).resolve().parents[1]
SERIES = REPO / "nbs" / "p06_care"

# mask files of a fixture case (AbdomenAtlas 1.1 names; 1.1 Mini's nine among them): (cx, cy, r) mm, HU, slices
FIXTURE_ORGANS = {
    "liver": ((-16, -6, 13), 100, (0, 10)), "spleen": ((20, 10, 8), 110, (0, 8)),
    "kidney_left": ((17, -12, 6), 180, (2, 10)), "kidney_right": ((-15, 14, 6), 180, (2, 10)),
    "pancreas": ((2, 2, 5), 90, (3, 9)), "stomach": ((10, -20, 7), 20, (0, 6)),
    "gall_bladder": ((-4, -18, 4), 10, (1, 6)), "adrenal_gland_left": ((10, 14, 3), 40, (0, 4)),
    "celiac_aa": ((-2, 12, 3), 250, (0, 3)), "duodenum": ((-10, 6, 4), 40, (4, 10)),
    "colon": ((24, -2, 5), -50, (0, 10)), "intestine": ((-4, 24, 5), 30, (0, 10)),
    "aorta": ((4, 18, 4), 300, (0, 10)), "postcava": ((-8, 18, 4), 160, (0, 10)),
    "superior_mesenteric_artery": ((8, 4, 2.5), 280, (2, 10)), "renal_vein_left": ((12, -4, 2.5), 150, (3, 7)),
    "veins": ((-22, 6, 2.5), 170, (0, 8)),
}


def write_bdmap(root, n_cases=8, shape=(26, 22, 10), spacing=(2.6, 3.0, 5.0), seed=0):
    """A tiny AbdomenAtlas copy in the BDMAP layout: int16 CTs, uint8 masks, anisotropic affines (x, y flipped in odd
    cases); 16 of the 18 structures of the paper's groups (no right adrenal gland, no right renal vein), the 9 of
    AbdomenAtlas Mini among them, so the data layer's layout check passes and a missing structure is exercised."""
    import nibabel as nib
    rng = np.random.default_rng(seed)
    root = Path(root)
    for c in range(n_cases):
        case = root / f"BDMAP_{c + 1:08d}"
        (case / "segmentations").mkdir(parents=True, exist_ok=True)
        sgn = -1.0 if c % 2 else 1.0
        aff = np.diag([sgn * spacing[0], sgn * spacing[1], spacing[2], 1.0])
        i, j, k = np.meshgrid(*[np.arange(s, dtype=float) for s in shape], indexing="ij")
        x, y = (i - (shape[0] - 1) / 2) * spacing[0], (j - (shape[1] - 1) / 2) * spacing[1]
        body = x ** 2 / 33 ** 2 + y ** 2 / 31 ** 2 <= 1
        ct = np.where(body, 40.0, -2048.0)                          # outside the field of view: -2048, as scanners
        for o, ((cx, cy, r), hu, (z0, z1)) in FIXTURE_ORGANS.items():
            jx, jy = rng.normal(0, 1.5, 2)
            m = ((x - cx - jx) ** 2 + (y - cy - jy) ** 2 <= r ** 2) & (k >= z0) & (k < z1) & body
            ct[m] = hu
            nib.save(nib.Nifti1Image(m.astype(np.uint8), aff), case / "segmentations" / f"{o}.nii.gz")
        ct = np.where(body, ct + rng.normal(0, 8, shape), ct)
        nib.save(nib.Nifti1Image(ct.astype(np.int16), aff), case / "ct.nii.gz")
    return root


@pytest.fixture
def atlas(tmp_path, monkeypatch):
    "The fixture under the data layer (NEURIPS25_DATA_ABDOMENATLAS), and a private cache for the runs' models."
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)
    root = write_bdmap(tmp_path / "abdomenatlas")
    monkeypatch.setenv(R.SOURCES["abdomenatlas"].env_var, str(root))
    return root


def test_fixture_reads_as_the_papers_volumes(atlas):
    "load_atlas: (z, y, x) volumes on the n x n grid, the spacing from the affine, 16 of the 18 group structures."
    vols = load_atlas(8, 0, n=24, n_slices=8)
    assert [v.name for v in vols] == [f"BDMAP_{k:08d}" for k in range(1, 9)]
    for v in vols:
        assert v.hu.shape == v.labels.shape == (8, 24, 24) and v.hu.dtype == np.float32 and v.hu.min() >= -1024
        np.testing.assert_allclose(v.spacing, (5.0, 26 * 2.6 / 24, 26 * 2.6 / 24), rtol=1e-6)   # the longer side / n
        assert groups_present(v.present) == GROUPS | {"small_organs": (8, 2, 5, 7), "vessels": (1, 9, 15, 19, 20)}
    sp = atlas_split(2, 2, 2)
    assert [v.name for v in load_atlas(*sp["test"][::-1], n=24)] == ["BDMAP_00000005", "BDMAP_00000006"]
    with pytest.raises(SourceError, match="needs 9 cases"):
        load_atlas(3, 6, n=24)


def test_runs_yaml_full_is_the_paper_scale():
    "Every P06 artefact's full profile reads abdomenatlas, at 512^2 and 50 views, on a GPU, with no thread pinning."
    arts = yaml.safe_load((SERIES / "runs.yaml").read_text())["artefacts"]
    for name, a in arts.items():
        full = a["full"]
        assert a["gpu"] is True and a["needs"] == {"full": ["abdomenatlas"]}, name
        assert full["threads"] == 0 and full["workers"] == 0 and full["tolerance_mm"] == 2.0, name
        assert a["small"].get("threads", 1) == 1 and a["medium"].get("threads", 1) == 1, name
    assert arts["tab_care"]["full"]["dataset"] == arts["fig_metrics_vs_views"]["full"]["dataset"] == "abdomenatlas"
    care, fig, geo = (arts[a]["full"] for a in ("tab_care", "fig_metrics_vs_views", "tab_geometries"))
    assert care["n"] == fig["n"] == geo["atlas_n"] == 512 and care["n_views"] == geo["views"] == 50
    assert care["geometry"] == "cone" and "cone" in geo["atlas_geometries"]
    assert (care["n_train"], care["n_test"]) == (25, 36)                                          # the paper's split
    assert care["amp"] and care["checkpoint_every"] > 0


def test_full_dry_run_names_the_data(monkeypatch, tmp_path, capsys):
    "`neurips25 reproduce p06 --profile full --dry-run` without the source: every artefact says it needs abdomenatlas."
    from neurips25.runner.cli import main
    monkeypatch.setenv("NEURIPS25_DATA", str(tmp_path / "nothing"))
    for s in R.SOURCES.values():
        monkeypatch.delenv(s.env_var, raising=False)
    rc = main(["--outputs", str(tmp_path / "out"), "reproduce", "p06", "--profile", "full", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0
    for art in ("fig_metrics_vs_views", "tab_care", "tab_geometries"):
        line = next(ln for ln in out.splitlines() if f"p06_care/{art} [full" in ln)
        assert "needs data: abdomenatlas (missing)" in line, line


# only sizes (and the worker count) are shrunk; everything else is the full profile's (dataset, geometry, amp, τ, ...)
SIZES = {
    "fig_metrics_vs_views": dict(n=24, n_phantoms=2, n_seeds=1, views="8,16", sart_iter=1, n_slices=8, workers=2),
    "tab_care": dict(n=24, n_train=2, n_test=2, n_seg=2, n_seeds=1, n_views=8, inr_steps=3, seg_steps=3, enh_steps=3,
                     enh_width=8, seg_width=8, n_slices=8, batch_size=4, checkpoint_every=2, inr_batch=4, workers=2,
                     sart_iter=1, asd_iter=1),
    "tab_geometries": dict(n=32, shape_z=4, n_volumes=1, n_seeds=1, views=8, head_slices=2, sart_iter=1, asd_iter=1,
                           seg_volumes=1, seg_steps=3, seg_dense_views=16, atlas_cases=2, atlas_seg_cases=1, atlas_n=24,
                           atlas_slices=8, seg_width=8, batch_size=4, checkpoint_every=2, workers=2),
}


def run_full_path(art: str, tmp_path: Path, extra: dict | None = None) -> tuple:
    "Papermill the artefact's notebook with its full parameters, sizes from SIZES (and `extra`), on the CPU."
    from neurips25.runner.executors import plan
    job = next(j for j in plan([f"p06/{art}"], profile="full", device="cpu", force=True, outputs=tmp_path / "o"))
    params = {**job.effective, **SIZES[art], **(extra or {})}
    out = tmp_path / "run"
    env = {**os.environ, "NEURIPS25_OUTPUT_DIR": str(out), "NEURIPS25_DEVICE": "cpu", "NEURIPS25_PROFILE": "full",
           "NEURIPS25_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1", "NEURIPS25_PROGRESS": "0"}
    args = [sys.executable, "-m", "papermill", str(job.art.notebook), str(tmp_path / "out.ipynb"), "-k", "python3",
            "--cwd", str(job.art.notebook.parent)]
    for k, v in params.items():
        args += ["-r", k, v] if isinstance(v, str) else ["-p", k, json.dumps(v)]
    t = time.time()
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    print(f"{art}: {time.time() - t:.0f} s")
    return r, out, params


def test_fig_metrics_vs_views_full_path(atlas, tmp_path):
    r, out, p = run_full_path("fig_metrics_vs_views", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert p["dataset"] == "abdomenatlas" and p["tolerance_mm"] == 2.0
    d = pd.read_csv(out / "per_case.csv")
    assert len(d) == 2 * 2 * 2 and set(d.method) == {"FBP", "SART"} and set(d.views) == {8, 16}
    g = d[["large_organs", "small_organs", "intestines", "vessels"]].to_numpy()
    assert np.isfinite(g).all() and (g >= 0).all() and (g <= 1).all() and np.isfinite(d.psnr).all()
    assert {c["id"] for c in json.loads((out / "claims.json").read_text())} >= {"psnr_vessel_rank_disagreement"}


def test_tab_care_full_path(atlas, tmp_path):
    r, out, p = run_full_path("tab_care", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert p["dataset"] == "abdomenatlas" and p["geometry"] == "cone" and p["amp"] is True
    d = pd.read_csv(out / "per_case.csv")
    cells = set(zip(d.method, d.arm))
    assert cells == {("GT", "GT")} | {(m, a) for m in ("FBP", "SART", "ASD-POCS", "INR") for a in ("raw", "L1", "CARE")}
    assert set(d.reference) == {"segmenter", "labels"} and len(d) == len(cells) * 2 * 2    # 2 test cases, 2 references
    gt = d[(d.method == "GT") & (d.reference == "segmenter")][["large_organs", "small_organs", "intestines", "vessels"]]
    assert np.all(gt.to_numpy()[np.isfinite(gt.to_numpy())] == 1.0)
    s = pd.read_csv(out / "structures.csv")
    missing = set(s[s.test_cases_with_mask == 0].structure)
    assert len(s) == 18 and missing == {"adrenal_gland_right", "renal_vein_right"}
    ck = [f.name for f in (tmp_path / "cache" / "p06_care_ckpt").glob("tab_care_*.pt")]
    assert len(ck) == 10 and sum(f.startswith("tab_care_seg_") for f in ck) == 2           # 2 segmenters, 8 enhancers
    claims = json.loads((out / "claims.json").read_text())
    assert {c["verdict"] for c in claims} == {"not comparable"}                                  # one seed: not judged


def test_tab_care_refuses_full_only_parameters_on_phantoms(tmp_path):
    r, _, _ = run_full_path("tab_care", tmp_path, dict(dataset="phantom", n=64, n_slices=64))
    assert r.returncode != 0 and "parameters of dataset='abdomenatlas' only" in r.stderr


def test_tab_geometries_full_path(atlas, tmp_path):
    from neurips25.care.volumes import HEAD_CT_PATH
    head = Path(HEAD_CT_PATH).exists()                                     # the Debian package (make data)
    r, out, p = run_full_path("tab_geometries", tmp_path, {} if head else dict(head_ct=False))
    assert r.returncode == 0, r.stderr[-3000:]
    d = pd.read_csv(out / "per_volume.csv")
    a = d[d.data == "abdomenatlas"]
    assert set(zip(a.geometry, a.method)) == {("none", "GT")} | {(g, m) for g in ("parallel", "cone")
                                                                for m in ("FBP", "SART", "ASD-POCS")}
    assert len(a) == 2 * 7 * 2 and set(a.reference) == {"segmenter", "labels"}
    assert np.isfinite(a[a.method != "GT"].psnr).all()
    c = {x["id"]: x for x in json.loads((out / "claims.json").read_text())}
    tie = c["classical_methods_tie_atlas"]
    assert tie["verdict"] == "not comparable" and "cone beam" in tie["ours"]
    assert len(list((tmp_path / "cache" / "p06_care_ckpt").glob("tab_geometries_seg_*.pt"))) == 1
