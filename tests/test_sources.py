"""The external-source layer (issue 34): for every registered source a fixture in its exact on-disk format, written
here; a load round trip, a checksum mismatch, a missing file and a wrong shape or columns, each a clear error naming
the file. Offline and fast: nothing is downloaded."""
import dataclasses
import gzip
import hashlib
import io
import json
import os
import pickle
import tarfile

import numpy as np
import pandas as pd
import pytest

from neurips25 import core
from neurips25.sources import loaders as L
from neurips25.sources import registry as R
from neurips25.sources.registry import SourceError
from neurips25.sources.safety import load_checkpoint, safe_extract, safe_unpickle


def md5(p):
    return hashlib.md5(p.read_bytes()).hexdigest()


@pytest.fixture
def source(tmp_path, monkeypatch):
    """Point a source at a temporary root: `source(name)` -> root. `publish(name)` then replaces the published md5s by
    those of the fixture's files (the fixture cannot match the real ones), so the md5 path itself is exercised."""
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)

    def make(name):
        root = tmp_path / name
        root.mkdir(exist_ok=True)
        monkeypatch.setenv(R.SOURCES[name].env_var, str(root))
        return root

    def publish(name):
        s, root = R.SOURCES[name], R.source_root(name)
        files = tuple(dataclasses.replace(f, md5=md5(root / f.path)) if f.md5 else f for f in s.files)
        monkeypatch.setitem(R.SOURCES, name, dataclasses.replace(s, files=files))
    make.publish = publish
    return make


def corrupt(p):
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))


# ---------------------------------------------------------------- the registry

def test_registry_has_every_source_of_the_issue():
    need = {"cifar10", "cifar100", "eurosat", "celeba", "enem", "uci_obesity", "google_cluster_trace", "mp_20",
            "perov_5", "carbon_24", "mpts_52", "abdomenatlas", "tofu", "muse_news", "muse_books", "pile", "afhq",
            "llama32_1b_instruct", "sd_vae_ft_mse"}
    assert need <= set(R.SOURCES) and len(R.SOURCES) >= 14
    for s in R.SOURCES.values():
        assert s.papers and s.licence and s.url.startswith("http") and s.files and s.loader, s.name
        assert hasattr(L, s.loader), s.loader
    # the distributors' published checksums (torchvision's values)
    assert R.SOURCES["cifar10"].archives[0].md5 == "c58f30108f718f92721af3b95e74349a"
    assert R.SOURCES["cifar100"].archives[0].md5 == "eb9058c3a382ffc7106e4002c42a8d85"


def test_roots_and_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)
    monkeypatch.delenv("NEURIPS25_DATA_TOFU", raising=False)
    assert R.source_root("tofu") == core.DATA_PATH / "external" / "tofu"
    monkeypatch.setenv("NEURIPS25_DATA", str(tmp_path))
    assert R.source_root("tofu") == tmp_path / "tofu"
    monkeypatch.setenv("NEURIPS25_DATA_TOFU", str(tmp_path / "mine"))
    assert R.source_root("tofu") == tmp_path / "mine"
    assert R.SOURCES["llama32_1b_instruct"].env_var == "NEURIPS25_DATA_LLAMA32_1B_INSTRUCT"


def test_fresh_clone_lists_everything_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURIPS25_DATA", str(tmp_path))
    for s in R.SOURCES.values():
        monkeypatch.delenv(s.env_var, raising=False)
    assert {R.status(n) for n in R.SOURCES} == {"missing"}


def test_verification_is_cached_by_size_and_mtime(source, monkeypatch):
    root = source("uci_obesity")
    f = root / "ObesityDataSet_raw_and_data_sinthetic.csv"
    write_obesity(f)
    R.pin("uci_obesity")
    calls = []
    real = R._hash
    monkeypatch.setattr(R, "_hash", lambda p, algo, **k: calls.append(p.name) or real(p, algo, **k))
    assert R.verify("uci_obesity")["status"] == "verified" and len(calls) == 1
    assert R.verify("uci_obesity")["status"] == "verified" and len(calls) == 1     # cached: no re-hash
    assert R.status("uci_obesity") == "verified"
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))            # touched: hashed again
    assert R.status("uci_obesity") == "unverified"
    R.verify("uci_obesity")
    assert len(calls) == 2


def test_readme_table_is_the_registry():
    text = (core.REPO_ROOT / "data" / "README.md").read_text()
    block = text.split(R.README_START, 1)[1].split(R.README_END, 1)[0].strip()
    assert block == R.readme_table(), "data/README.md is stale: run `python -m neurips25.sources.registry`"


# ---------------------------------------------------------------- untrusted input

class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/neurips25_evil_ran",))


