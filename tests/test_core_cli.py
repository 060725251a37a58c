"""Cross-cutting behaviour of core outside notebooks: device errors, paths under different working directories."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neurips25 import core


def test_paths_do_not_depend_on_the_working_directory(tmp_path):
    code = "from neurips25 import core; print(core.REPO_ROOT); print(core.OUTPUTS_PATH)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURIPS25_")}
    outs = {subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=env).stdout
            for cwd in (tmp_path, core.REPO_ROOT / "nbs", core.REPO_ROOT)}
    assert len(outs) == 1
    root, outputs = outs.pop().split()
    assert Path(root) == core.REPO_ROOT and Path(outputs) == core.REPO_ROOT / "outputs"


def test_cuda_request_without_cuda_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available(): pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA is not available"): core.get_device("cuda")


def _torch_pin() -> str | None:
    "The TORCH_PIN `make setup` installed with (it writes .venv/.torch-pin), or None."
    p = Path(sys.prefix) / ".torch-pin"
    return p.read_text().strip() if p.is_file() else None


def test_torch_is_the_cpu_build_here():
    torch = pytest.importorskip("torch")
    if os.environ.get("NEURIPS25_ALLOW_CUDA_TORCH"):
        pytest.skip("CUDA torch allowed explicitly")
    if _torch_pin() not in (None, "torch==2.13.0") or torch.cuda.is_available():
        pytest.skip(f"a CUDA install was asked for (TORCH_PIN={_torch_pin()!r}) or a GPU is present")
    assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build; make setup prefers the CPU wheel"


def _setup_commands(tmp_path, *make_args) -> list[str]:
    "The commands `make setup` would run for a fresh venv (make -n: nothing is run)."
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    r = subprocess.run(["make", "-n", "setup", f"VENV={tmp_path / 'venv'}", *make_args], cwd=core.REPO_ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_make_reproduce_passes_exclude():
    "make reproduce EXCLUDE='a b' gives the runner one quoted --exclude per word (make -n: nothing is run)."
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    def line(*args):
        r = subprocess.run(["make", "-n", "reproduce", *args], cwd=core.REPO_ROOT, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        (cmd,) = [c for c in r.stdout.splitlines() if "neurips25 reproduce" in c]
        return cmd
    assert "--exclude" not in line()
    assert line("EXCLUDE=p09/tab_smollm2_* p08/tab_curation").endswith(
        " --exclude 'p09/tab_smollm2_*'  --exclude 'p08/tab_curation'")


def _run_torch_report(cmds, tmp_path, cuda: str | None) -> subprocess.CompletedProcess:
    "Run setup's torch report against a stand-in torch module (a CUDA or a CPU build)."
    fake = tmp_path / ("cuda" if cuda else "cpu")
    fake.mkdir()
    (fake / "torch.py").write_text(f"class version:\n    cuda = {cuda!r}\n__version__ = '2.13.0'\n")
    (line,) = [c for c in cmds if "/bin/python -c" in c and "import torch" in c]
    line = line.replace(str(tmp_path / "venv" / "bin" / "python"), sys.executable)
    env = {**os.environ, "PYTHONPATH": str(fake)}
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env)


def test_make_setup_prefers_the_cpu_wheel_and_accepts_the_documented_cuda_install(tmp_path):
    # defect 9: on a fresh machine PyPI's torch==2.13.0 is a CUDA build (Linux x86_64): setup adds PyTorch's CPU index
    # for torch; the README's CUDA install (a TORCH_PIN naming its own index) replaces it and is never refused
    cmds = _setup_commands(tmp_path)
    assert any(c.endswith("pip install -q --retries 1 torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu")
               for c in cmds), cmds
    r = _run_torch_report(cmds, tmp_path, cuda="12.6")          # no CPU wheel reached: a note, not a failure
    assert r.returncode == 0 and "CUDA 12.6 build" in r.stdout and "note: no CPU wheel" in r.stdout, r.stdout + r.stderr
    r = _run_torch_report(cmds, tmp_path, cuda=None)
    assert r.returncode == 0 and "CPU build" in r.stdout and "note" not in r.stdout
    pin = "torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cu126"
    cuda_cmds = _setup_commands(tmp_path, f"TORCH_PIN={pin}")
    torch_lines = [c for c in cuda_cmds if "pip install" in c and "torch==" in c]
    assert torch_lines and all("whl/cu126" in c and "whl/cpu" not in c for c in torch_lines), torch_lines
    (tmp_path / "cuda").rename(tmp_path / "cuda0")
    r = _run_torch_report(cuda_cmds, tmp_path, cuda="12.6")
    assert r.returncode == 0 and "CUDA 12.6 build" in r.stdout and "note" not in r.stdout, r.stdout + r.stderr


def test_data_file_names_source_and_command(tmp_path):
    with pytest.raises(core.DataFileError, match=r"missing\. Source: X\. Obtain it with: make data"):
        core.data_file(tmp_path / "absent.bin", source="X", obtain="make data")


def test_one_integer_check_across_series():
    "Every series guards integer arguments with core.check_int: same acceptance, each series' error class."
    import numpy as np
    from neurips25.fair_selection.instances import check_int as p02, FairSelectionError
    from neurips25.curation.criteria import check_int as p08
    from neurips25.fair_matroid.matroids import check_int as p10, FairMatroidError
    from neurips25.ebm_geometry import geodesics
    assert geodesics.check_int is core.check_int and p08 is core.check_int
    for f, err in ((p02, FairSelectionError), (p08, ValueError), (p10, FairMatroidError)):
        assert f(np.int64(7), "n", 1) == 7 and type(f(np.uint8(3), "n", 0)) is int
        for bad in (True, np.True_, 2.5, "3", None):
            with pytest.raises(err, match="n must be an integer >= 1"): f(bad, "n", 1)
        with pytest.raises(err, match="n must be an integer >= 1, got 0"): f(0, "n", 1)
    assert p02(3.0, "k", 0) == 3                        # P02 only: quotas come back from GFQ.q as floats
    with pytest.raises(ValueError, match="k must be an integer >= 0, got 3.0"): p10(3.0, "k", 0)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 4\], got 5"): core.check_int(5, "k", 1, 4)


# the isinstance(x, (int, np.integer)) tests left in the package, and why none of them is a parameter guard to fold into
# core.check_int: a new copy of the guard anywhere else fails this test
_INT_TESTS_LEFT = {
    "core.py": 2,                     # check_int itself; seed_everything's seed check (core, before check_int in the file)
    "fair_matroid/matroids.py": 2,    # element-id lookup on the oracle's hot path (UnknownElementError, its own two
                                      # messages); a list-of-ints type dispatch for bitset vectors
    "unlearning/trainer.py": 1,       # warmup: an int number of steps or a float fraction (a type dispatch)
    "unlearning/methods.py": 1,       # layer: an index or a module path (a type dispatch)
}

def test_integer_guards_are_core_check_int():
    "No module writes its own integer guard; the inline isinstance tests left are the type dispatches listed above."
    import re
    from pathlib import Path
    import neurips25
    pkg = Path(neurips25.__file__).parent
    rx = re.compile(r"isinstance\(\s*[\w.\[\]]+\s*,\s*\((?:bool, )?int, np\.integer\)\)|not isinstance\(\s*\w+\s*,\s*int\s*\)")
    found = {}
    for f in sorted(pkg.rglob("*.py")):
        n = len(rx.findall(f.read_text()))
        if n: found[f.relative_to(pkg).as_posix()] = n
    assert found == _INT_TESTS_LEFT, found
    from neurips25.sgequidiff.symmetry import check_sg
    from neurips25.care.ct import view_angles
    from neurips25.equality_of_impact.baselines import ExploreThenCommit
    from neurips25.unlearning.data import synth_tofu
    for f, msg in ((lambda v: check_sg(v), "space-group number must be an integer in 1..230, got"),
                   (lambda v: view_angles(v), "n_views must be an integer >= 1, got"),
                   (lambda v: ExploreThenCommit(K=v), "K must be an integer >= 2 (explore-then-commit's grid points), got"),
                   (lambda v: synth_tofu(n_authors=v), "n_authors must be an integer >= 4")):
        for bad in (True, 2.0, "3", 0):                  # bools and integral floats are refused everywhere (P02 aside)
            with pytest.raises(ValueError, match=re.escape(msg)): f(bad)


# The hand-written "a real number, not a bool" guards left, each a different test than a real scalar's:
_REAL_TESTS_LEFT = {
    "core.py": 2,                     # check_real itself (Python/NumPy scalars; 0-d arrays and tensors)
    "iipm/capacities.py": 1,          # subset_index: class ids, integral floats (2.0 from an array) accepted
    "iipm/selective.py": 1,           # forest_grid ranges: integral floats accepted as counts
}

def test_real_guards_are_core_check_real():
    ("No module writes its own 'a finite real number, not a bool' guard (isinstance against int/float/np.integer/"
     "np.floating or numbers.Real, a 0-d dtype.kind test, a private _is_real): core.check_real is the one, so a bool, "
     "a string, None and NaN are refused alike everywhere, with the argument's name.")
    import re
    from pathlib import Path
    import numpy as np
    import neurips25
    pkg = Path(neurips25.__file__).parent
    rx = re.compile(r"isinstance\(\s*[\w.\[\]]+\s*,\s*\((?:[\w.]+, )*(?:int, float, np\.integer, np\.floating|"
                    r"int, np\.integer, float, np\.floating)\)\)|numbers\.Real|np\.asarray\([\w.]+\)\.dtype\.kind (?:not )?in "
                    r"\"iuf\"|def _(?:is_|finite_)?real\(")
    found = {}
    for f in sorted(pkg.rglob("*.py")):
        n = len(rx.findall(f.read_text()))
        if n: found[f.relative_to(pkg).as_posix()] = n
    assert found == _REAL_TESTS_LEFT, found
    from neurips25.fair_matroid.online import hoeffding_lower
    from neurips25.care.metrics import nsd
    from neurips25.equality_of_impact.env import SatExp
    from neurips25.curation.criteria import epsilon_graph
    from neurips25.unlearning.metrics import min_k_score
    from neurips25.lm import clip_norm
    from neurips25.fair_selection.instances import PF
    m = np.zeros((8, 8), bool); m[2:5, 2:5] = True
    for f, msg in ((lambda v: hoeffding_lower(0.5, 10, v), "delta must be a number in (0, 1), got"),
                   (lambda v: nsd(m, m, 1.0, v), "tolerance must be > 0 mm (a finite number), got"),
                   (lambda v: SatExp(v), "rate must be a positive finite number, got"),
                   (lambda v: epsilon_graph(np.zeros((3, 2)), v), "eps must be a finite number >= 0, got"),
                   (lambda v: min_k_score([-1.0, -2.0], v), "k (the MinK fraction of tokens) must be in (0, 1], got"),
                   (lambda v: clip_norm(v), "grad_clip must be None, 0 (no clipping) or a finite number > 0, got"),
                   (lambda v: PF(v), "beta must be in (0, 1], got")):
        for bad in (True, np.True_, "0.5", float("nan"), [0.5]):   # refused by every one, never coerced or compared
            with pytest.raises(ValueError, match=re.escape(msg)): f(bad)


def test_scalar_bounds_refuse_non_numbers():
    ("Bound checks written as comparisons ('0 < x < 1', 'np.isfinite(x) and x > 0') let True through as 1 and raised "
     "TypeError on '0.5': the series' user-facing real parameters go through core.check_real (or check_int for counts), "
     "so a bool, a string, NaN and a list are refused with the argument's name in every series.")
    import re
    import numpy as np
    from neurips25.fair_selection.instances import sample_values, FairSelectionError
    from neurips25.fair_selection.thresholds import OneWayTradingThreshold
    from neurips25.equality_of_impact.baselines import UCBGrid
    from neurips25.equality_of_impact.env import make_env, ENV_NAMES
    from neurips25.sgequidiff.coord_diffusion import ve_sigmas
    from neurips25.sgequidiff.lattice import sample_lattice
    from neurips25.care.phantoms import anatomical_phantom
    from neurips25.care.cone import ConeBeam
    from neurips25.fair_matroid.instances import gnp_graph, FairMatroidError
    from neurips25.fedfact.data import dirichlet_split
    from neurips25.eok.synthetic import calibration_gap_under_eo
    from neurips25.bias_amplification.theory import proximity_ratio
    from neurips25.iipm.capacities import eps_contamination
    from neurips25.ebm_geometry.characters import brc_angles
    from neurips25.curation.benchmark import neighbour_pool
    rng = np.random.default_rng(0)
    cases = (
        (lambda v: sample_values((2, 3), v, 2.0, rng), "L must be a finite number, got", FairSelectionError),
        (lambda v: OneWayTradingThreshold(1.0, v), "U must be a finite number, got", FairSelectionError),
        (lambda v: UCBGrid(delta=v), "delta must be in (0, 1), got", ValueError),
        (lambda v: make_env(ENV_NAMES[0], sigma=v), "noise level sigma must be >= 0 and finite, got", ValueError),
        (lambda v: ve_sigmas(10, v, 0.5), "sigma_min must be a finite number, got", ValueError),
        (lambda v: sample_lattice(1, temperature=v), "temperature must be positive and finite, got", ValueError),
        (lambda v: anatomical_phantom(64, spacing=v), "spacing must be > 0 mm and finite, got", ValueError),
        (lambda v: ConeBeam((4, 4, 4), (1, 1, 1), [0.0], step=v), "step must be > 0 (a finite fraction", ValueError),
        (lambda v: gnp_graph(4, v, rng), "p must be in [0, 1], got", FairMatroidError),
        (lambda v: dirichlet_split(np.zeros(8, int), 2, v, rng), "alpha must be > 0 and finite, got", ValueError),
        (lambda v: calibration_gap_under_eo(v, 0.6, 0.8, 0.2), "p0 must be a probability in [0, 1], got", ValueError),
        (lambda v: proximity_ratio(0.1, v), "variance imbalance rho must be > 0 (inf allowed), got", ValueError),
        (lambda v: eps_contamination([0.5, 0.5], v), "eps must be in [0, 1], got", ValueError),
        (lambda v: brc_angles(10, std=v), "std must be positive and finite, got", ValueError),
        (lambda v: neighbour_pool(budget_fraction=v), "budget_fraction must be in (0, 1), got", ValueError),
    )
    for f, msg, err in cases:
        for bad in (True, np.True_, "0.5", float("nan"), [0.5]):
            with pytest.raises(err, match=re.escape(msg)): f(bad)
