"""P07's `full` (issue 32): the paper's data through the data layer, end to end on format fixtures at tiny sizes (CPU).

* the UCI obesity table (source `uci_obesity`, `load_obesity`) through `load_tabular("obesity")` and
  10_fig_ar_tabular (papermill, profile full, datasets="obesity");
* CIFAR-10 (source `cifar10`) through `cifar_ensemble` (ten ResNet-20s at full; two for one epoch here) and
  12_fig_ar_images (papermill, dataset="cifar10"), with its checkpoints resumed by a second run;
* CIFAR-100 (source `cifar100`) through 11_fig_ar_many_class (papermill, dataset="cifar100");
* `neurips25 reproduce p07 p12 --profile full --dry-run` names the missing data of both series.
The fixtures have the published layouts; their md5s replace the published ones (a fixture cannot match those), and
the split-size check is switched off (`check_count=False`), the only concession to their size."""
import dataclasses
import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neurips25.iipm import paper as P
from neurips25.iipm.selective import load_tabular, obesity_features, tabular_run
from neurips25.sources import loaders as L
from neurips25.sources import registry as R

REPO = Path(__file__).resolve().parents[1]
N_BATCH = 60                                   # images per CIFAR-10 batch file (6 per class)


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _publish(monkeypatch, name: str, root: Path):
    "Point source `name` at `root` and replace its published md5s by the fixture's."
    monkeypatch.setenv(R.SOURCES[name].env_var, str(root))
    s = R.SOURCES[name]
    files = tuple(dataclasses.replace(f, md5=_md5(root / f.path)) if f.md5 else f for f in s.files)
    monkeypatch.setitem(R.SOURCES, name, dataclasses.replace(s, files=files))


def _images(rng, y, n_classes):
    "Class-coloured 32x32 images: the class shifts the mean intensity of one channel."
    img = rng.integers(0, 90, (len(y), 3, 32, 32))
    img[np.arange(len(y)), y % 3] += (150 * y / max(n_classes - 1, 1)).astype(int)[:, None, None]
    return np.clip(img, 0, 255).astype(np.uint8).reshape(len(y), -1)


def write_cifar10(root: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for b in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        y = rng.permutation(np.arange(N_BATCH) % 10)
        d = {b"batch_label": b"fixture", b"labels": y.tolist(), b"data": _images(rng, y, 10),
             b"filenames": [f"{i}.png".encode() for i in range(N_BATCH)]}
        (folder / b).write_bytes(pickle.dumps(d, protocol=2))
    names = [c.encode() for c in "airplane automobile bird cat deer dog frog horse ship truck".split()]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}, protocol=2))
    return root


