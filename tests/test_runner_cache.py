"""Cached work a run reused (issue 36): the manifest records what a run found in `core.cached`'s cache and what
computing it took, and the plan counts it, so a fresh clone (an empty cache) is not told that a notebook which here
read an 18-minute step from the cache takes seconds — and is not started last because of it."""
import json
from pathlib import Path

from conftest import make_repo, run_cli, write_notebook
from neurips25.runner.executors import plan, reused_seconds

BODY = ("from neurips25.core import *\nimport time\nimport pandas as pd\n"
        "out = start_run('p98_fix', '{art}')\n"
        "v = cached('p98_slow', {{'k': 1}}, lambda: time.sleep(3) or 7, modules=['neurips25.core'])\n"
        "save_table(pd.DataFrame({{'v': [v]}}), 'v')\n")


def _manifest(root: Path, art: str) -> dict:
    return json.loads((root / "outputs" / "p98_fix" / art / "small" / "manifest.json").read_text())


def test_manifest_records_cache_reuse_and_the_plan_counts_it(tmp_path):
    root = make_repo(tmp_path / "repo")
    y = root / "nbs" / "p98_fix" / "runs.yaml"
    y.write_text(y.read_text().replace("  tab_b:\n", "  tab_b:\n    after: [fig_a]\n"))
    for art, nb in (("fig_a", "10_fig_a.ipynb"), ("tab_b", "11_tab_b.ipynb")):
        write_notebook(root / "nbs" / "p98_fix" / nb, art, body=BODY.format(art=art))
    env = {"NEURIPS25_CACHE_DIR": str(tmp_path / "cache"), "NEURIPS25_CACHE": "1"}   # whatever the caller set
    args = ("reproduce", "--profile", "small", "--device", "cpu")
    r = run_cli(root, *args, "p98/fig_a", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    (rec,) = _manifest(root, "fig_a")["cache"]                  # computed: 3 s, written beside the entry
    assert rec["name"] == "p98_slow" and rec["hit"] is False and 3.0 <= rec["compute_s"] < 10, rec
    side = next((tmp_path / "cache" / "p98_slow").glob("*.json"))
    assert json.loads(side.read_text())["compute_s"] == rec["compute_s"] and side.stem.startswith(rec["key"])
    r = run_cli(root, *args, "p98/fig_a", "--force", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    m = _manifest(root, "fig_a")
    (hit,) = m["cache"]                                          # reused: the time computing it took, not now's
    assert hit["hit"] is True and hit["compute_s"] == rec["compute_s"] and hit["key"] == rec["key"]
    (job,) = plan(["p98/fig_a"], "small", None, "cpu", force=True, root=root, outputs=root / "outputs")
    assert job.last_s == m["duration_s"] and abs(job.expected_s - (m["duration_s"] + rec["compute_s"])) < 0.02
    assert "with an empty cache" in job.line(), job.line()
    # tab_b waits for fig_a, which makes the entry: its reuse is not counted again
    r = run_cli(root, *args, "p98/tab_b", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _manifest(root, "tab_b")["cache"][0]["hit"] is True
    fig, tab = plan(["p98"], "small", None, "cpu", force=True, root=root, outputs=root / "outputs")
    assert tab.expected_s == tab.last_s == _manifest(root, "tab_b")["duration_s"] and fig.expected_s > fig.last_s
    assert "with an empty cache" not in tab.line()


def test_reused_seconds():
    m = {"cache": [{"name": "a", "key": "k1", "hit": True, "compute_s": 100.0},
                   {"name": "a", "key": "k2", "hit": False, "compute_s": 5.0},       # computed: in the run's own time
                   {"name": "b", "key": "k3", "hit": True, "compute_s": None},       # made before the log existed
                   {"name": "c", "key": "k4", "hit": True, "compute_s": 40.0}]}
    assert reused_seconds(m, set()) == 140.0
    assert reused_seconds(m, {("c", "k4")}) == 100.0
    assert reused_seconds({}, set()) == 0.0 and reused_seconds(None, set()) == 0.0


def test_shared_entry_counted_once_per_plan():
    "Two runs that reused one entry (neither made it): the first counts it; a run of the plan that made it: nobody."
    from types import SimpleNamespace as NS
    from neurips25.runner.executors import _count_reuse_once
    job = lambda name, last: NS(art=NS(id=name), last_s=last, expected_s=None)
    hit = lambda k, s: {"name": "e", "key": k, "hit": True, "compute_s": s}
    a, b, c, d = job("s/a", 10.0), job("s/b", 5.0), job("s/c", 7.0), job("s/d", None)
    logs = {"s/a": ([hit("k1", 300.0), hit("k2", 60.0)], set()),
            "s/b": ([hit("k1", 300.0)], set()),                                # shares k1 with a: not again
            "s/c": ([hit("k2", 60.0), {"name": "e", "key": "k3", "hit": False, "compute_s": 2.0}], {("e", "k2")}),
            "s/d": ([hit("k9", 1.0)], set())}                                  # never timed: left alone
    _count_reuse_once([a, b, c, d], logs)
    assert (a.expected_s, b.expected_s, c.expected_s, d.expected_s) == (370.0, 5.0, 7.0, None)
    maker = job("s/m", 400.0)                                                  # made k1 at its last run
    logs["s/m"] = ([{"name": "e", "key": "k1", "hit": False, "compute_s": 300.0}], set())
    _count_reuse_once([a, b, maker], logs)
    assert (a.expected_s, b.expected_s, maker.expected_s) == (70.0, 5.0, 400.0)
