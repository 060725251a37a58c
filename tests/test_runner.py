"""End-to-end tests of the papermill runner and the `neurips25` CLI on tiny fixture notebooks."""
import json, hashlib
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_cli, write_notebook



def out_dir(root, art, profile): return root / "outputs" / "p98_fix" / art / profile


def test_parameters_are_injected_per_profile_and_by_set(fixture_repo):
    r = run_cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "medium", "--set", "scale=2", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    t = pd.read_csv(out_dir(fixture_repo, "fig_a", "medium") / "params.csv")
    assert (t.n[0], t.scale[0], t.label[0]) == (30, 2.0, "med")          # runs.yaml medium + --set (int 2 -> float)
    m = json.loads((out_dir(fixture_repo, "fig_a", "medium") / "manifest.json").read_text())
    assert m["parameters"] == {"n": 30, "label": "med", "scale": 2.0}
    # the executed notebook holds papermill's injected cell with our values
    nb = json.loads((out_dir(fixture_repo, "fig_a", "medium") / "10_fig_a.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "n = 30" in "".join(injected[0]["source"])


def test_unknown_parameter_is_rejected_before_running(fixture_repo):
    r = run_cli(fixture_repo, "reproduce", "p98", "--profile", "small", "--set", "n_sample=5")
    assert r.returncode == 2
    assert "unknown parameter(s) ['n_sample']" in r.stderr
    assert not (fixture_repo / "outputs" / "p98_fix").exists()        # nothing ran


def test_wrong_type_is_rejected(fixture_repo):
    r = run_cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "small", "--set", "n=0.5")
    assert r.returncode == 2 and "declared int" in r.stderr


def test_unknown_key_in_runs_yaml_is_rejected(fixture_repo):
    y = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    y.write_text(y.read_text().replace("medium: {n: 30, label: med}", "medium: {n: 30, n_splits: 4}"))
    r = run_cli(fixture_repo, "reproduce", "p98", "--dry-run")
    assert r.returncode == 2 and "unknown parameter(s) ['n_splits']" in r.stderr


def test_lost_parameters_tag_is_detected(fixture_repo):
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a", tagged=False)
    r = run_cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "small")
    assert r.returncode == 2
    assert "no cell is tagged 'parameters'" in r.stderr