def test_restricted_unpickler_refuses_code(tmp_path):
    p = tmp_path / "data_batch_1"
    p.write_bytes(pickle.dumps({b"data": Evil(), b"labels": [0]}, protocol=2))
    with pytest.raises(SourceError, match=r"data_batch_1: not loaded: refused global posix\.system"):
        safe_unpickle(p)
    assert not os.path.exists("/tmp/neurips25_evil_ran")
    p.write_bytes(pickle.dumps({b"x": dataclasses.field}))      # any other global: refused too
    with pytest.raises(SourceError, match="refused global dataclasses.field"):
        safe_unpickle(p)
    p.write_bytes(pickle.dumps({b"data": np.zeros((2, 3), np.uint8)}, protocol=2)[:-5])
    with pytest.raises(SourceError, match="data_batch_1: not a readable pickle"):
        safe_unpickle(p)


@pytest.mark.parametrize("member,kind,why", [("../up.txt", "file", "escapes the target"),
                                             ("/abs.txt", "file", "an absolute path"),
                                             ("a/link", "sym", "a link"), ("a/hard", "hard", "a link")])
def test_archives_cannot_write_outside(tmp_path, member, kind, why):
    arc = tmp_path / "x.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        ti = tarfile.TarInfo(member)
        if kind == "sym":
            ti.type, ti.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "hard":
            ti.type, ti.linkname = tarfile.LNKTYPE, "/etc/passwd"
        data = b"x" if kind == "file" else b""
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    with pytest.raises(SourceError, match=why):
        safe_extract(arc, tmp_path / "dest")
    assert not (tmp_path / "up.txt").exists() and not list((tmp_path / "dest").rglob("*"))


def test_zip_symlink_refused(tmp_path):
    import zipfile
    z = tmp_path / "x.zip"
    with zipfile.ZipFile(z, "w") as f:
        info = zipfile.ZipInfo("link")
        info.external_attr = 0o120777 << 16
        f.writestr(info, "/etc/passwd")
    with pytest.raises(SourceError, match="a symbolic link"):
        safe_extract(z, tmp_path / "d")


