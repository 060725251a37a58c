"""End-to-end tests of the runner and the `neurips25` CLI on tiny fixture notebooks (kernels only where needed)."""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import RUNS, cli, cli_env, out_dir, popen_cli, run_cli, write_notebook
from neurips25.runner.executors import execute, kernel_threads, plan, run_jobs
from neurips25.runner.report import render_report, status_rows
from neurips25.runner.store import SlotLock, failed_dir


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "outputs").rglob(".*") if p.name.startswith((".tmp-", ".old-")))


# --- parameters -----------------------------------------------------------------------------------------------------

def test_set_is_parsed_by_declared_type_recorded_and_stored_apart(fixture_repo):
    # defect 5: label=007 stays "007", n=007 is 7; effective parameters recorded; the run never passes as `medium`
    r = run_cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "medium", "--set", "scale=2", "--set", "label=007",
                "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    (d,) = (fixture_repo / "outputs" / "p98_fix" / "fig_a").glob("medium.set-*")
    assert not out_dir(fixture_repo, "fig_a", "medium").exists()
    t = pd.read_csv(d / "params.csv", dtype={"label": str})
    assert (t.n[0], t.scale[0], t.label[0]) == (30, 2.0, "007")
    m = manifest(d)
    assert m["parameters"] == {"n": 30, "label": "007", "scale": 2.0}
    assert m["effective_parameters"] == {"n": 30, "scale": 2.0, "label": "007", "fail": False, "sleep": 0.0}
    assert m["overrides"] == {"scale": "2", "label": "007"} and m["slot"] == d.name
    nb = json.loads((d / "10_fig_a.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "label = \"007\"" in "".join(injected[0]["source"])
    assert m["threads"]["requested"] == 1 and m["threads"]["kernel"]["omp_num_threads"] == "1"   # defect 8
    assert 0 < m["threads"]["kernel"]["cpu_s"] < 60, m["threads"]["kernel"]   # the kernel's CPU seconds (run time)
    rep = (fixture_repo / "outputs" / "REPORT.md").read_text()
    assert "Runs with `--set` overrides" in rep and f"| fig_a | {d.name} | scale=2, label=007 | ok |" in rep
    assert "| P98 Fixture paper | [p98_fix](#p98_fix) | 0 | 0 | 0 | 2 |" in rep      # not counted as the profile
    assert "p98_fix" not in status_rows(fixture_repo, fixture_repo / "outputs")      # no result: README row kept


def test_set_values_by_type_without_running(fixture_repo):
    rc, out, err = cli(fixture_repo, "reproduce", "p98/fig_a", "--set", "label=true", "--set", "n=007", "--dry-run")
    assert rc == 0 and '"label": "true"' in out and '"n": 7' in out, out + err
    for bad, msg in [("scale=inf", "'inf' is not a finite number"), ("scale=nan", "is not a finite number"),
                     ("n=0.5", "'0.5' is not a valid int"), ("fail=maybe", "'maybe' is not a valid bool"),
                     ("n_sample=5", "unknown parameter(s) ['n_sample']")]:
        rc, out, err = cli(fixture_repo, "reproduce", "p98", "--set", bad, "--dry-run")
        assert rc == 2 and msg in err, (bad, err)
    assert not (fixture_repo / "outputs").exists()


def test_runs_yaml_and_notebook_errors_are_reported_before_running(fixture_repo):
    y = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    y.write_text(RUNS.replace("medium: {n: 30, label: med}", "medium: {n: 30, n_splits: 4}"))
    rc, _, err = cli(fixture_repo, "reproduce", "p98", "--dry-run")
    assert rc == 2 and "unknown parameter(s) ['n_splits']" in err
    y.write_text(RUNS)
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a", tagged=False)
    rc, _, err = cli(fixture_repo, "reproduce", "p98/fig_a", "--profile", "small")
    assert rc == 2 and "no cell is tagged 'parameters'" in err


@pytest.mark.parametrize("old,new,msg", [
    ("module: fix", "modul: fix", "unknown top-level keys ['modul']"),
    ("gpu: true", 'gpu: "no"', "'gpu' must be true or false"),
    ("  tab_b:", "  ../../x:", "artefact names are letters, digits"),
    ("11_tab_b.ipynb", "../p97/11_tab_b.ipynb", "is not in the series folder"),
    ("full: {n: 50}", "full: {n: .inf}", "is not a finite number"),
])
def test_runs_yaml_validation_and_one_bad_series_does_not_block_others(fixture_repo, old, new, msg):
    # defect 6: strict validation, but only the broken series is skipped
    bad = fixture_repo / "nbs" / "p96_bad"
    bad.mkdir()
    (bad / "runs.yaml").write_text(RUNS.replace("p98_fix", "p96_bad").replace(old, new))
    rc, out, err = cli(fixture_repo, "reproduce", "p98", "--dry-run", "--profile", "small")
    assert rc == 0 and out.count("RUN ") == 2, err
    rc, out, err = cli(fixture_repo, "reproduce", "p96", "--dry-run")
    assert rc == 2 and msg in err and "p96_bad/runs.yaml" in err
    rc, out, err = cli(fixture_repo, "reproduce", "--dry-run", "--profile", "small")     # all: the others still plan
    assert rc == 2 and out.count("RUN ") == 2 and "skipped series p96_bad" in err and msg in err
    rc, out, err = cli(fixture_repo, "list")
    assert rc == 2 and "p98_fix" in out and msg in err


def test_unannotated_parameter_is_rejected(fixture_repo):
    nb = fixture_repo / "nbs" / "p98_fix" / "10_fig_a.ipynb"
    nb.write_text(nb.read_text().replace("n: int = 3", "n = 3"))
    rc, _, err = cli(fixture_repo, "reproduce", "p98/fig_a", "--dry-run")
    assert rc == 2 and "parameter 'n' is declared 'None'; annotate it" in err


def test_selectors_and_gpu_flag(fixture_repo):
    rc, out, _ = cli(fixture_repo, "reproduce", "p98_fix", "--dry-run", "--profile", "small")
    assert rc == 0 and out.count("RUN ") == 2
    rc, _, err = cli(fixture_repo, "reproduce", "p99", "--dry-run")
    assert rc == 2 and "unknown series 'p99'" in err
    import torch
    if not torch.cuda.is_available():
        rc, out, err = cli(fixture_repo, "reproduce", "p98_fix/tab_b", "--profile", "full", "--dry-run")
        assert rc == 0 and "[needs CUDA]" in out and "needs a GPU" in out, out + err
        rc, _, _ = cli(fixture_repo, "reproduce", "p98_fix/tab_b", "--profile", "full", "--dry-run", "--device", "cpu")
        assert rc == 0
        rc, _, err = cli(fixture_repo, "reproduce", "p98", "--device", "cuda", "--dry-run")
        assert rc == 2 and "CUDA is not available" in err


def test_list(fixture_repo):
    rc, out, _ = cli(fixture_repo, "list")
    assert rc == 0 and "p98_fix" in out and "fig_a" in out and "gpu=yes" in out
    assert "parameters: n, scale, label, fail, sleep" in out


def test_full_dry_run_without_cuda_prints_the_whole_plan_and_a_real_run_refuses(fixture_repo):
    # issue 28, 3.1: the plan of every artefact, the gpu ones marked with what they need here; exit 0
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: nothing needs marking")
    rc, out, err = cli(fixture_repo, "reproduce", "--profile", "full", "--dry-run")
    assert rc == 0, out + err
    (a,) = [x for x in out.splitlines() if x.startswith("  RUN  p98_fix/fig_a")]
    (b,) = [x for x in out.splitlines() if x.startswith("  RUN  p98_fix/tab_b")]
    assert "[full, cpu]" in a and "needs" not in a, a
    assert "[full, cuda]" in b and b.endswith("(no earlier result)  [needs CUDA]"), b
    assert "note: the full profile of a gpu artefact needs a GPU and none is available here" in out
    rc, out, err = cli(fixture_repo, "reproduce", "--profile", "full")        # a real run refuses, runs nothing
    assert rc == 2 and "1 run(s) cannot start here, so nothing was run" in err, out + err
    assert "p98_fix/tab_b [full]: needs CUDA" in err and "pass --device cpu to run it on the CPU anyway" in err
    assert not (fixture_repo / "outputs").exists()


def test_list_takes_the_same_targets_as_reproduce(fixture_repo):
    # issue 28, 3.2
    for target in ("p98", "p98_fix", "fix"):
        rc, out, err = cli(fixture_repo, "list", target)
        assert rc == 0 and "fig_a" in out and "tab_b" in out, (target, out + err)
    rc, out, _ = cli(fixture_repo, "list", "p98/tab_b")
    assert rc == 0 and "p98_fix" in out and "tab_b" in out and "fig_a" not in out
    rc, _, err = cli(fixture_repo, "list", "p99")
    assert rc == 2 and "unknown series 'p99'" in err


@pytest.mark.parametrize("opt,value,want", [("--timeout", "-1", "positive"), ("--timeout", "0", "positive"),
                                            ("--timeout", "nan", "positive"), ("--timeout", "inf", "positive"),
                                            ("--wait-workers", "-1", "non-negative"),
                                            ("--wait-workers", "nan", "non-negative")])
def test_durations_must_be_finite_and_positive(fixture_repo, opt, value, want):
    # issue 28, 3.2: `--timeout -1` used to be passed on to papermill
    rc, out, err = cli(fixture_repo, "reproduce", "p98", "--dry-run", opt, value)
    assert rc == 2 and f"argument {opt}: expected a {want} number of seconds, got '{value}'" in err, err
    rc, out, err = cli(fixture_repo, "reproduce", "p98", "--dry-run", "--wait-workers", "0", "--timeout", "2.5")
    assert rc == 0, err


def test_a_root_without_series_says_so(tmp_path):
    # issue 28, 3.2: not "unknown series 'p05'; known: " with an empty list, nor an empty listing
    (tmp_path / "nbs").mkdir()
    for args in (("list",), ("list", "p05"), ("reproduce", "--dry-run"), ("reproduce", "p05", "--dry-run")):
        rc, out, err = cli(tmp_path, *args)
        assert rc == 2 and f"no series found under {tmp_path.resolve()} (expected nbs/<series>/runs.yaml)" in err, \
            (args, out + err)
        assert "known:" not in err


def test_warns_once_when_run_inside_another_checkout(fixture_repo, monkeypatch):
    # issue 28, 3.2: a second clone's cwd silently used the installed checkout's notebooks and outputs
    import contextlib
    import io
    from neurips25 import core
    from neurips25.runner import main
    monkeypatch.chdir(fixture_repo / "nbs" / "p98_fix")          # make_repo writes settings.ini: a checkout
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["list", "p00"])                               # no --root: the installed checkout's p00
    err = err.getvalue()
    assert rc == 0 and err.count("neurips25: warning:") == 1, err
    here, ours = fixture_repo.resolve(), core.REPO_ROOT.resolve()
    assert f"inside the checkout {here}" in err and f"runs the checkout {ours}" in err and f"--root {here}" in err
    rc, _, err = cli(fixture_repo, "list")                       # --root chooses: no warning
    assert rc == 0 and "warning" not in err
    monkeypatch.chdir(core.REPO_ROOT)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["list", "p00"])
    assert rc == 0 and "warning" not in err.getvalue()          # inside the checkout it runs: nothing to say