def test_failure_is_reported_others_succeed_and_old_result_survives(fixture_repo):
    r = run_cli(fixture_repo, "reproduce", "p98", "--profile", "small", "--jobs", "2", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    good = out_dir(fixture_repo, "fig_a", "small")
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    # make fig_a fail (its notebook changes, so it is rerun); tab_b is forced and succeeds
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a", extra="raise RuntimeError('late failure')\n")
    r = run_cli(fixture_repo, "reproduce", "p98", "--profile", "small", "--jobs", "2", "--force", "--device", "cpu")
    assert r.returncode == 1
    assert "1 ok, 1 failed" in r.stdout
    line = [l for l in r.stdout.splitlines() if "FAILED nbs/p98_fix/10_fig_a.ipynb" in l]
    assert line and "cell 2" in line[0] and "RuntimeError: late failure" in line[0], r.stdout
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before          # the good result is untouched
    failed = good.with_name("small.failed")
    m = json.loads((failed / "manifest.json").read_text())
    assert m["status"] == "failed" and m["error"]["ename"] == "RuntimeError" and m["error"]["cell_index"] == 2
    assert (failed / "10_fig_a.ipynb").is_file()
    assert json.loads((out_dir(fixture_repo, "tab_b", "small") / "manifest.json").read_text())["status"] == "ok"
    assert not list((fixture_repo / "outputs" / "p98_fix" / "fig_a").glob(".tmp-*"))   # no temporary leftovers
    report = (fixture_repo / "outputs" / "REPORT.md").read_text()
    assert "**failed** (cell 2: RuntimeError: late failure); last good result kept" in report
    # a later success clears the failure marker
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a")
    r = run_cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu")
    assert r.returncode == 0 and not failed.exists()


def test_skip_if_unchanged_and_force(fixture_repo):
    args = ("reproduce", "p98/tab_b", "--profile", "medium", "--device", "cpu")
    r1 = run_cli(fixture_repo, *args); assert r1.returncode == 0 and "1 ok, 0 failed, 0 skipped" in r1.stdout
    m1 = json.loads((out_dir(fixture_repo, "tab_b", "medium") / "manifest.json").read_text())
    r2 = run_cli(fixture_repo, *args); assert "0 ok, 0 failed, 1 skipped" in r2.stdout and "unchanged since its last success" in r2.stdout
    assert json.loads((out_dir(fixture_repo, "tab_b", "medium") / "manifest.json").read_text())["started"] == m1["started"]
    r3 = run_cli(fixture_repo, *args, "--force"); assert "1 ok, 0 failed, 0 skipped" in r3.stdout
    r4 = run_cli(fixture_repo, *args, "--set", "n=6"); assert "1 ok" in r4.stdout        # a parameter changed
    nb = fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb"
    write_notebook(nb, "tab_b", extra="x = 1\n")
    r5 = run_cli(fixture_repo, "reproduce", "p98/tab_b", "--profile", "medium", "--device", "cpu", "--dry-run")
    assert "RUN  p98_fix/tab_b" in r5.stdout and "changed since the last success" in r5.stdout


def test_manifest_fields_and_hashes(fixture_repo):
    r = run_cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    d = out_dir(fixture_repo, "fig_a", "small")
    m = json.loads((d / "manifest.json").read_text())
    for k in ("series", "artefact", "notebook", "paper_ref", "profile", "parameters", "run_key", "git", "versions",
              "device", "started", "finished", "duration_s", "status", "error", "files", "claims"):
        assert k in m, k
    assert (m["series"], m["artefact"], m["profile"], m["status"], m["claims"]) == ("p98_fix", "fig_a", "small", "ok", 1)
    assert set(m["git"]) == {"commit", "dirty"} and m["device"]["device"] == "cpu"
    assert m["versions"]["papermill"] != "absent" and len(m["run_key"]) == 64
    names = {f["path"] for f in m["files"]}
    assert names == {"10_fig_a.ipynb", "params.csv", "params.md", "claims.json"}
    for f in m["files"]:
        data = (d / f["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f["sha256"] and len(data) == f["bytes"]


def test_report_rendering_and_readme_status(fixture_repo):
    assert run_cli(fixture_repo, "reproduce", "p98", "--profile", "small", "--device", "cpu").returncode == 0
    rep = (fixture_repo / "outputs" / "REPORT.md").read_text()
    assert "## <a id=\"p98_fix\"></a>P98 — Fixture paper" in rep
    assert "| fig_a | Fig. 1 | small | ok |" in rep and "| tab_b | Table 2 | small | ok |" in rep
    assert "[params.md](p98_fix/fig_a/small/params.md)" in rep
    assert "| fig_a | small | **n_positive**: n is positive | qualitative | 3 | n > 0 | reproduced |" in rep
    assert "| **total** | | 2 | 0 | 0 | 2 | 0 | 0 | 0 |" in rep
    readme = fixture_repo / "README.md"
    readme.write_text("# x\n<!-- status:start -->\n| P98 | Fixture | `nbs/p98_fix/` | not run yet |\n<!-- status:end -->\n")
    r = run_cli(fixture_repo, "report", "--readme", str(readme))
    assert r.returncode == 0 and "2/2 artefacts (small); claims: 2 reproduced" in readme.read_text()


def test_selectors_and_gpu_flag(fixture_repo):
    r = run_cli(fixture_repo, "reproduce", "fix", "--dry-run", "--profile", "small")
    assert r.returncode == 0 and r.stdout.count("RUN ") == 2
    r = run_cli(fixture_repo, "reproduce", "p99", "--dry-run")
    assert r.returncode == 2 and "unknown series 'p99'" in r.stderr
    r = run_cli(fixture_repo, "reproduce", "p98_fix/tab_b", "--profile", "full", "--dry-run")
    try:
        import torch; has_cuda = torch.cuda.is_available()
    except ImportError: has_cuda = False
    if not has_cuda:
        assert r.returncode == 2 and "needs a GPU" in r.stderr
        r = run_cli(fixture_repo, "reproduce", "p98_fix/tab_b", "--profile", "full", "--dry-run", "--device", "cpu")
        assert r.returncode == 0
        r = run_cli(fixture_repo, "reproduce", "p98", "--device", "cuda", "--dry-run")
        assert r.returncode == 2 and "CUDA is not available" in r.stderr


def test_notebook_declaring_another_artefact_fails(fixture_repo):
    # tab_b's notebook claims to be fig_a: core.start_run refuses, so a mis-registered notebook cannot write elsewhere
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb", "fig_a")
    r = run_cli(fixture_repo, "reproduce", "p98/tab_b", "--profile", "small", "--device", "cpu")
    assert r.returncode == 1 and "registered it as p98_fix/tab_b" in r.stdout


def test_list(fixture_repo):
    r = run_cli(fixture_repo, "list")
    assert r.returncode == 0
    assert "p98_fix" in r.stdout and "fig_a" in r.stdout and "gpu=yes" in r.stdout and "parameters: n, scale, label, fail" in r.stdout