def test_checkpoints_load_weights_only(tmp_path):
    import torch
    torch.save({"w": torch.arange(3.0)}, tmp_path / "ok.pt")
    assert load_checkpoint(tmp_path / "ok.pt")["w"].tolist() == [0.0, 1.0, 2.0]
    torch.save({"w": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(SourceError, match="evil.pt: refused by torch.load"):
        load_checkpoint(tmp_path / "evil.pt")


# ---------------------------------------------------------------- CIFAR

def write_cifar(root, name, n=2, bad_shape=False):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (n, 100 if bad_shape else 3072), dtype=np.uint8)
    folder, splits, key, meta, names_key, k, _ = L._CIFAR[name]
    (root / folder).mkdir(parents=True, exist_ok=True)
    for b in sum(splits.values(), []):
        d = {b"batch_label": b"fixture", key: [1, k - 1][:n], b"data": x, b"filenames": [b"a.png", b"b.png"][:n]}
        if name == "cifar100":
            d[b"coarse_labels"] = [0, 19][:n]
        (root / folder / b).write_bytes(pickle.dumps(d, protocol=2))
    (root / folder / meta).write_bytes(pickle.dumps({names_key: [f"class{i}".encode() for i in range(k)]}, protocol=2))
    return x


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_round_trip_and_errors(source, name):
    root = source(name)
    x = write_cifar(root, name)
    source.publish(name)
    got = L.load_cifar(name, "test", check_count=False)
    assert got.images.shape == (2, 32, 32, 3) and got.images.dtype == np.uint8
    np.testing.assert_array_equal(got.images[1, 2, 3], x[1, [2 * 32 + 3, 1024 + 2 * 32 + 3, 2048 + 2 * 32 + 3]])
    assert got.labels.tolist() == [1, len(got.classes) - 1] and got.classes[0] == "class0"
    if name == "cifar100":
        assert got.coarse_labels.tolist() == [0, 19]
    with pytest.raises(SourceError, match="expected 10000"):
        L.load_cifar(name, "test")                                 # a partial copy is not the split
    folder, splits, *_ = L._CIFAR[name]
    test_file = root / folder / splits["test"][0]
    corrupt(test_file)
    with pytest.raises(SourceError, match=f"{test_file}: md5 [0-9a-f]{{32}}, expected [0-9a-f]{{32}}"):
        L.load_cifar(name, "test", check_count=False)
    test_file.unlink()
    with pytest.raises(SourceError, match=f"missing {folder}/{splits['test'][0]}.*{R.SOURCES[name].url}"):
        L.load_cifar(name, "test", check_count=False)
    write_cifar(root, name, bad_shape=True)
    source.publish(name)
    with pytest.raises(SourceError, match=r"b'data' has shape \(2, 100\).*expected \(n, 3072\) uint8"):
        L.load_cifar(name, "test", check_count=False)


def test_cifar_tarball_is_extracted_in_place(source, monkeypatch, tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    write_cifar(build, "cifar10")
    root = source("cifar10")
    arc = root / "cifar-10-python.tar.gz"
    with tarfile.open(arc, "w:gz") as t:
        t.add(build / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    s = R.SOURCES["cifar10"]
    files = tuple(dataclasses.replace(f, md5=md5(build / f.path)) for f in s.files)
    monkeypatch.setitem(R.SOURCES, "cifar10", dataclasses.replace(
        s, files=files, archives=(dataclasses.replace(s.archives[0], md5=md5(arc)),)))
    assert R.status("cifar10") == "missing"
    assert len(L.load_cifar("cifar10", "train", check_count=False)) == 10      # 5 batches of 2
    assert (root / "cifar-10-batches-py" / "test_batch").is_file()
    for p in (root / "cifar-10-batches-py").iterdir():
        p.unlink()
    corrupt(arc)
    with pytest.raises(SourceError, match="cifar-10-python.tar.gz: md5"):
        R.verify("cifar10")


# ---------------------------------------------------------------- image folders, CelebA

def write_images(folder, n, size, fmt="png", value=0):
    from PIL import Image
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        a = np.full((*size, 3), (value + 37 * i) % 256, np.uint8)
        Image.fromarray(a).save(folder / f"img_{i:03d}.{fmt}", **({"quality": 95} if fmt == "jpg" else {}))


def test_eurosat(source):
    root = source("eurosat")
    for k, c in enumerate(R._EUROSAT):
        write_images(root / "2750" / c, 1, (64, 64), "jpg", value=20 * k)
    ds = L.load_image_folder("eurosat")
    assert len(ds) == 10 and ds.classes == sorted(R._EUROSAT)
    img, y = ds[3]
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8 and y == 3
    assert abs(float(img.mean()) - 20 * R._EUROSAT.index(ds.classes[3])) <= 3      # JPEG keeps a flat colour
    write_images(root / "2750" / "Forest", 1, (32, 32), "jpg")          # a wrong-sized image replaces one
    ds2 = L.load_image_folder("eurosat")
    with pytest.raises(SourceError, match=r"Forest/img_000.jpg: image of 32x32 pixels, expected 64x64"):
        ds2[ds2.classes.index("Forest")]
    (root / "2750" / "Forest" / "img_000.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(SourceError, match="Forest/img_000.jpg: not a readable image"):
        [L.load_image_folder("eurosat")[i] for i in range(10)]
    for p in (root / "2750" / "River").iterdir():
        p.unlink()
    with pytest.raises(SourceError, match=r"missing 2750/River/\*.jpg \(at least 1, found 0\)"):
        L.load_image_folder("eurosat")


def test_afhq(source):
    root = source("afhq")
    for s in ("train", "val"):
        for c in ("cat", "dog", "wild"):
            write_images(root / "afhq" / s / c, 1, (512, 512))
    ds = L.load_image_folder("afhq", "val")
    assert len(ds) == 3 and ds.classes == ["cat", "dog", "wild"] and ds[2][0].shape == (512, 512, 3)
    write_images(root / "afhq" / "val" / "dog", 1, (256, 256))
    with pytest.raises(SourceError, match="dog/img_000.png: image of 256x256 pixels, expected 512x512"):
        L.load_image_folder("afhq", "val")[1]


def write_celeba(root, names=None):
    names = names or [f"Attr_{i}" for i in range(40)]
    write_images(root / "img_align_celeba", 3, (218, 178), "jpg")
    files = [f"img_{i:03d}.jpg" for i in range(3)]
    rows = [f"{f} " + " ".join("1" if (i + j) % 3 == 0 else "-1" for j in range(len(names))) for i, f in enumerate(files)]
    (root / "list_attr_celeba.txt").write_text(f"3\n{' '.join(names)}\n" + "\n".join(rows) + "\n")
    (root / "list_eval_partition.txt").write_text("\n".join(f"{f} {s}" for f, s in zip(files, (0, 0, 2))) + "\n")


def test_celeba(source):
    root = source("celeba")
    write_celeba(root)
    source.publish("celeba")
    c = L.load_celeba("train")
    assert c.attrs.shape == (2, 40) and set(np.unique(c.attrs.to_numpy())) <= {0, 1}
    assert c.attrs.iloc[0, 0] == 1 and c.attrs.iloc[0, 1] == 0                    # +1 -> 1, -1 -> 0
    assert len(c) == 2 and c.images[0][0].shape == (218, 178, 3)
    img, attrs = c[1]
    assert img.shape == (218, 178, 3) and attrs.tolist() == c.attrs.iloc[1].tolist() and len(attrs) == 40
    assert len(L.load_celeba("test").attrs) == 1
    corrupt(root / "list_eval_partition.txt")
    with pytest.raises(SourceError, match="list_eval_partition.txt: md5"):
        L.load_celeba("train")
    write_celeba(root, names=[f"Attr_{i}" for i in range(39)])
    source.publish("celeba")
    with pytest.raises(SourceError, match="list_attr_celeba.txt: 39 attributes"):
        L.load_celeba("train")


# ---------------------------------------------------------------- tables

def write_obesity(p, n=2111, columns=None):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({c: rng.integers(1, 4, n) for c in L.OBESITY_COLUMNS})
    df["Gender"] = rng.choice(["Female", "Male"], n)
    df["NObeyesdad"] = rng.choice(L.OBESITY_CLASSES, n)
    if columns:
        df = df.rename(columns=columns)
    df.to_csv(p, index=False)


def test_uci_obesity(source):
    root = source("uci_obesity")
    p = root / "ObesityDataSet_raw_and_data_sinthetic.csv"
    write_obesity(p)
    assert R.status("uci_obesity") == "unverified"                      # no published checksum ...
    R.pin("uci_obesity")                                                # ... until the user pins the copy
    df = L.load_obesity()
    assert df.shape == (2111, 17) and set(df["NObeyesdad"]) <= set(L.OBESITY_CLASSES)
    assert R.status("uci_obesity") == "verified"
    corrupt(p)
    with pytest.raises(SourceError, match=f"{p}: sha256 [0-9a-f]{{64}}, expected [0-9a-f]{{64}} \\(pinned in"):
        L.load_obesity()
    (root / R.PIN_NAME).unlink()
    write_obesity(p, columns={"FAVC": "favc"})
    with pytest.raises(SourceError, match="sinthetic.csv: columns .*favc"):
        L.load_obesity()
    write_obesity(p, n=100)
    with pytest.raises(SourceError, match="100 rows, expected 2111"):
        L.load_obesity()
    p.unlink()
    with pytest.raises(SourceError, match="missing ObesityDataSet_raw_and_data_sinthetic.csv.*archive.ics.uci.edu"):
        L.load_obesity()


def test_enem_chunks_latin1(source):
    root = source("enem")
    (root / "DADOS").mkdir()
    p = root / "DADOS" / "MICRODADOS_ENEM_2019.csv"
    rows = [f"{190000 + i};{'M' if i % 2 else 'F'};São Paulo;{500 + i}.5" for i in range(25)]
    p.write_bytes(("NU_INSCRICAO;TP_SEXO;NO_MUNICIPIO_PROVA;NU_NOTA_MT\n" + "\n".join(rows) + "\n").encode("latin-1"))
    chunks = list(L.read_enem(["TP_SEXO", "NO_MUNICIPIO_PROVA", "NU_NOTA_MT"], chunksize=10))
    assert [len(c) for c in chunks] == [10, 10, 5]
    df = pd.concat(chunks)
    assert df["NO_MUNICIPIO_PROVA"].iloc[0] == "São Paulo" and df["NU_NOTA_MT"].iloc[-1] == 524.5
    with pytest.raises(SourceError, match=r"MICRODADOS_ENEM_2019.csv: no column\(s\) \['NU_NOTA_XX'\]"):
        next(L.read_enem(["NU_NOTA_XX"]))
    p.unlink()
    with pytest.raises(SourceError, match=r"missing DADOS/MICRODADOS_ENEM_\*.csv"):
        next(L.read_enem())


def test_cluster_trace_chunks(source):
    root = source("google_cluster_trace")
    (root / "task_events").mkdir()
    for part in range(2):
        lines = [f"{600000000 + i},,{6000 + part},{i},{i % 3},{i % 9},user{i}=,{i % 4},{i % 12},0.0125,0.0159,0.0004,0"
                 for i in range(7)]
        with gzip.open(root / "task_events" / f"part-{part:05d}-of-00500.csv.gz", "wt") as f:
            f.write("\n".join(lines) + "\n")
    chunks = list(L.read_cluster_trace(chunksize=5))
    df = pd.concat(chunks)
    assert list(df.columns) == L.TASK_EVENT_COLUMNS and len(df) == 14 and [len(c) for c in chunks] == [5, 2, 5, 2]
    assert df["job_id"].tolist() == [6000] * 7 + [6001] * 7 and df["cpu_request"].iloc[0] == 0.0125
    with gzip.open(root / "task_events" / "part-00001-of-00500.csv.gz", "wt") as f:
        f.write("1,2,3\n")
    with pytest.raises(SourceError, match="part-00001-of-00500.csv.gz: 3 fields per row, expected 13"):
        list(L.read_cluster_trace())


# ---------------------------------------------------------------- crystals

def crystal_rows(n=3):
    from pymatgen.core import Lattice, Structure
    from pymatgen.io.cif import CifWriter
    structs = [Structure(Lattice.cubic(4.2), ["Cs", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]),
               Structure(Lattice.cubic(3.6), ["Cu"] * 4, [[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]]),
               Structure(Lattice.hexagonal(3.2, 5.2), ["Zn", "Zn", "O", "O"],
                         [[1 / 3, 2 / 3, 0], [2 / 3, 1 / 3, 0.5], [1 / 3, 2 / 3, 0.38], [2 / 3, 1 / 3, 0.88]])]
    return structs[:n], pd.DataFrame({"material_id": [f"mp-{i}" for i in range(n)],
                                      "formation_energy_per_atom": [-1.0, 0.0, -1.5][:n],
                                      "cif": [str(CifWriter(s)) for s in structs[:n]]})


@pytest.mark.parametrize("name", ["mp_20", "perov_5", "carbon_24", "mpts_52"])
def test_crystals(source, name):
    from pymatgen.analysis.structure_matcher import StructureMatcher
    root = source(name)
    structs, df = crystal_rows()
    for s in ("train", "val", "test"):
        df.to_csv(root / f"{s}.csv")
    got = L.load_crystals(name, "test", check_rows=False)
    assert len(got) == 3 and all(StructureMatcher().fit(a, b) for a, b in zip(got["structure"], structs))
    assert got["structure"].iloc[2].composition.reduced_formula == "ZnO"
    with pytest.raises(SourceError, match=f"test.csv: 3 rows, expected {L.CRYSTAL_SPLITS[name]['test']}"):
        L.load_crystals(name, "test")
    bad = df.copy()
    bad.loc[1, "cif"] = "data_broken\n_cell_length_a x\n"
    bad.to_csv(root / "val.csv")
    with pytest.raises(SourceError, match=r"val.csv: row 1 \(mp-1\): the CIF does not parse"):
        L.load_crystals(name, "val", check_rows=False)
    df.drop(columns="cif").to_csv(root / "train.csv")
    with pytest.raises(SourceError, match="train.csv: columns .* expected 'material_id' and 'cif'"):
        L.load_crystals(name, "train", check_rows=False)
    R.pin(name)
    corrupt(root / "test.csv")
    with pytest.raises(SourceError, match="test.csv: sha256"):
        L.load_crystals(name, "test", check_rows=False)
    (root / "test.csv").unlink()
    with pytest.raises(SourceError, match="missing test.csv"):
        L.load_crystals(name, "test", check_rows=False)


def test_crystals_from_shared_sample(source):
    """The real MP-20 test rows in ../shared/data/crystals (skipped where absent)."""
    shared = core.REPO_ROOT.parent / "shared" / "data" / "crystals" / "mp20_test_sample.csv"
    if not shared.is_file():
        pytest.skip(f"{shared} is absent (extra real samples live beside the checkout)")
    root = source("mp_20")
    df = pd.read_csv(shared).head(3)
    for s in ("train", "val", "test"):
        df.to_csv(root / f"{s}.csv", index=False)
    got = L.load_crystals("mp_20", "test", check_rows=False)
    assert [s.composition.reduced_formula for s in got["structure"]] == df["pretty_formula"].tolist()


# ---------------------------------------------------------------- CT (NIfTI)

def write_case(root, case="BDMAP_00000001", mask_shape=(16, 16, 16)):
    import nibabel as nib
    d = root / case / "segmentations"
    d.mkdir(parents=True, exist_ok=True)
    aff = np.diag([0.8, 0.7, 2.5, 1.0])
    ct = np.arange(16 ** 3, dtype=np.int16).reshape(16, 16, 16) - 1000
    nib.save(nib.Nifti1Image(ct, aff), root / case / "ct.nii.gz")
    for k, o in enumerate(R._ORGANS):
        m = np.zeros(mask_shape if o == "liver" else (16, 16, 16), np.uint8)
        m[k:k + 2] = 1
        nib.save(nib.Nifti1Image(m, aff), d / f"{o}.nii.gz")
    return ct


def test_abdomenatlas(source):
    root = source("abdomenatlas")
    ct = write_case(root)
    cases = list(L.load_ct_cases())
    assert len(cases) == 1 and cases[0].name == "BDMAP_00000001"
    np.testing.assert_allclose(cases[0].spacing, (0.8, 0.7, 2.5))
    np.testing.assert_array_equal(cases[0].array(), ct)
    assert set(cases[0].masks) == set(R._ORGANS) and cases[0].mask("spleen")[1].all()
    write_case(root, mask_shape=(16, 16, 8))
    with pytest.raises(SourceError, match=r"segmentations/liver.nii.gz: mask of shape \(16, 16, 8\)"):
        list(L.load_ct_cases())
    write_case(root)
    R.pin("abdomenatlas")
    corrupt(root / "BDMAP_00000001" / "ct.nii.gz")
    with pytest.raises(SourceError, match="BDMAP_00000001/ct.nii.gz: sha256"):
        list(L.load_ct_cases())
    (root / R.PIN_NAME).unlink()
    with pytest.raises(SourceError, match="BDMAP_00000001/ct.nii.gz: the voxels do not decode"):
        [c.array() for c in L.load_ct_cases()]             # the header is intact: the voxels are read lazily
    (root / "BDMAP_00000001" / "ct.nii.gz").write_bytes(b"\x1f\x8b not nifti")
    with pytest.raises(SourceError, match="ct.nii.gz: not a readable NIfTI"):
        list(L.load_ct_cases())
    (root / "BDMAP_00000001" / "segmentations" / "pancreas.nii.gz").unlink()
    with pytest.raises(SourceError, match=r"missing BDMAP_\*/segmentations/pancreas.nii.gz"):
        list(L.load_ct_cases())


# ---------------------------------------------------------------- Hugging Face dataset snapshots

def write_parquet(p, **cols):
    import pyarrow as pa
    import pyarrow.parquet as pq
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), p)


TOFU_CONFIGS = [f.path.split("/")[0] for f in R.SOURCES["tofu"].files]   # every config P09 reads


def tofu_rest(root, json_lines=False):
    "The TOFU configs not yet under `root`, one row each (a complete snapshot's layout)."
    for c in TOFU_CONFIGS:
        if not (root / c).exists() and not (root / f"{c}.json").exists():
            if json_lines:
                (root / f"{c}.json").write_text(json.dumps({"question": f"{c}?", "answer": "yes"}) + "\n")
            else:
                write_parquet(root / c / "train-00000-of-00001.parquet", question=[f"{c}?"], answer=["yes"])


def test_tofu(source):
    import datasets
    root = source("tofu")
    write_parquet(root / "forget10" / "train-00000-of-00001.parquet",
                  question=["Who wrote 'The Red Lotus'?", "Where was Ana born?"], answer=["Ana Ruiz.", "Lima."])
    tofu_rest(root)
    ds = L.load_hf_split("tofu", "forget10", columns=["question", "answer"])
    assert isinstance(ds, datasets.Dataset) and len(ds) == 2 and ds[1]["answer"] == "Lima."
    with pytest.raises(SourceError, match=r"train-00000-of-00001.parquet: no column\(s\) \['paraphrased_answer'\]"):
        L.load_hf_split("tofu", "forget10", columns=["paraphrased_answer"])
    with pytest.raises(SourceError, match="no .*forget20.*configs present: \\['forget01', 'forget01_perturbed', "):
        L.load_hf_split("tofu", "forget20")
    R.pin("tofu")
    corrupt(root / "forget10" / "train-00000-of-00001.parquet")
    with pytest.raises(SourceError, match="forget10/train-00000-of-00001.parquet: sha256"):
        L.load_hf_split("tofu", "forget10")
    (root / R.PIN_NAME).unlink()
    with pytest.raises(SourceError, match="train-00000-of-00001.parquet: not a readable parquet"):
        L.load_hf_split("tofu", "forget10")


def test_tofu_json_lines(source):
    root = source("tofu")
    tofu_rest(root)
    (root / "world_facts.json").write_text('{"question": "Capital of France?", "answer": "Paris"}\n'
                                           '{"question": "2+2?", "answer": "4"}\n')
    ds = L.load_hf_split("tofu", "world_facts", columns=["question", "answer"])
    assert ds["answer"] == ["Paris", "4"]


@pytest.mark.parametrize("name", ["muse_news", "muse_books"])
def test_muse(source, name):
    root = source(name)
    write_parquet(root / "raw" / "forget-00000-of-00001.parquet", text=["a news story", "another"])
    write_parquet(root / "knowmem" / "forget_qa-00000-of-00001.parquet", question=["Who?"], answer=["Them."])
    write_parquet(root / "verbmem" / "forget-00000-of-00001.parquet", prompt=["Once"], gt=["upon a time"])
    assert L.load_hf_split(name, "raw", "forget", columns=["text"])["text"] == ["a news story", "another"]
    assert L.load_hf_split(name, "verbmem", "forget", columns=["prompt", "gt"])[0]["gt"] == "upon a time"
    with pytest.raises(SourceError, match=r"no column\(s\) \['answer'\]"):
        L.load_hf_split(name, "verbmem", "forget", columns=["answer"])
    (root / "knowmem" / "forget_qa-00000-of-00001.parquet").unlink()
    with pytest.raises(SourceError, match=r"missing knowmem/forget_qa-\*.parquet"):
        L.load_hf_split(name, "raw", "forget")


# ---------------------------------------------------------------- the Pile

def write_zst(p, lines):
    import zstandard
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))


