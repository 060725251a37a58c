"""P12 FedFACT: cross-cutting checks that the notebooks do not cover.

* every exported module works on its own (no name that only a notebook's test cells import),
* the benchmark runs as `python -m neurips25.fedfact.benchmark`,
* runs.yaml's small profile equals every notebook's parameter defaults.
"""
import ast, json, os, subprocess, sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "nbs" / "p12_fedfact"


def test_modules_standalone():
    code = (
        "import numpy as np\n"
        "from neurips25.fedfact.data import load_federated\n"
        "from neurips25.fedfact.bayes import FairSpec\n"
        "from neurips25.fedfact.experiment import run_setting\n"
        "df = run_setting('synthetic', 'linspace', seed=0, methods=['FedAvg', 'FairFed', 'FedFB-style', 'Reweigh',"
        " 'LP oracle', 'FedFACT^g&l (In)', 'FedFACT^g&l (Post)'], fedavg_rounds=2, in_rounds=2, in_local_steps=2,"
        " post_rounds=5, data=load_federated('synthetic', 'linspace', n_synthetic=1500, seed=0))\n"
        "assert len(df) == 7 and np.isfinite(df.acc).all(), df\n"
        "print('ok')\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURIPS25_PROGRESS="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_benchmark_cli():
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURIPS25_PROGRESS="0")
    r = subprocess.run([sys.executable, "-m", "neurips25.fedfact.benchmark", "--n", "500"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "samples per second" in r.stdout and "exact LP" in r.stdout


def _defaults(nb_path):
    nb = json.loads(nb_path.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    out = {}
    for node in ast.parse("".join(cell["source"])).body:
        if isinstance(node, ast.AnnAssign): out[node.target.id] = ast.literal_eval(node.value)
    return out


def test_runs_yaml_small_equals_defaults():
    yaml = pytest.importorskip("yaml")
    runs = yaml.safe_load((SERIES / "runs.yaml").read_text())
    assert runs["series"] == "p12_fedfact"
    for name, art in runs["artefacts"].items():
        d = _defaults(SERIES / art["notebook"])
        assert art["small"] == d, (name, art["small"], d)
        for prof in ("medium", "full"):
            assert set(art[prof]) <= set(d), (name, prof, set(art[prof]) - set(d))
