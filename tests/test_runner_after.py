"""`after:` in runs.yaml (issue 36): an artefact that reads another's cached step (P09's SmolLM2 headline reads the
target models tab_smollm2_targets trains) starts only once that one has finished, when both run in one reproduction,
instead of holding a worker while it waits on the cache's lock."""
import datetime as dt
import json
from pathlib import Path

import pytest

from conftest import RUNS, make_repo, run_cli
from neurips25.runner.executors import Job, schedule
from neurips25.runner.registry import RunnerError, load_series


def with_after(root: Path, after: str) -> Path:
    "The fixture series with `after: <after>` on tab_b."
    text = RUNS.replace("  tab_b:\n", f"  tab_b:\n    after: {after}\n")
    (root / "nbs" / "p98_fix" / "runs.yaml").write_text(text)
    return root / "nbs" / "p98_fix" / "runs.yaml"


def test_after_is_validated(tmp_path):
    root = make_repo(tmp_path / "repo")
    s = load_series(with_after(root, "[fig_a]"))
    assert [a.after for a in s.artefacts] == [(), ("fig_a",)]
    for bad, msg in (("[nope]", "not another artefact"), ("[tab_b]", "not another artefact"), ("{x: 1}", "must be")):
        with pytest.raises(RunnerError, match=msg):
            load_series(with_after(root, bad))
    cyc = RUNS.replace("  tab_b:\n", "  tab_b:\n    after: fig_a\n").replace("  fig_a:\n", "  fig_a:\n    after: tab_b\n")
    (root / "nbs" / "p98_fix" / "runs.yaml").write_text(cyc)
    with pytest.raises(RunnerError, match="cycle"):
        load_series(root / "nbs" / "p98_fix" / "runs.yaml")


def test_schedule_puts_a_run_behind_what_it_waits_for(tmp_path):
    root = make_repo(tmp_path / "repo")
    fig_a, tab_b = load_series(with_after(root, "[fig_a]")).artefacts
    job = lambda art, t: Job(art=art, profile="small", params={}, effective={}, overrides={}, device="cpu", key="k",
                             action="run", reason="new", expected_s=t)
    # tab_b is the longer run, so longest-first alone would start it first
    order = schedule([job(fig_a, 5.0), job(tab_b, 50.0)])
    assert [j.art.name for j in order] == ["fig_a", "tab_b"]
    order = schedule([job(fig_a, 50.0), job(tab_b, None)])     # never-timed runs first, but not before fig_a
    assert [j.art.name for j in order] == ["fig_a", "tab_b"]


def test_after_holds_with_two_workers(tmp_path):
    root = make_repo(tmp_path / "repo")
    with_after(root, "[fig_a]")
    r = run_cli(root, "reproduce", "p98", "--profile", "small", "--jobs", "2", "--device", "cpu", "--set", "sleep=3")
    assert r.returncode == 0, r.stdout + r.stderr
    ms = {a: json.loads(next((root / "outputs" / "p98_fix" / a).glob("small.set-*/manifest.json")).read_text())
          for a in ("fig_a", "tab_b")}
    assert all(m["status"] == "ok" for m in ms.values()), ms
    t = lambda s: dt.datetime.fromisoformat(s)
    assert t(ms["tab_b"]["started"]) >= t(ms["fig_a"]["finished"]), ms