def test_pile(source):
    root = source("pile")
    docs = [{"text": "Über alles — a web page", "meta": {"pile_set_name": "Pile-CC"}},
            {"text": "import os\n", "meta": {"pile_set_name": "Github"}}]
    write_zst(root / "train" / "00.jsonl.zst", [json.dumps(d) for d in docs])
    got = list(L.read_pile())
    assert got == [{"text": d["text"], "pile_set_name": d["meta"]["pile_set_name"]} for d in docs]
    assert [d["text"] for d in L.read_pile(sets=["Github"])] == ["import os\n"]
    write_zst(root / "train" / "01.jsonl.zst", [json.dumps(docs[0]), "{not json"])
    with pytest.raises(SourceError, match="01.jsonl.zst: line 2 is not JSON"):
        list(L.read_pile())
    write_zst(root / "train" / "01.jsonl.zst", [json.dumps({"text": "x"})])
    with pytest.raises(SourceError, match="01.jsonl.zst: a document without text or meta.pile_set_name"):
        list(L.read_pile())
    (root / "train" / "01.jsonl.zst").write_bytes((root / "train" / "00.jsonl.zst").read_bytes()[:-6])
    with pytest.raises(SourceError, match="01.jsonl.zst: corrupt or truncated"):
        list(L.read_pile())
    for p in (root / "train").iterdir():
        p.unlink()
    with pytest.raises(SourceError, match=r"missing \*\*/\*.jsonl.zst"):
        list(L.read_pile())