def write_cifar100(root: Path, n_train: int = 400, n_test: int = 100, seed: int = 1) -> Path:
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.permutation(np.arange(n) % 100)
        d = {b"filenames": [f"{i}.png".encode() for i in range(n)], b"batch_label": b"fixture",
             b"fine_labels": y.tolist(), b"coarse_labels": (y // 5).tolist(), b"data": _images(rng, y, 100)}
        (folder / split).write_bytes(pickle.dumps(d, protocol=2))
    meta = {b"fine_label_names": [f"class_{i}".encode() for i in range(100)],
            b"coarse_label_names": [f"super_{i}".encode() for i in range(20)]}
    (folder / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    return root


def write_obesity(path: Path, n: int = 2111, seed: int = 0):
    "The UCI table's 17 columns with its value types; the class follows BMI, so the forests have something to learn."
    rng = np.random.default_rng(seed)
    h = rng.uniform(1.45, 1.98, n)
    bmi = rng.uniform(16, 45, n)
    cls = np.digitize(bmi, [18.5, 25, 27.5, 30, 35, 40])           # the 7 NObeyesdad classes, in order
    yn = lambda: rng.choice(["yes", "no"], n)                        # noqa: E731
    freq = lambda: rng.choice(["no", "Sometimes", "Frequently", "Always"], n)   # noqa: E731
    df = pd.DataFrame({"Gender": rng.choice(["Female", "Male"], n), "Age": rng.uniform(14, 61, n).round(1),
                       "Height": h.round(2), "Weight": (bmi * h ** 2).round(1),
                       "family_history_with_overweight": yn(), "FAVC": yn(), "FCVC": rng.uniform(1, 3, n).round(2),
                       "NCP": rng.uniform(1, 4, n).round(2), "CAEC": freq(), "SMOKE": yn(),
                       "CH2O": rng.uniform(1, 3, n).round(2), "SCC": yn(), "FAF": rng.uniform(0, 3, n).round(2),
                       "TUE": rng.uniform(0, 2, n).round(2), "CALC": freq(),
                       "MTRANS": rng.choice(["Public_Transportation", "Walking", "Automobile", "Motorbike", "Bike"], n),
                       "NObeyesdad": np.asarray(L.OBESITY_CLASSES)[cls]})
    assert list(df.columns) == L.OBESITY_COLUMNS
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)


@pytest.fixture
def data(tmp_path, monkeypatch):
    "The three P07 sources as format fixtures under tmp_path (the environment names each root)."
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)
    write_obesity(tmp_path / "uci_obesity" / "ObesityDataSet_raw_and_data_sinthetic.csv")
    monkeypatch.setenv(R.SOURCES["uci_obesity"].env_var, str(tmp_path / "uci_obesity"))
    _publish(monkeypatch, "cifar10", write_cifar10(tmp_path / "cifar10"))
    _publish(monkeypatch, "cifar100", write_cifar100(tmp_path / "cifar100"))
    return tmp_path


SITECUSTOMIZE = """
import json, os, dataclasses
_md5 = json.loads(os.environ.get("NEURIPS25_TEST_FIXTURE_MD5", "{}"))
if _md5:                                          # the test's fixtures: their md5s replace the published ones
    from neurips25.sources import registry as _R
    for _name, _files in _md5.items():
        _s = _R.SOURCES[_name]
        _R.SOURCES[_name] = dataclasses.replace(_s, files=tuple(
            dataclasses.replace(f, md5=_files[f.path]) if f.path in _files else f for f in _s.files))
"""


def _papermill(nb: str, params: dict, out: Path, tmp_path: Path):
    """Run a P07 figure notebook at the full profile with `params` injected; its claims. The kernel is another process,
    so the fixtures' md5s reach it through a sitecustomize module on PYTHONPATH (the same replacement as `_publish`)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    md5 = {n: {f.path: f.md5 for f in R.SOURCES[n].files if f.md5} for n in ("cifar10", "cifar100")}
    env = {**os.environ, "NEURIPS25_OUTPUT_DIR": str(out), "NEURIPS25_PROFILE": "full", "NEURIPS25_CACHE": "0",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NEURIPS25_DEVICE": "cpu", "NEURIPS25_PROGRESS": "0",
           "NEURIPS25_TEST_FIXTURE_MD5": json.dumps(md5),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    path = REPO / "nbs" / "p07_iipm" / nb
    args = [sys.executable, "-m", "papermill", str(path), str(tmp_path / f"out_{nb}"), "-k", "python3",
            "--cwd", str(path.parent)]
    for k, v in params.items():
        args += ["-r", k, v] if isinstance(v, str) else ["-p", k, str(v) if isinstance(v, bool) else json.dumps(v)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return {c["id"]: c for c in json.loads((out / "claims.json").read_text())}


def _full_params(art: str, tmp_path: Path) -> dict:
    "The full profile's parameters of a P07 artefact, as the runner plans them (the data are present: no needs)."
    from neurips25.runner.executors import plan
    job = next(j for j in plan([f"p07/{art}"], profile="full", device="cpu", force=True, outputs=tmp_path / "plan"))
    assert job.needs == [], job.needs
    return job.effective


def test_obesity_through_the_data_layer(data):
    X, y, K = load_tabular("obesity")
    assert K == 7 and X.shape[0] == 2111 and set(np.unique(y)) <= set(range(7))
    df = L.load_obesity()
    Xo, yo, names = obesity_features(df)
    np.testing.assert_array_equal(X, Xo)
    assert names[:8] == ["Age", "Height", "Weight", "FCVC", "NCP", "CH2O", "FAF", "TUE"]
    assert sum(n.startswith("MTRANS_") for n in names) == 5 and X.shape[1] == 8 + 2 + 2 + 2 + 4 + 2 + 2 + 4 + 5
    runs = tabular_run("obesity", n_splits=2, n_members=3, trees_range=(5, 10), names=("mmi", "mmi_lin"))
    assert [r["K"] for r in runs] == [7, 7] and all(r["accuracy"] > 0.35 for r in runs)  # BMI classes: majority 0.22
    bad = df.copy()
    bad.loc[3, "Age"] = np.nan
    with pytest.raises(ValueError, match="missing values in \\['Age'\\]"):
        obesity_features(bad)


def test_fig_ar_tabular_full_on_the_obesity_fixture(data, tmp_path):
    eff = _full_params("fig_ar_tabular", tmp_path)
    assert eff["datasets"] == "obesity,digits" and eff["n_splits"] == 10 and eff["n_members"] == 10
    claims = _papermill("10_fig_ar_tabular.ipynb", dict(datasets="obesity", depth_ranges="2-12", n_splits=2,
                                                        n_members=3, trees_min=5, trees_max=8), tmp_path / "o10",
                        tmp_path)
    assert set(claims) == {"mmi_close_gh", "mmi_beats_ediff", "mmi_beats_random"}
    assert all(c["verdict"] == "not comparable" for c in claims.values())         # 2 splits < 5
    auc = pd.read_csv(tmp_path / "o10" / "auc.csv")
    assert set(auc.dataset) == {"obesity"} and auc.n_runs.eq(2).all()


def test_cifar10_ensemble_and_resume(data, tmp_path):
    ck = tmp_path / "ck"
    ens = P.cifar_ensemble("cifar10", n_members=2, epochs=1, batch_size=64, check_count=False, checkpoint_dir=ck,
                           device="cpu")
    assert ens["probs"].shape == (N_BATCH, 2, 10) and ens["n_train"] == 5 * N_BATCH and ens["K"] == 10
    np.testing.assert_allclose(ens["probs"].sum(-1), 1, atol=1e-9)
    assert sorted(p.name for p in ck.glob("*.pt")) == ["cifar10_resnet20_m0_s0.pt", "cifar10_resnet20_m1_s1.pt"]
    again = P.cifar_ensemble("cifar10", n_members=2, epochs=1, batch_size=64, check_count=False, checkpoint_dir=ck,
                             device="cpu")
    assert again["members"].resumed.all() and (again["members"].epochs == 1).all()
    np.testing.assert_allclose(again["probs"], ens["probs"], atol=1e-6)
    with pytest.raises(R.SourceError, match="the train split has 300 images, expected 50000"):
        P.cifar_ensemble("cifar10", n_members=1, epochs=1)                 # the published size is checked by default


def test_fig_ar_images_full_on_the_cifar10_fixture(data, tmp_path):
    eff = _full_params("fig_ar_images", tmp_path)
    assert (eff["dataset"], eff["n_members"], eff["epochs"], eff["batch_size"], eff["n_buckets"], eff["n_seeds"]) == \
        ("cifar10", 10, 200, 256, 10, 3)
    claims = _papermill("12_fig_ar_images.ipynb", dict(dataset="cifar10", n_members=2, epochs=1, batch_size=64,
                                                       n_buckets=5, n_seeds=3, check_count=False,
                                                       checkpoint_dir=str(tmp_path / "ck")), tmp_path / "o12", tmp_path)
    assert set(claims) == {"mmi_close_gh_cifar10", "mmi_beats_ediff_cifar10", "mmi_beats_random_cifar10"}
    members = pd.read_csv(tmp_path / "o12" / "members.csv")
    assert members.groupby("ensemble").size().to_dict() == {0: 2, 1: 2, 2: 2}
    acc = members.groupby("ensemble").centroid_test_accuracy.first().min()     # the gate reads the weakest ensemble
    for c in claims.values():                         # 3 ensembles x 5 buckets: judged unless the quality gate fails
        assert c["values"]["centroid_accuracy"] == pytest.approx(acc)
        assert (c["verdict"] == "not comparable") == (acc < 0.85), c
        assert c["seeds"] == [0, 1, 2]
    assert sorted(p.name for p in (tmp_path / "ck").glob("cifar10_resnet20_*.pt")) == sorted(
        f"cifar10_resnet20_m{j}_s{1000 * s + j}.pt" for s in range(3) for j in range(2))
    auc = pd.read_csv(tmp_path / "o12" / "auc.csv")
    assert set(auc.key) >= {"mmi", "mmi_lin", "gh", "ediff", "random", "oracle"} and auc.n_runs.eq(15).all()
    per = pd.read_csv(tmp_path / "o12" / "auc_per_ensemble.csv")
    assert sorted(set(per.ensemble)) == [0, 1, 2] and per.n_runs.eq(5).all()


def test_fig_ar_many_class_full_on_the_cifar100_fixture(data, tmp_path):
    eff = _full_params("fig_ar_many_class", tmp_path)
    assert (eff["dataset"], eff["n_members"], eff["epochs"], eff["n_buckets"]) == ("cifar100", 10, 200, 10)
    claims = _papermill("11_fig_ar_many_class.ipynb", dict(dataset="cifar100", n_members=2, epochs=1, batch_size=100,
                                                           n_buckets=2, check_count=False,
                                                           checkpoint_dir=str(tmp_path / "ck")), tmp_path / "o11",
                        tmp_path)
    assert set(claims) == {"mmilin_beats_ediff_cifar100", "mmilin_beats_random_cifar100"}
    assert all(c["verdict"] == "not comparable" for c in claims.values())         # 2 buckets < 5
    auc = pd.read_csv(tmp_path / "o11" / "auc.csv")
    assert set(auc.key) == {"mmi", "mmi_lin", "ediff", "mi", "random", "oracle"} and set(auc.K) == {100}


def test_full_dry_run_names_the_missing_data(monkeypatch, tmp_path, capsys):
    "`neurips25 reproduce p07 p12 --profile full --dry-run` without data: every artefact that needs a source says so."
    from neurips25.runner.cli import main
    monkeypatch.setenv("NEURIPS25_DATA", str(tmp_path / "nothing"))
    for s in R.SOURCES.values():
        monkeypatch.delenv(s.env_var, raising=False)
    rc = main(["--outputs", str(tmp_path / "out"), "reproduce", "p07", "p12", "--profile", "full", "--device", "cpu",
               "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0, out
    want = {"p07_iipm/fig_ar_tabular": ["uci_obesity"], "p07_iipm/fig_ar_many_class": ["cifar100"],
            "p07_iipm/fig_ar_images": ["cifar10"], "p12_fedfact/tab_table2": ["celeba", "enem"],
            "p12_fedfact/fig_multiclass": ["celeba", "enem"]}
    for art, names in want.items():
        line = next(ln for ln in out.splitlines() if f" {art} [full" in ln)
        for n in names:
            assert f"needs data: {n} (missing)" in line, line
    for art in ("p07_iipm/fig_runtime", "p07_iipm/fig_scatter", "p12_fedfact/fig_tradeoff"):
        line = next(ln for ln in out.splitlines() if f" {art} [full" in ln)
        assert "needs data" not in line, line
