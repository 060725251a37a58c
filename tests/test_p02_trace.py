"""P02's `full` reads the Google cluster trace (issue 31 item 7): `trace_instances` on a format fixture of the data
layer's `google_cluster_trace` source (gzipped, headerless `task_events` parts with the trace's 13 columns), and the
figure notebooks' `cluster="trace"` code path end to end at tiny sizes (papermill, CPU)."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neurips25.fair_selection import GFQ, FairSelectionError, frac_gfq, offline_optimum, trace_instances
from neurips25.fair_selection.instances import PRIORITY_BANDS
from neurips25.runner.executors import plan
from neurips25.sources.registry import SourceError

REPO = Path(__file__).resolve().parents[1]


def write_trace(root: Path, n_per_part: int = 500, parts: int = 3, seed: int = 0) -> Path:
    "Task events in the trace's format: mostly SUBMIT (type 0) events, some others, some missing CPU requests."
    g = np.random.default_rng(seed)
    (root / "task_events").mkdir(parents=True, exist_ok=True)
    for part in range(parts):
        rows = []
        for i in range(n_per_part):
            ev = 0 if g.random() < 0.8 else int(g.integers(1, 9))
            cpu = "" if g.random() < 0.05 else f"{g.pareto(1.2) * 0.01 + 0.001:.5f}"
            rows.append(f"{600000000 + part * 10**6 + i},,{6000 + i // 10},{i % 10},{i % 7},{ev},u{i % 5}=,"
                        f"{int(g.integers(0, 4))},{int(g.integers(0, 12))},{cpu},0.01,0.0001,0")
        with gzip.open(root / "task_events" / f"part-{part:05d}-of-00500.csv.gz", "wt") as f:
            f.write("\n".join(rows) + "\n")
    return root


@pytest.fixture
def trace(tmp_path, monkeypatch):
    root = write_trace(tmp_path / "google_cluster_trace")
    monkeypatch.setenv("NEURIPS25_DATA_GOOGLE_CLUSTER_TRACE", str(root))
    return root


def test_trace_instances_follow_the_conversion(trace):
    import pandas as pd
    from neurips25.sources.loaders import read_cluster_trace
    df = pd.concat(read_cluster_trace())
    sub = df[(df.event_type == 0) & (df.cpu_request > 0)]
    inst = trace_instances(2, 200, 12, theta=40.0)
    cpu = sub.cpu_request.to_numpy()[:400].reshape(2, 200)
    U = np.quantile(cpu, 0.99)
    np.testing.assert_allclose(inst.values, np.clip(cpu, U / 40, U) / (U / 40), rtol=1e-12)
    prio = sub.priority.to_numpy()[:400].reshape(2, 200)
    for j, (lo, hi) in enumerate(PRIORITY_BANDS):
        assert (inst.classes[:, :, j] == ((prio >= lo) & (prio <= hi))).all()
    assert inst.meta["dropped"] > 0 and inst.L == 1.0 and inst.U == 40.0
    # the set-aside algorithms and the optimum run on it, and the quotas are kept
    q = GFQ((1, 1, 1, 1))
    a = frac_gfq(inst, q)
    assert (a.value <= offline_optimum(inst, q, integral=False) + 1e-9).all()
    assert (a.counts >= q.targets(inst) - 1e-9).all()


def test_trace_instances_refuse_bad_requests(trace, tmp_path):
    with pytest.raises(FairSelectionError, match="usable task submissions"):
        trace_instances(20, 200, 10)
    with pytest.raises(FairSelectionError, match="start must be"):
        trace_instances(1, 10, 5, start=-1)
    with pytest.raises(FairSelectionError, match="upper_quantile must be in"):
        trace_instances(1, 10, 5, upper_quantile=1.5)
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(SourceError, match="data source 'google_cluster_trace' is incomplete"):
        trace_instances(1, 10, 5, root=empty)


@pytest.mark.parametrize("artefact", ["fig_cr_theta", "tab_rounding"])
def test_full_code_path_runs_on_the_fixture(trace, tmp_path, artefact):
    "The full profile's cluster=trace path, end to end through papermill at tiny sizes."
    job = next(j for j in plan([f"p02/{artefact}"], profile="full", device="cpu", force=True, outputs=tmp_path / "o"))
    assert job.effective["cluster"] == "trace"
    tiny = dict(families="iid,cluster", n_runs=2, T=120, k=10, M=3, n_draws=20, opt="lp", cluster="trace")
    tiny.update(thetas="5,20", worst_levels=20, quota_frac=0.1) if artefact == "fig_cr_theta" else tiny.update(n_seeds=2)
    out = tmp_path / "run"
    env = {**os.environ, "NEURIPS25_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "papermill", str(job.art.notebook), str(tmp_path / "out.ipynb"), "-k", "python3",
            "--cwd", str(job.art.notebook.parent)]
    for k, v in tiny.items():
        args += ["-p", k, str(v)] if isinstance(v, str) else ["-p", k, json.dumps(v)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    nb = json.loads((tmp_path / "out.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "google_cluster_trace" in text or (out / "claims.json").exists()