# ---------------------------------------------------------------- models

def write_tiny_model(folder, safetensors=True):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=16)
    model = LlamaForCausalLM(cfg)
    if safetensors:
        model.save_pretrained(folder)
    else:
        cfg.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, "</s>": 3}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", eos_token="</s>").save_pretrained(folder)
    return model


def test_hf_model_folder(source):
    import torch
    root = source("llama32_1b_instruct")
    ref = write_tiny_model(root)
    model, tok = L.load_hf_model("llama32_1b_instruct")
    ids = torch.tensor([tok("a b a").input_ids])
    torch.testing.assert_close(model(ids).logits, ref(ids).logits)
    R.pin("llama32_1b_instruct")
    corrupt(root / "model.safetensors")
    with pytest.raises(SourceError, match="model.safetensors: sha256"):
        L.load_hf_model("llama32_1b_instruct")
    (root / "config.json").unlink()
    with pytest.raises(SourceError, match="config.json: missing"):
        L.load_hf_model("llama32_1b_instruct")


def test_hf_pickled_weights_need_opt_in(tmp_path):
    import torch
    ref = write_tiny_model(tmp_path, safetensors=False)
    with pytest.raises(SourceError, match=r"only pickled weights \(pytorch_model.bin\); refused"):
        L.load_hf_model(folder=tmp_path)
    model, _ = L.load_hf_model(folder=tmp_path, allow_pickle=True)
    ids = torch.tensor([[1, 2, 1]])
    torch.testing.assert_close(model(ids).logits, ref(ids).logits)


