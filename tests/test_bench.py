"""`make bench` / `neurips25 bench` (issue 36): every series' benchmark in its own one-thread process, its headline
ratio recorded in bench.json, and the README's performance table rendered from that file alone (checkable in CI
without running anything)."""
import json
import subprocess
import sys

import pytest

from conftest import REPO, cli
from neurips25.runner import bench


def test_readme_table_is_the_rendering_of_the_recorded_results():
    # what CI checks: README.md's block == render(outputs/bench.json, or on a fresh clone the record the README keeps
    # in its block, or "none recorded"); nothing is run
    rc, out, err = cli(REPO, "bench", "readme", "--check")
    assert rc == 0, out + err
    js = REPO / "outputs" / "bench.json"
    rep = json.loads(js.read_text()) if js.is_file() else bench.readme_record(REPO / "README.md")
    assert bench.readme_is_current(REPO / "README.md", rep)


def test_a_fresh_clone_keeps_the_recorded_table(tmp_path):
    # no outputs/bench.json (it is per machine and not committed): `readme` keeps the README's recorded table and
    # `--check` verifies it against the record in the block; a hand edit of the table is caught
    readme, js = tmp_path / "README.md", tmp_path / "bench.json"
    readme.write_text(f"# t\n\n{bench.START}\nstale\n{bench.END}\n")
    js.write_text(json.dumps(REP))
    args = ("bench", "readme", "--json", str(js), "--readme-file", str(readme))
    assert cli(REPO, *args)[0] == 0
    text = readme.read_text()
    js.unlink()
    rc, out, err = cli(REPO, *args)
    assert rc == 0 and "keeps its recorded table" in out and readme.read_text() == text
    rc, out, err = cli(REPO, *args, "--check")
    assert rc == 0 and "the README's own record" in out
    readme.write_text(text.replace("17.2×", "99×"))
    rc, out, err = cli(REPO, *args, "--check")
    assert rc == 1 and "not the rendering of the README's own record" in err


REP = {"finished": "2026-01-02T03:04:05+00:00", "host": {"cpu": "Some CPU", "cpus": 2, "python": "3.11.7",
       "numpy": "2.1", "torch": "2.13.0"}, "threads": 1, "benchmarks": [
    {"id": "P03", "module": "neurips25.bias_amplification.benchmark", "status": "ok", "seconds": 20.0,
     "headline": {"what": "GD path", "ours": "gd_path", "baseline": "explicit loop", "ratio": 17.16, "ours_s": 0.2136,
                  "baseline_s": 3.665, "note": ""}}]}


def test_rendering_is_deterministic_across_processes_and_clocks(tmp_path):
    js = tmp_path / "bench.json"
    js.write_text(json.dumps(REP))
    code = ("import json, sys; from neurips25.runner.bench import render_bench; "
            "sys.stdout.write(render_bench(json.load(open(sys.argv[1]))))")
    outs = {subprocess.run([sys.executable, "-c", code, str(js)], capture_output=True, text=True, check=True,
                           env={"TZ": tz, "PATH": "/usr/bin:/bin", "LC_ALL": "C"}).stdout for tz in ("UTC", "Asia/Tokyo")}
    assert len(outs) == 1 and outs == {bench.render_bench(REP)}
    assert "| P03 | GD path (`neurips25.bias_amplification.benchmark`) | gd_path (0.214 s) | explicit loop (3.67 s) | " \
           "17.2× |  |" in outs.pop()


def test_readme_writes_then_checks(tmp_path):
    readme, js = tmp_path / "README.md", tmp_path / "bench.json"
    readme.write_text(f"# t\n\n{bench.START}\nstale\n{bench.END}\n")
    js.write_text(json.dumps(REP))
    args = ("bench", "readme", "--json", str(js), "--readme-file", str(readme))
    assert cli(REPO, *args, "--check")[0] == 1                                # stale: CI fails
    assert cli(REPO, *args)[0] == 0 and "17.2×" in readme.read_text()
    assert cli(REPO, *args, "--check")[0] == 0
    rep = json.loads(js.read_text())
    rep["benchmarks"][0]["headline"]["ratio"] = 3.0                           # a new run: the table must follow
    js.write_text(json.dumps(rep))
    rc, out, err = cli(REPO, *args, "--check")
    assert rc == 1 and "bench readme" in err
    readme.write_text("# no block\n")
    rc, out, err = cli(REPO, *args)
    assert rc == 2 and "has no <!-- bench:start -->" in err


def test_bad_invocations():
    rc, out, err = cli(REPO, "bench", "frob")
    assert rc == 2 and "must be run or readme" in err
    rc, out, err = cli(REPO, "bench", "run", "p99", "--quick")
    assert rc == 2 and "unknown benchmark 'p99'" in err


def test_run_quick_in_a_subprocess_and_a_partial_run_keeps_the_others(tmp_path):
    js = tmp_path / "bench.json"
    js.write_text(json.dumps({**REP, "benchmarks": [
        {"id": "P01", "module": "neurips25.eok.benchmark", "status": "ok", "headline": {"ratio": 2.0}},
        {"id": "P03", "module": "neurips25.bias_amplification.benchmark", "status": "failed", "error": "old"}]}))
    r = subprocess.run([sys.executable, "-m", "neurips25.runner.cli", "bench", "run", "P03", "--quick", "--json", str(js)],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "P03: gd_path (closed form)" in r.stdout and "explicit NumPy GD loop" in r.stdout and "bench: 1 ok" in r.stdout
    rep = json.loads(js.read_text())
    assert [b["id"] for b in rep["benchmarks"]] == ["P01", "P03"] and rep["ok"]
    p01, p03 = rep["benchmarks"]
    assert p01["headline"] == {"ratio": 2.0}                                 # kept as it was
    assert p03["status"] == "ok" and p03["headline"]["ratio"] > 1 and p03["argv"] == bench.BENCHMARKS["P03"][2]
    assert rep["threads"] == 1 and rep["host"]["cpus"] >= 1


def test_a_failing_benchmark_is_recorded_and_fails_the_run(monkeypatch):
    bad = ("neurips25.bias_amplification.benchmark", [], ["--steps", "10", "--every", "1", "2"], bench._own)
    monkeypatch.setitem(bench.BENCHMARKS, "P03", bad)                        # argparse refuses: one --every per step
    rec = bench.run_one("P03", quick=True)
    assert rec["status"] == "failed" and rec["error"].startswith("SystemExit"), rec
    quick = ("neurips25.bias_amplification.benchmark", [], ["--steps", "500", "--every", "1", "--repeats", "1"],
             bench._own)
    monkeypatch.setitem(bench.BENCHMARKS, "P03", quick)
    rec = bench.run_one("P03", quick=True)
    assert rec["status"] == "ok" and rec["headline"]["ratio"] > 0 and rec["argv"] == quick[2]
    assert rec["headline"]["baseline"] == "explicit NumPy GD loop"
    broken = ("neurips25.bias_amplification.benchmark", [], quick[2], bench._lm)   # an adapter that cannot read it
    monkeypatch.setitem(bench.BENCHMARKS, "P03", broken)
    rec = bench.run_one("P03", quick=True)
    assert rec["status"] == "failed" and "headline" not in rec, rec