# --- results on disk ------------------------------------------------------------------------------------------------

def test_manifest_fields_and_hashes(ran_small):
    d = out_dir(ran_small, "fig_a", "small")
    m = manifest(d)
    for k in ("series", "artefact", "notebook", "paper_ref", "profile", "parameters", "effective_parameters",
              "overrides", "run_key", "git", "versions", "device", "started", "finished", "duration_s", "status",
              "error", "files", "claims", "threads"):
        assert k in m, k
    assert (m["series"], m["artefact"], m["profile"], m["status"]) == ("p98_fix", "fig_a", "small", "ok")
    assert m["claims"] == 1
    assert set(m["git"]) == {"commit", "dirty"} and m["device"]["device"] == "cpu"
    assert m["versions"]["papermill"] != "absent" and len(m["run_key"]) == 64
    assert {f["path"] for f in m["files"]} == {"10_fig_a.ipynb", "params.csv", "params.md", "claims.json"}
    for f in m["files"]:
        data = (d / f["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f["sha256"] and len(data) == f["bytes"]
    # defect 8: two parallel runs on this machine's usable CPUs, unless OMP_NUM_THREADS is set (run_cli sets 1)
    assert m["threads"]["requested"] == 1 and m["threads"]["kernel"]["blas"]


def test_failure_is_reported_others_succeed_and_old_result_survives(ran_small):
    good = out_dir(ran_small, "fig_a", "small")
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    write_notebook(ran_small / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a", extra="raise RuntimeError('late')\n")
    r = run_cli(ran_small, "reproduce", "p98", "--profile", "small", "--jobs", "2", "--force", "--device", "cpu")
    assert r.returncode == 1 and "1 ok, 1 failed" in r.stdout, r.stdout + r.stderr
    line = [x for x in r.stdout.splitlines() if "FAILED nbs/p98_fix/10_fig_a.ipynb" in x]
    assert line and "cell 2" in line[0] and "RuntimeError: late" in line[0], r.stdout
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before          # the good result is untouched
    m = manifest(failed_dir(good))
    assert m["status"] == "failed" and m["error"]["ename"] == "RuntimeError" and m["error"]["cell_index"] == 2
    assert (failed_dir(good) / "10_fig_a.ipynb").is_file() and not leftovers(ran_small)
    report = (ran_small / "outputs" / "REPORT.md").read_text()
    assert "**failed** (cell 2: RuntimeError: late); last good result kept" in report
    write_notebook(ran_small / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a")          # a later success clears it
    r = run_cli(ran_small, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu")
    assert r.returncode == 0 and not failed_dir(good).exists()


def test_skip_if_unchanged_and_force(ran_small):
    args = ("reproduce", "p98/tab_b", "--profile", "small", "--device", "cpu")
    m1 = manifest(out_dir(ran_small, "tab_b", "small"))
    rc, out, _ = cli(ran_small, *args)
    assert "0 ok, 0 failed, 1 skipped" in out and "unchanged since its last success" in out
    assert manifest(out_dir(ran_small, "tab_b", "small"))["started"] == m1["started"]
    r = run_cli(ran_small, *args, "--force")
    assert "1 ok, 0 failed, 0 skipped" in r.stdout
    write_notebook(ran_small / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", extra="x = 1\n")
    rc, out, _ = cli(ran_small, *args, "--dry-run")
    assert "RUN  p98_fix/tab_b" in out and "changed since the last success" in out


def test_dry_run_shows_expected_times_from_the_last_manifests(ran_small):
    # issue 36: a changed run shows how long its last success took, and the plan its expected total and wall time
    for name in ("fig_a", "tab_b"):
        write_notebook(ran_small / "nbs" / "p98_fix" / f"1{0 if name == 'fig_a' else 1}_{name}.ipynb", name,
                       extra="y = 2\n")
    took = {n: manifest(out_dir(ran_small, n, "small"))["duration_s"] for n in ("fig_a", "tab_b")}
    rc, out, _ = cli(ran_small, "reproduce", "p98", "--profile", "small", "--dry-run", "--jobs", "2")
    assert rc == 0 and out.count("; last took ") == 2, out
    m = re.search(r"expected: 2 run\(s\), (\d+) s of runs \(their last successful times and the cached steps "
                  r"they reused\), about (\d+) s wall "
                  r"with --jobs 2$", out, re.M)
    assert m, out
    assert int(m[1]) == round(sum(took.values())) and int(m[2]) == round(max(took.values()))
    rc, out, _ = cli(ran_small, "reproduce", "p98", "--profile", "medium", "--dry-run")   # never ran at medium
    assert "expected: 2 run(s), none ran before at this profile, so no time is known" in out


def test_failure_with_the_same_run_key_is_kept(ran_small):
    # defect 4: a failure of the very inputs of the good result (a flaky run) is evidence, not a superseded version
    (job,) = plan(["p98/fig_a"], "small", None, "cpu", root=ran_small, outputs=ran_small / "outputs")
    assert job.action == "skip"
    failed = failed_dir(out_dir(ran_small, "fig_a", "small"))
    failed.mkdir()
    (failed / "manifest.json").write_text(json.dumps({"status": "failed", "run_key": job.key, "started": "9999"}))
    run_jobs([job], outputs=ran_small / "outputs", quiet=True)
    assert failed.is_dir()
    (failed / "manifest.json").write_text(json.dumps({"status": "failed", "run_key": "0" * 64, "started": "9999"}))
    run_jobs([job], outputs=ran_small / "outputs", quiet=True)
    assert not failed.exists()                              # a superseded version's failure goes


def test_report_rendering_and_readme_status(ran_small):
    rep = (ran_small / "outputs" / "REPORT.md").read_text()
    assert "## <a id=\"p98_fix\"></a>P98 — Fixture paper" in rep
    assert "| fig_a | Fig. 1 | small | ✓ | ok |" in rep and "| tab_b | Table 2 | small | ✓ | ok |" in rep
    assert "[params.csv](p98_fix/fig_a/small/params.csv)" in rep
    assert ("| **reproduced** | fig_a | preregistered | **n_positive**: n is positive | qualitative | 3 | — | — | n > 0 | "
            "— |") in rep                                                            # no git here: no stamp
    assert "| **total** | | 2 | 0 | 0 | 0 | 2 | 0 | 0 | 0 | 0 | 0 pass, 0 fail |" in rep
    readme = ran_small / "README.md"
    readme.write_text("# x\n<!-- status:start -->\n| P98 | Fixture | `nbs/p98_fix/` | not run yet |\n"
                      "<!-- status:end -->\n")
    rc, out, _ = cli(ran_small, "report", "--readme", str(readme))
    assert rc == 0 and "2/2 artefacts (small); claims: 2 reproduced |" in readme.read_text()


def _fake(root, art, slot, status="ok", claims=(), **kw):
    d = out_dir(root, art, slot)
    d = failed_dir(d) if status == "failed" else d
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": status, "started": "2025-01-01", **kw}))
    (d / "claims.json").write_text(json.dumps(list(claims)))


def test_report_escapes_counts_once_at_best_profile_and_separates_claim_kinds(fixture_repo):
    # defect 7 and claim kinds: no kernel, manifests written by hand (old claims without `kind` are pre-registered)
    c = dict(statement="a | b\nc", paper="x|y", ours="1\n2", criterion="p | q")
    _fake(fixture_repo, "fig_a", "small", claims=[dict(id="k", verdict="not reproduced", **c)], duration_s=3)
    _fake(fixture_repo, "fig_a", "medium", duration_s=9, claims=[
        dict(id="k", verdict="reproduced", **c),
        dict(id="k2", verdict="partly", kind="exploratory", seeds=[0, 1, 2, 3, 4, 5], interval=[0.25, 0.75], **c)])
    _fake(fixture_repo, "tab_b", "small", "failed", duration_s=42,
          error={"cell_index": 2, "ename": "ValueError", "evalue": "bad | value\nsecond line"})
    rep = render_report(fixture_repo, fixture_repo / "outputs")
    # once, at medium; hand-written manifests have no run key, so the counted result is stale
    assert "| P98 Fixture paper | [p98_fix](#p98_fix) | 1 | 1 | 1 | 0 | 1 | 0 | 0 | 0 | 1 | 0 pass, 0 fail |" in rep
    assert "| **total** | | 1 | 1 | 1 | 0 | 1 | 0 | 0 | 0 | 1 | 0 pass, 0 fail |" in rep
    assert "| tab_b | Table 2 | small | ✓ | **failed** (cell 2: ValueError: bad \\| value second line) | 42 s |" \
        in rep
    stale = "ok (**stale**: the code changed since this run)"
    assert f"| fig_a | Fig. 1 | small |  | {stale} | 3 s |" in rep and f"| fig_a | Fig. 1 | medium | ✓ | {stale} | 9 s |" in rep
    row = ("| *partly* | fig_a | exploratory | **k2**: a \\| b c | x\\|y | 1 2 | [0.25, 0.75] | 6 (0, 1, 2, 3, 4, …) | "
           "p \\| q | **unregistered** |")                                        # k2 is not in the fixture's claims.yaml
    assert row in rep
    assert "| **not reproduced** | fig_a |" not in rep                         # claims only at the best profile
    for line in rep.splitlines():
        if "| fig_a |" in line or line.startswith("| tab_b |"):
            assert len(line.replace("\\|", "").split("|")) in (9, 12), line   # no cell broke its row
    assert status_rows(fixture_repo, fixture_repo / "outputs")["p98_fix"] == \
        "1/2 artefacts (medium); claims: 1 reproduced; exploratory: 1 partly; 1 stale"


# --- paths, signals, locks, filesystem errors -----------------------------------------------------------------------

def test_relative_paths_and_a_run_without_outputs(fixture_repo):
    # defect 1: --root . and --outputs relout resolve against the cwd, never the kernel's (the notebook folder);
    # a notebook that records nothing is a failure, and the good result stays. Also: stale leftovers are swept.
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", body="x = 1\n")
    rel = fixture_repo / "relout" / "p98_fix"
    good = rel / "tab_b" / "small"
    good.mkdir(parents=True)
    (good / "manifest.json").write_text(json.dumps({"status": "ok", "run_key": "old", "started": "2025"}))
    (rel / "fig_a" / ".tmp-small-stale").mkdir(parents=True)
    (rel / "fig_a" / ".old-small-123").mkdir()
    r = run_cli(fixture_repo, "--outputs", "relout", "reproduce", "p98", "--profile", "small", "--device", "cpu",
                root_arg=".", cwd=fixture_repo)
    assert r.returncode == 1 and "1 ok, 1 failed" in r.stdout, r.stdout + r.stderr
    assert "NoOutputs: the notebook ran but recorded no outputs" in r.stdout
    assert manifest(rel / "fig_a" / "small")["status"] == "ok" and (rel / "fig_a" / "small" / "params.csv").is_file()
    assert manifest(good)["run_key"] == "old"                                    # the earlier result is kept
    assert manifest(failed_dir(good))["error"]["ename"] == "NoOutputs"
    assert not list((fixture_repo / "nbs").rglob("relout")) and not list((fixture_repo / "nbs").rglob("outputs"))
    assert sorted(p.name for p in (rel / "fig_a").iterdir()) == [".lock-small", "small"]      # swept
    assert (fixture_repo / "relout" / "REPORT.md").is_file()


def test_stale_leftovers_are_swept_by_a_run_that_skips_the_slot(ran_small):
    # issue 28, 3.4: a killed run's .tmp-/.old- folders used to stay until the artefact ran again
    base = ran_small / "outputs" / "p98_fix" / "fig_a"
    (base / ".tmp-small-dead1").mkdir()
    (base / ".tmp-small-dead1" / "params.csv").write_text("half written")
    (base / ".old-small-4242").mkdir()
    (base / ".tmp-medium-dead2").mkdir()                      # another slot's: swept under that slot's lock
    with SlotLock(base / "small"):                             # another runner holds it: its folders may be live
        rc, out, err = cli(ran_small, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu")
    assert rc == 0 and "0 ok, 0 failed, 1 skipped" in out, out + err
    assert (base / ".tmp-small-dead1").is_dir() and (base / ".old-small-4242").is_dir()
    rc, out, err = cli(ran_small, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu")
    assert rc == 0 and "0 ok, 0 failed, 1 skipped" in out, out + err
    assert sorted(p.name for p in base.iterdir()) == [".lock-small", ".tmp-medium-dead2", "small"]
    # a runner that finds, under the lock, that another made its result meanwhile sweeps before it returns
    (job,) = plan(["p98/fig_a"], "small", None, "cpu", root=ran_small, outputs=ran_small / "outputs")
    (base / ".tmp-small-dead3").mkdir()
    m = execute(job, ran_small / "outputs", ran_small)
    assert m["status"] == "skipped" and not (base / ".tmp-small-dead3").exists()


def test_unwritable_outputs_is_one_clear_message(fixture_repo):
    (fixture_repo / "afile").write_text("not a folder")
    rc, out, err = cli(fixture_repo, "--outputs", str(fixture_repo / "afile" / "out"), "reproduce", "p98/fig_a",
                       "--profile", "small")
    assert rc == 1 and "FAILED" in out and "StoreError: cannot write under" in out and "Traceback" not in out + err
    assert "cannot write" in err or "Not a directory" in err                     # the report cannot be written either


def _wait_for(pred, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.2)
    return False


def runner_tracebacks(err: str) -> list[str]:
    "Tracebacks in stderr with a frame in the runner's stack (neurips25, papermill, nbclient, dask)."
    # A kernel killed mid-run may log its own shutdown noise to the shared stderr (tornado: "Uncaught exception in
    # ZMQStream callback", frames in zmq/ipykernel only); that is the kernel dying as asked, not the runner failing.
    blocks = re.split(r"(?=Traceback \(most recent call last\))", err)[1:]
    ours = ("/neurips25/runner/", "/neurips25/core.py",
            *(f"site-packages/{m}/" for m in ("papermill", "nbclient", "dask", "distributed")))
    return [b for b in blocks if any(o in f for f in re.findall(r'File "([^"]+)"', b) for o in ours)]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigterm_stops_workers_and_kernels_and_installs_nothing(fixture_repo, jobs):
    # defect 2: SIGTERM like Ctrl-C; with --jobs 2 no orphaned worker installs a result later
    t0 = time.time()
    p = popen_cli(fixture_repo, "reproduce", "p98", "--profile", "small", "--jobs", jobs, "--device", "cpu",
                  "--set", "sleep=4")
    base = fixture_repo / "outputs" / "p98_fix"
    started = lambda: len(list(base.glob("*/.tmp-*/1*.ipynb"))) >= int(jobs)
    assert _wait_for(started), p.communicate(timeout=30)
    time.sleep(0.5)
    t_signal = time.time()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and "terminated (SIGTERM)" in err and not runner_tracebacks(err), out + err
    assert not leftovers(fixture_repo)
    time.sleep(max(0.0, t_signal + 4 + 2 - time.time()))   # past the notebooks' sleep: nothing may appear later
    assert not list(base.rglob("manifest.json")) and not leftovers(fixture_repo)


SETTLE_SCRIPT = textwrap.dedent("""\
    import asyncio, gc, os, signal, sys, threading, time
    from pathlib import Path
    from jupyter_core.utils import ensure_event_loop
    from neurips25.runner.executors import Terminated, execute, install_signal_handlers, plan
    root = Path(sys.argv[1])
    (job,) = plan(["p98_fix/fig_a"], "small", {"sleep": "6"}, "cpu", root=root, outputs=root / "outputs")
    install_signal_handlers()
    def stop():                  # SIGTERM while the kernel sleeps inside the cell
        while not list((root / "outputs" / "p98_fix").glob("*/.tmp-*/1*.ipynb")):
            time.sleep(0.05)
        time.sleep(2.5)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=stop, daemon=True).start()
    try:
        execute(job, root / "outputs", root)
        print("not terminated")
    except Terminated:
        pass
    loop = ensure_event_loop()
    print("pending", len(asyncio.all_tasks(loop)))
    loop.run_until_complete(asyncio.sleep(2.5))     # what a slow kernel shutdown gives the pollers: time to wake
    gc.collect()
    """)


def test_sigterm_inside_a_cell_leaves_no_nbclient_task_behind(fixture_repo):
    # CI saw "Kernel died while waiting for execute reply" and "Task exception was never retrieved" (a DeadKernelError
    # traceback) after a SIGTERM at --jobs 1: nbclient's cell task and its two pollers were left pending on the loop
    # and woke during the kernel's cleanup. Deterministic here: the loop runs on after the stop and must find nothing.
    r = subprocess.run([sys.executable, "-c", SETTLE_SCRIPT, str(fixture_repo)], capture_output=True, text=True,
                       env=cli_env(), cwd=str(fixture_repo), timeout=120)
    assert r.returncode == 0 and "pending 0" in r.stdout, r.stdout + r.stderr
    assert "Task exception was never retrieved" not in r.stderr and "Kernel died" not in r.stderr, r.stderr
    assert not leftovers(fixture_repo)


def test_two_runners_on_one_artefact_do_not_race(fixture_repo):
    # defect 3: started together, both plan the run; one takes the slot's lock, the other waits, then finds the
    # first one's result (same run key) and skips it; no "Directory not empty", no leftovers
    args = ("reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu", "--set", "sleep=5")
    procs = [popen_cli(fixture_repo, *args), popen_cli(fixture_repo, *args)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    text = sorted(o for o, _ in outs)
    assert all("RUN  p98_fix/fig_a" in o for o in text), text
    ran = [o for o in text if "1 ok, 0 failed, 0 skipped" in o]
    waited = [o for o in text if "0 ok, 0 failed, 1 skipped" in o and "waiting:" in o]
    assert len(ran) == 1 and len(waited) == 1, text
    (d,) = (fixture_repo / "outputs" / "p98_fix" / "fig_a").glob("small.set-*")
    assert manifest(d)["status"] == "ok" and not leftovers(fixture_repo)


def test_kernel_threads_respect_omp_and_affinity(monkeypatch):
    # defect 8
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert kernel_threads(2) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert kernel_threads(1) == 6 and kernel_threads(4) == 1 and kernel_threads(2) == 3


def test_git_state_dirty_means_the_code_not_the_outputs(tmp_path):
    # a reproduction rewrites committed outputs/ (REPORT.md, reference results) as it runs: that is not "dirty code"
    from neurips25.runner.store import git_state
    g = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)
    g("init", "-q"); (tmp_path / "outputs").mkdir(); (tmp_path / "outputs" / "REPORT.md").write_text("a\n")
    (tmp_path / "code.py").write_text("x = 1\n"); g("add", "."); g("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "outputs" / "REPORT.md").write_text("b\n")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path)["dirty"] is True