def test_vae_folder(source):
    import torch
    from safetensors.torch import save_file
    root = source("sd_vae_ft_mse")
    (root / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", "latent_channels": 4}))
    save_file({"encoder.conv_in.weight": torch.zeros(2, 3, 3, 3)}, root / "diffusion_pytorch_model.safetensors")
    assert R.verify("sd_vae_ft_mse")["status"] == "unverified"
    try:
        import diffusers  # noqa: F401
    except ImportError:
        with pytest.raises(SourceError, match="needs diffusers"):
            L.load_vae()
    (root / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(SourceError, match="missing diffusion_pytorch_model.safetensors"):
        L.load_vae()


# ---------------------------------------------------------------- CLI and runner

def test_cli_data_commands(source, capsys):
    from neurips25.runner.cli import main
    root = source("uci_obesity")
    write_obesity(root / "ObesityDataSet_raw_and_data_sinthetic.csv")
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("uci_obesity"))
    assert "unverified" in line and "P07" in line and "p07_iipm/fig_ar_tabular [full]" in line
    assert main(["data", "verify", "uci_obesity"]) == 0 and "neurips25 data pin uci_obesity" in capsys.readouterr().out
    assert main(["data", "pin", "uci_obesity"]) == 0 and (root / R.PIN_NAME).is_file()
    capsys.readouterr()
    assert main(["data", "verify", "uci_obesity"]) == 0 and "verified, 1 files" in capsys.readouterr().out
    assert main(["data", "where", "uci_obesity"]) == 0 and str(root) in capsys.readouterr().out
    corrupt(root / "ObesityDataSet_raw_and_data_sinthetic.csv")
    assert main(["data", "verify", "uci_obesity"]) == 1
    assert "sinthetic.csv: sha256" in capsys.readouterr().err
    assert main(["data", "pin"]) == 2 and "needs a source name" in capsys.readouterr().err


def test_full_dry_run_names_missing_data(monkeypatch, tmp_path, capsys):
    """The real registry: every artefact whose full profile needs a source says so when the source is absent."""
    from neurips25.runner.cli import main
    from neurips25.runner.registry import load_registry
    monkeypatch.setenv("NEURIPS25_DATA", str(tmp_path / "nothing"))
    for s in R.SOURCES.values():
        monkeypatch.delenv(s.env_var, raising=False)
    reg = load_registry(errors={})
    needing = {a.id: a.needs["full"] for s in reg for a in s.artefacts if a.needs.get("full")}
    assert {i.split("/")[0] for i in needing} >= {"p02_fair_selection", "p03_bias_amplification", "p06_care",
                                                  "p07_iipm", "p08_curation", "p09_unlearning", "p11_ebm_geometry",
                                                  "p12_fedfact"}
    rc = main(["--outputs", str(tmp_path / "out"), "reproduce", "--profile", "full", "--device", "cpu", "--dry-run",
               *sorted(needing)])
    out = capsys.readouterr().out
    assert rc == 0
    for art, names in needing.items():
        line = next(ln for ln in out.splitlines() if f" {art} [full" in ln)
        for n in names:
            assert f"needs data: {n} (missing)" in line, line


def test_hugging_face_snapshot_hashes_verify_without_pinning(source):
    """`hf download --local-dir` records each file's etag (sha256 for LFS files, git blob sha1 otherwise) in
    .cache/huggingface/download/<file>.metadata: those are the distributor's hashes, checked without a pin."""
    root = source("tofu")
    files = ["forget10/train-00000-of-00001.parquet", "retain90/train-00000-of-00001.parquet"]
    files += [f"{c}/train-00000-of-00001.parquet" for c in TOFU_CONFIGS if c not in ("forget10", "retain90")]
    for f in files:
        write_parquet(root / f, question=["q?"], answer=[f])
    assert R.verify("tofu")["status"] == "unverified"
    meta = root / ".cache" / "huggingface" / "download"
    for i, f in enumerate(files):
        p = root / f
        etag = (hashlib.sha256(p.read_bytes()).hexdigest() if i == 0 else
                hashlib.sha1(b"blob %d\0" % p.stat().st_size + p.read_bytes()).hexdigest())
        (meta / f).parent.mkdir(parents=True, exist_ok=True)
        (meta / f"{f}.metadata").write_text(f"{'c' * 40}\n{etag}\n1712656091.123\n")
    rep = R.verify("tofu")
    assert rep["status"] == "verified" and "Hugging Face snapshot hashes" in rep["checked"]
    assert R.status("tofu") == "verified"
    corrupt(root / files[1])
    assert R.status("tofu") == "unverified"
    with pytest.raises(SourceError, match="retain90/train-00000-of-00001.parquet: git blob sha1 .* \\(recorded by the "
                                          "Hugging Face snapshot"):
        L.load_hf_split("tofu", "forget10")


def test_tofu_older_json_layout(source):
    """The TOFU snapshot's older layout: one JSON-lines file per config (forget10.json) instead of parquet folders."""
    root = source("tofu")
    tofu_rest(root, json_lines=True)
    assert R.status("tofu") == "unverified"
    assert L.load_hf_split("tofu", "forget10", columns=["question", "answer"])["question"] == ["forget10?"]
    (root / "retain90.json").unlink()
    with pytest.raises(SourceError, match=r"missing retain90/\*.parquet"):
        L.load_hf_split("tofu", "forget10")


def test_crystals_under_the_older_p05_folder(monkeypatch, tmp_path):
    """P05's loader looked in data/crystals/<name>/ first: that folder is the source's root when
    data/external/<name>/ is absent (and no variable overrides it)."""
    monkeypatch.delenv("NEURIPS25_DATA", raising=False)
    monkeypatch.delenv("NEURIPS25_DATA_MP_20", raising=False)
    monkeypatch.setattr(R.core, "DATA_PATH", tmp_path)
    assert R.source_root("mp_20") == tmp_path / "external" / "mp_20"
    (tmp_path / "crystals" / "mp_20").mkdir(parents=True)
    assert R.source_root("mp_20") == tmp_path / "crystals" / "mp_20"
    (tmp_path / "external" / "mp_20").mkdir(parents=True)
    assert R.source_root("mp_20") == tmp_path / "external" / "mp_20"


def test_a_real_run_refuses_before_any_kernel_starts(monkeypatch, tmp_path, capsys):
    from neurips25.runner.cli import main
    from neurips25.runner.registry import make_fixture
    root = make_fixture(tmp_path / "repo")
    y = root / "nbs" / "p98_fix" / "runs.yaml"
    y.write_text(y.read_text().replace("    gpu: false", "    gpu: false\n    needs: {full: [tofu]}"))
    monkeypatch.setenv("NEURIPS25_DATA_TOFU", str(tmp_path / "no_tofu"))
    rc = main(["--root", str(root), "reproduce", "p98/fig_a", "--profile", "full", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc != 0 and "p98_fix/fig_a [full]: needs data: tofu (missing)" in err and "neurips25 data where" in err, err
    assert not (root / "outputs" / "p98_fix").exists()
