"""P05 at paper scale (issue 35, items 1-5): `full` on the data layer's MP-20 source, the cached score normaliser,
checkpoint/resume with per-module early stopping, bf16 autocast, and the throughput probe.

* The acceptance test: `--profile full --dry-run` plans the MP-20 run (the whole published splits, 10,000 samples,
  1,000 epochs with early stopping) and names the data it needs; and 15_tab_generation runs end to end through
  papermill with the `full` profile's parameters (tiny widths and row counts) on the data layer's MP-20 format fixture
  (tests/test_sources.py's crystal rows plus random symmetric crystals, written as train/val/test.csv) on the CPU:
  the validation split, early stopping, checkpoints, sampling, the metrics and the literature rows.
* The normaliser: a table read from core's cache equals a recomputed one and the numpy reference (the code before
  issue 35, copied here) to 1e-12, and a second run with the same key computes nothing (the old code recomputed).
* Training: an interrupted run resumes to the same parameters and history, bit for bit; the best weights of each
  module come back; bf16 autocast of the discrete modules runs on the CPU too."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from neurips25 import core
from neurips25.sources import registry as R

REPO = Path(__file__).resolve().parents[1]


def _rows(structs, offset=0):
    from pymatgen.io.cif import CifWriter
    from neurips25.sgequidiff.representation import spglib_quiet
    with spglib_quiet(): sg = [s.get_space_group_info(0.1)[1] for s in structs]   # pymatgen calls spglib
    return pd.DataFrame({"material_id": [f"mp-{offset + i}" for i in range(len(structs))],
                         "formation_energy_per_atom": np.linspace(-1, 0, len(structs)),
                         "pretty_formula": [s.composition.reduced_formula for s in structs],
                         "cif": [str(CifWriter(s)) for s in structs],
                         "spacegroup.number": sg})


def write_benchmark(root: Path, n_random: int = 9, seed: int = 0) -> Path:
    "train/val/test.csv in the CDVAE format: the data layer's fixture rows plus random symmetric crystals (per split)."
    from test_sources import crystal_rows                          # the data layer's MP-20 fixture (3 real-format rows)
    from neurips25.sgequidiff.model import synthetic_crystals
    base, _ = crystal_rows()
    root.mkdir(parents=True, exist_ok=True)
    for k, split in enumerate(("train", "val", "test")):
        extra = [c.to_structure() for c in synthetic_crystals(n_random, sgs=(12, 62, 139, 194, 225), seed=seed + k, max_sites=12)]
        _rows(base + extra, 100 * k).to_csv(root / f"{split}.csv")
    return root


@pytest.fixture
def mp20(tmp_path, monkeypatch):
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)
    root = write_benchmark(tmp_path / "mp_20")
    monkeypatch.setenv(R.SOURCES["mp_20"].env_var, str(root))
    return root


def tiny_config(**kw):
    from neurips25.sgequidiff.model import SGEquiDiffConfig
    base = dict(hidden=16, n_layers=1, gnn_hidden=16, gnn_layers=1, T=8, n_mc=16, n_grid=3, batch_size=4, lr=3e-3)
    return SGEquiDiffConfig(**{**base, **kw})


# ---------------------------------------------------------------- acceptance: the plan and the full path

def test_full_dry_run_plans_mp20_and_names_its_data(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURIPS25_DATA", str(tmp_path / "nodata"))          # no MP-20 here, whatever the machine has
    for k in [k for k in os.environ if k.startswith("NEURIPS25_DATA_")]:
        monkeypatch.delenv(k)
    env = {**os.environ, "NEURIPS25_PROGRESS": "0"}
    r = subprocess.run([sys.executable, "-m", "neurips25.runner.cli", "--outputs", str(tmp_path / "o"), "reproduce",
                        "p05/tab_generation", "p05/tab_likelihood", "--profile", "full", "--dry-run"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "p05_sgequidiff/tab_" in ln]
    assert len(lines) == 2 and all("needs data: mp_20 (missing)" in ln for ln in lines), r.stdout
    gen = json.loads(lines[0][lines[0].index("{"):lines[0].rindex("}") + 1])
    assert gen["dataset"] == "mp_20" and gen["mp20_source"] == "mp_20" and gen["n_crystals"] == 0   # the published splits
    assert (gen["n_gen"], gen["epochs"], gen["val_every"], gen["patience"], gen["lr_patience"]) == (10_000, 1000, -1, 100, 30)
    assert (gen["hidden"], gen["n_layers"], gen["gnn_hidden"], gen["gnn_layers"], gen["T"], gen["K"], gen["n_mc"]) == (256, 4, 256, 5, 1000, 3, 2500)
    assert gen["sigma_min"] == 0.002 and gen["amp"] == "auto" and gen["sample_batch"] == 500
    assert "neurips25 data where NAME" in r.stdout


TINY = dict(n_crystals=12, hidden=16, n_layers=1, gnn_hidden=16, gnn_layers=1, T=8, n_mc=16, n_grid=3, batch_size=4, epochs=3,
            patience=1, lr_patience=1, sample_batch=4, device="cpu")


def run_full(artefact: str, tmp_path: Path, **over) -> Path:
    "One P05 notebook through papermill with its full profile's parameters, TINY and `over` on top (CPU); its output folder."
    from neurips25.runner.executors import plan
    job = next(j for j in plan([f"p05/{artefact}"], profile="full", device="cpu", force=True, outputs=tmp_path / "o"))
    params = dict(job.effective)
    assert params["dataset"] == "mp_20" and params["val_every"] == -1 and params["n_crystals"] == 0
    params.update(TINY, **over)
    out = tmp_path / artefact
    env = {**os.environ, "NEURIPS25_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1", "NEURIPS25_PROGRESS": "0",
           "NEURIPS25_CACHE": "1", "NEURIPS25_CACHE_DIR": str(tmp_path / "cache"), "NEURIPS25_PROFILE": "full"}
    env.pop("IN_TEST", None)
    args = [sys.executable, "-m", "papermill", str(job.art.notebook), str(tmp_path / f"{artefact}.ipynb"), "-k", "python3",
            "--cwd", str(job.art.notebook.parent)]
    for k, v in params.items():
        args += ["-r", k, v] if isinstance(v, str) else ["-p", k, json.dumps(v)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def test_full_code_path_on_the_mp20_fixture(mp20, tmp_path):
    "15_tab_generation with the full profile's parameters at tiny sizes, through papermill, on the MP-20 fixture (CPU)."
    out = run_full("tab_generation", tmp_path, n_gen=4, n_seeds=1, probe_full=0)
    T = pd.read_csv(out / "generation_metrics.csv")
    assert {"SGEquiDiff", "plain (ablation)", "random coordinates", "matched random", "data"} <= set(T.method)
    lit = T[T.method.isin(["CDVAE (literature)", "DiffCSP (literature)", "SGEquiDiff (paper)"])]
    assert len(lit) == 3 and lit.source.str.startswith("paper (mp_20").all()
    ours = T[T.method == "SGEquiDiff"].iloc[0]
    assert "mp_20 (" in ours.source and "validation" in ours.source           # the validation split was read
    P = pd.read_csv(out / "generation_metrics_per_seed.csv")
    assert set(P.n) == {4} and P.validity.between(0, 1).all()
    tp = pd.read_csv(out / "throughput.csv")
    assert (tp.rate > 0).all() and tp.stage.str.startswith("sampling").sum() == 2
    ck = list((tmp_path / "cache" / "p05_sgequidiff_coords").glob("*.pt"))
    assert len(ck) == 2                                                        # both arms checkpointed
    st = torch.load(ck[0], map_location="cpu", weights_only=False)
    assert st["history"]["val"] and "stopping" in st                           # validations ran, early-stopping state saved
    claims = {c["id"]: c for c in json.loads((out / "claims.json").read_text())}
    assert claims["sota_mp20"]["verdict"] == "not comparable"
    lik = run_full("tab_likelihood", tmp_path, n_eval=5, ode_steps=2, lik_batch=2)     # the likelihood in sorted batches
    L = pd.read_csv(lik / "loglik_per_crystal.csv")
    assert len(L) == 5 and np.isfinite(L["SGEquiDiff (trained)"]).all()
    assert (pd.read_csv(lik / "throughput.csv").rate > 0).all()


def test_benchmark_splits_through_the_data_layer(mp20, tmp_path, monkeypatch):
    from neurips25.sgequidiff.model import load_training_data, SGEquiDiffConfig
    D = load_training_data("mp_20", 12, cfg=SGEquiDiffConfig(max_sites=None), mp20_source="mp_20")
    assert len(D["train"]) + D["refused"] == 12 and len(D["train"]) >= 9 and len(D["val"]) >= 9 and len(D["test_structs"]) == 12
    from neurips25.sources.registry import SourceError
    with pytest.raises(SourceError, match="train.csv: 12 rows, expected 27136"):           # whole splits: counts checked
        load_training_data("mp_20", 0, cfg=SGEquiDiffConfig(max_sites=None), mp20_source="mp_20")
    root = write_benchmark(tmp_path / "mpts_52", n_random=3)                                 # MPTS-52 the same way
    monkeypatch.setenv(R.SOURCES["mpts_52"].env_var, str(root))
    D = load_training_data("mpts_52", 6, cfg=SGEquiDiffConfig(dataset="mpts_52", max_atoms=52, max_sites=None),
                           mp20_source="mpts_52")
    assert len(D["val"]) >= 5 and D["source"].startswith(f"mpts_52 ({len(D['train'])} train crystals, {len(D['val'])} validation")


# ---------------------------------------------------------------- the score normaliser: one cached table per key

def _old_compute(sg, w, plain, grid, n_mc, K, seed, metric):
    "ScoreNorm._compute as it was before issue 35 (numpy; recomputed by every run)."
    from neurips25.sgequidiff.symmetry import (space_group, apply_ops, wrapped_normal, metric_projector, noise_factor,
                                               metric_norm, invariant_metric)
    G = space_group(sg); wp = G.wyckoffs[w]; M = invariant_metric(sg) if metric == "invariant" else None
    if wp.dof == 0 and not plain: return np.ones(len(grid))
    rng = np.random.default_rng([seed, sg, w, int(plain)])
    C = noise_factor(None if plain else wp, M); Pm = np.eye(3) if plain else metric_projector(wp, M)
    vals = []
    for s in grid:
        x0 = wp.point(rng.random((n_mc, wp.dof)))
        xt = x0 + s * rng.standard_normal((n_mc, 3)) @ C.T
        vals.append(metric_norm(wrapped_normal(xt, apply_ops(G, x0), s, K, M, tangent=True)[1] @ Pm.T, M).mean())
    return np.array(vals)


def close_to_reference(got, ref, grid):
    "Torch vs the numpy reference: 1e-12 relative, plus 1e-15/sigma absolute (the score's terms are O(1/sigma); where they\n    nearly cancel, e.g. s_bar ~ 3e-6 at sigma 0.5 for a 0-D site of the ablation, the summation order shows at ~1e-12)."
    return bool((np.abs(got - ref) <= 1e-12 * np.abs(ref) + 1e-15 / np.asarray(grid)).all())


KEYS = [(225, 11, False), (194, 11, False), (194, 9, False), (166, 7, True), (139, 14, True), (62, 3, False), (221, 0, True)]


def test_cached_normaliser_equals_recomputed_and_the_old_code(tmp_path, monkeypatch):
    from neurips25.sgequidiff import score_norm as S
    from neurips25.sgequidiff.coord_diffusion import ScoreNorm
    monkeypatch.setattr(core, "CACHE_PATH", tmp_path); monkeypatch.setenv("NEURIPS25_CACHE", "1")
    for K in (1, 3):
        a = ScoreNorm(0.005, 0.5, n_grid=4, n_mc=48, K=K)
        for sg, w, plain in KEYS:
            ref = _old_compute(sg, w, plain, a.grid, 48, K, 0, "invariant")
            assert np.array_equal(S.score_norm_reference(sg, w, plain, a.grid, 48, K), ref)     # the reference is the old code
            got = a(np.array([sg]), np.array([w]), a.grid[:1], plain)
            tab = a.table[(sg, w, plain)]
            assert np.array_equal(tab, S.score_norm_values(sg, w, plain, a.grid, 48, K))       # cached == recomputed
            assert close_to_reference(tab, ref, a.grid), (sg, w, plain, K, tab / ref - 1)    # torch vs numpy
            assert got[0] == pytest.approx(tab[0], rel=1e-15)
    n_files = len(list((tmp_path / S.NORM_CACHE).glob("*.pkl")))
    assert n_files == 2 * len(KEYS)
    calls = []
    monkeypatch.setattr(S, "score_norm_values", lambda *a, **k: calls.append(a) or np.zeros(4))   # a recompute would show
    for K in (1, 3):                                               # a second run (another seed, another arm): reads only
        b = ScoreNorm(0.005, 0.5, n_grid=4, n_mc=48, K=K)
        for sg, w, plain in KEYS:
            b.prefill(np.array([sg]), np.array([w]), plain)
            assert close_to_reference(b.table[(sg, w, plain)], _old_compute(sg, w, plain, b.grid, 48, K, 0, "invariant"), b.grid)
    assert not calls
    c = ScoreNorm(0.005, 0.5, n_grid=4, n_mc=49, K=1)              # another key (n_mc): computed, not read
    c.prefill(np.array([62]), np.array([3]))
    assert len(calls) == 1


def test_normaliser_pruning_is_exact_at_the_papers_K():
    from neurips25.sgequidiff.score_norm import score_norm_values, score_norm_reference, pruned_images
    grid = np.geomspace(0.002, 0.5, 6)
    assert [len(pruned_images(3, s)) for s in grid] == sorted(len(pruned_images(3, s)) for s in grid)
    assert len(pruned_images(3, 0.002)) == 27 and len(pruned_images(3, 0.5)) == 343
    for sg, w in ((229, 10), (191, 17), (14, 4)):
        ref = score_norm_reference(sg, w, False, grid, 40, 3)
        assert close_to_reference(score_norm_values(sg, w, False, grid, 40, 3), ref, grid), (sg, w)


# ---------------------------------------------------------------- training: early stopping, resume, bf16

def _split(n=24, seed=3):
    from neurips25.sgequidiff.model import synthetic_crystals, encode_crystals
    cfg = tiny_config()
    crys = synthetic_crystals(n, sgs=(12, 139, 225), seed=seed, max_sites=12)
    data, _ = encode_crystals(crys, cfg)
    return data.subset(np.arange(0, len(data) - 8)), data.subset(np.arange(len(data) - 8, len(data)))


def same(a, b) -> bool:
    "Bitwise equal tensors, NaN where NaN (the lattice sampler's buffers hold NaN for free parameters)."
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all()) if a.is_floating_point() else torch.equal(a, b)


def _interrupting(after):
    "A stand-in for core.progress that stops the loop (as a crash would) after `after` steps."
    def prog(it, **kw):
        for k, x in enumerate(it):
            if k == after: raise KeyboardInterrupt("interrupted on purpose")
            yield x
    return prog


def test_interrupted_training_resumes_bit_for_bit(tmp_path, monkeypatch):
    from neurips25.sgequidiff import model as Mo
    train, val = _split()
    cfg = tiny_config(steps_discrete=24, steps_coords=16, ckpt_every=4, val_every=4, patience=2, lr_patience=1, lr=0.05)
    monkeypatch.setenv("NEURIPS25_CACHE", "1")
    monkeypatch.setattr(Mo, "CACHE_PATH", tmp_path / "a")
    ref_d, hd = Mo.fit_discrete(train, cfg, seed=0, device="cpu", val=val)
    ref_c, _, hc = Mo.fit_coords(train, cfg, seed=0, device="cpu", val=val)
    monkeypatch.setattr(Mo, "CACHE_PATH", tmp_path / "b")
    monkeypatch.setattr(Mo, "progress", _interrupting(10))
    with pytest.raises(KeyboardInterrupt):
        Mo.fit_discrete(train, cfg, seed=0, device="cpu", val=val)
    with pytest.raises(KeyboardInterrupt):
        Mo.fit_coords(train, cfg, seed=0, device="cpu", val=val)
    monkeypatch.setattr(Mo, "progress", core.progress)
    got_d, hd2 = Mo.fit_discrete(train, cfg, seed=0, device="cpu", val=val)
    got_c, _, hc2 = Mo.fit_coords(train, cfg, seed=0, device="cpu", val=val)
    for k in ref_d:
        for (n, a), b in zip(ref_d[k].state_dict().items(), got_d[k].state_dict().values()):
            assert same(a, b), (k, n)
    assert all(same(a, b) for a, b in zip(ref_c.state_dict().values(), got_c.state_dict().values()))
    strip = lambda h: {k: v for k, v in h.items() if k != "time_s"}
    assert strip(hd) == strip(hd2) and strip(hc) == strip(hc2)
    assert hd["val"] and hd["stopped"], hd.get("stopped")                     # early stopping happened (lr 0.05, patience 2)
    for k in hd["stopped"]:                                                    # a stopped module trained no further
        assert len(hd[k]) <= hd["stopped"][k]


def test_best_weights_of_each_module_come_back(tmp_path, monkeypatch):
    from neurips25.sgequidiff import model as Mo
    train, val = _split()
    cfg = tiny_config(steps_discrete=20, val_every=2, lr=0.05)                 # validation without stopping
    monkeypatch.setenv("NEURIPS25_CACHE", "0")
    mods, h = Mo.fit_discrete(train, cfg, seed=1, device="cpu", val=val)
    now = Mo._discrete_val_loss(mods, Mo._need_val(val, train), 1)
    for k in ("sg", "lattice", "wyckoff"):
        best = min(v[k] for v in h["val"])
        assert now[k] == pytest.approx(best, rel=1e-6), (k, now[k], best)
        assert h["best_step"][k] == [v["step"] for v in h["val"] if v[k] == best][0]
    with pytest.raises(ValueError, match="needs a validation set"):
        Mo.fit_discrete(train, cfg, device="cpu")
    with pytest.raises(ValueError, match="needs a validation set"):
        Mo.fit_coords(train, cfg, device="cpu")


def test_config_checks_and_epochs():
    from neurips25.sgequidiff.model import SGEquiDiffConfig, full_config, fit_discrete, resolve_amp
    train, val = _split()
    for bad, msg in ((dict(amp="fp8"), "amp must be one of"), (dict(val_every=-2), "val_every must be an integer >= -1"),
                     (dict(patience=3), "set val_every > 0"), (dict(epochs=-1), "epochs must be an integer >= 0"),
                     (dict(sample_batch=0), "sample_batch must be an integer >= 1"), (dict(lr_factor=1.5), "lr_factor")):
        with pytest.raises(ValueError, match=msg):
            fit_discrete(train, tiny_config(**bad), device="cpu", val=val)
    f = full_config()
    assert (f.T, f.sigma_min, f.K, f.n_mc, f.hidden, f.n_layers, f.gnn_hidden, f.gnn_layers) == (1000, 0.002, 3, 2500, 256, 4, 256, 5)
    r = f.for_data(27136)
    assert (r.steps_discrete, r.steps_coords, r.val_every) == (848_000, 848_000, 848)
    assert full_config("mpts_52").max_atoms == 52
    assert resolve_amp("auto", "cpu") is False and resolve_amp("auto", "cuda") is True and resolve_amp("bf16", "cpu") is True


def test_bf16_autocast_of_the_discrete_modules_runs(monkeypatch):
    from neurips25.sgequidiff import model as Mo
    train, _ = _split()
    monkeypatch.setenv("NEURIPS25_CACHE", "0")
    cfg = tiny_config(steps_discrete=6, amp="bf16")
    mods, h = Mo.fit_discrete(train, cfg, seed=0, device="cpu")
    assert all(np.isfinite(h[k]).all() and len(h[k]) == 6 for k in ("sg", "lattice", "wyckoff"))
    ref, h0 = Mo.fit_discrete(train, tiny_config(steps_discrete=6), seed=0, device="cpu")
    assert h0["wyckoff"][0] == pytest.approx(h["wyckoff"][0], rel=0.05) and h0["wyckoff"][0] != h["wyckoff"][0]
    assert all(p.dtype == torch.float32 for m in mods.values() for p in m.parameters())     # weights stay float32


def test_sampling_batch_and_throughput_probe(monkeypatch):
    from neurips25.sgequidiff.model import train_sgequidiff
    from neurips25.sgequidiff.scale import probe_throughput, project_full
    train, _ = _split()
    if "NEURIPS25_CACHE" not in os.environ: monkeypatch.setenv("NEURIPS25_CACHE", "0")   # this test only
    cfg = tiny_config(steps_discrete=4, steps_coords=4, sample_batch=3)
    m = train_sgequidiff(train, cfg, device="cpu")
    a = m.sample(5, seed=2); b = m.sample(5, seed=2, batch_size=3)
    assert [s.coords.tolist() for s in a] == [s.coords.tolist() for s in b]   # default batch = cfg.sample_batch
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        m.sample(2, batch_size=0)
    u = probe_throughput(cfg, train, "cpu", n_steps=1, n_sample=3, sample_levels=1, n_lik=1, norm_mc=8)
    P = project_full(u)
    assert P.projected_s.iloc[-1] > 0 and P.artefact.iloc[-1] == "series total"
