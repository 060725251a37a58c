"""Freed threads (issue 36): a run starts with the CPUs' share of the runs in flight with it; once no run waits to
start and one finishes, the runs still in flight get the threads it freed, from their next code cell on."""
import json

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from conftest import PARAMS, make_repo, out_dir, run_cli, write_notebook

# the long run: it waits (cell by cell, at most 40 x 0.5 s) until its kernel's threads were raised to 4, recording
# the threads torch, the BLAS pools and OMP_NUM_THREADS report before each cell
HEAD = """\
import os, time
import pandas as pd
import torch, threadpoolctl
from neurips25.core import *
out = start_run("p98_fix", "fig_a")
seen = []
def look():
    blas = sorted({i["num_threads"] for i in threadpoolctl.threadpool_info()})
    seen.append({"torch": torch.get_num_threads(), "omp": os.environ["OMP_NUM_THREADS"], "blas": str(blas)})
look()
"""
WAIT = "if os.environ['OMP_NUM_THREADS'] != '4':\n    time.sleep(0.5)\nlook()\n"
TAIL = """\
save_table(pd.DataFrame(seen), "seen")
record_claim("n_positive", "n is positive", "qualitative", n, "n > 0", "reproduced" if n > 0 else "not reproduced")
"""


def long_notebook(path):
    params = new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    cells = [params, new_code_cell(HEAD)] + [new_code_cell(WAIT) for _ in range(40)] + [new_code_cell(TAIL)]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def manifest(root, art):
    return json.loads((out_dir(root, art, "small") / "manifest.json").read_text())


def test_runs_in_flight_get_the_freed_threads(tmp_path):
    root = make_repo(tmp_path / "repo")
    long_notebook(root / "nbs" / "p98_fix" / "10_fig_a.ipynb")
    env = {"OMP_NUM_THREADS": "", "NEURIPS25_CPUS": "4"}      # 4 CPUs shared out, whatever this machine has
    r = run_cli(root, "reproduce", "p98", "--profile", "small", "--device", "cpu", "--jobs", "2", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    a, b = manifest(root, "fig_a"), manifest(root, "tab_b")
    # both started while the other ran (2 workers, 4 CPUs): 2 threads each; tab_b ended first and freed its 2
    assert a["threads"]["requested"] == 2 and b["threads"]["requested"] == 2
    assert b["threads"]["raised"] == [] and b["threads"]["kernel"]["omp_num_threads"] == "2"
    raised = a["threads"]["raised"]
    assert len(raised) == 1 and raised[0]["threads"] == 4 and raised[0]["cell"] >= 2, raised
    k = a["threads"]["kernel"]
    assert k["torch"] == 4 and k["omp_num_threads"] == "4", k
    assert all(p["threads"] == 4 for p in k["blas"]), k          # every BLAS/OpenMP pool raised with it
    import pandas as pd
    seen = pd.read_csv(out_dir(root, "fig_a", "small") / "seen.csv")
    assert seen.torch.iloc[0] == 2 and seen.torch.iloc[-1] == 4          # the notebook saw 2 threads, then 4
    assert set(seen.torch) == {2, 4} and (seen.torch.diff().fillna(0) >= 0).all()
    # a run that starts alone (the only one left: one run with --jobs 2) gets every CPU from the start
    r = run_cli(root, "reproduce", "p98/tab_b", "--profile", "small", "--device", "cpu", "--jobs", "2", "--force",
                **env)
    assert r.returncode == 0, r.stdout + r.stderr
    b = manifest(root, "tab_b")
    assert b["threads"]["requested"] == 4 and b["threads"]["raised"] == [], b["threads"]
    assert b["threads"]["kernel"]["omp_num_threads"] == "4"


def test_omp_num_threads_set_by_the_user_is_never_raised(tmp_path):
    root = make_repo(tmp_path / "repo")
    write_notebook(root / "nbs" / "p98_fix" / "10_fig_a.ipynb", "fig_a", extra="time.sleep(3)\n")
    r = run_cli(root, "reproduce", "p98", "--profile", "small", "--device", "cpu", "--jobs", "2",
                OMP_NUM_THREADS="1", NEURIPS25_CPUS="4")
    assert r.returncode == 0, r.stdout + r.stderr
    for art in ("fig_a", "tab_b"):
        t = manifest(root, art)["threads"]
        assert t["requested"] == 1 and t["raised"] == [] and t["kernel"]["omp_num_threads"] == "1", t


# a run whose only long cell counts its steps with a progress bar (as lm.train_lm does; hidden here, as in CI): the
# freed threads reach it inside that cell, at a step, not at the next cell
LOOP = """\
bar = progress(total=240, desc="steps")
for i in range(240):
    if os.environ["OMP_NUM_THREADS"] == "4":
        break
    time.sleep(0.25)
    bar.update(1)
    look()
bar.close()
look()
"""


def test_threads_are_raised_inside_a_long_cell(tmp_path):
    root = make_repo(tmp_path / "repo")
    params = new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, new_code_cell(HEAD), new_code_cell(LOOP), new_code_cell(TAIL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "nbs" / "p98_fix" / "10_fig_a.ipynb")
    # tab_b ends (and frees its 2 threads) ~10 s in, while fig_a is inside its long cell (at most 60 s)
    write_notebook(root / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", extra="time.sleep(10)\n")
    r = run_cli(root, "reproduce", "p98", "--profile", "small", "--device", "cpu", "--jobs", "2",
                OMP_NUM_THREADS="", NEURIPS25_CPUS="4")
    assert r.returncode == 0, r.stdout + r.stderr
    a = manifest(root, "fig_a")
    assert a["threads"]["requested"] == 2, a["threads"]
    raised = a["threads"]["raised"]
    assert len(raised) == 1 and raised[0]["threads"] == 4 and raised[0]["within_cell"], raised
    executed = nbformat.read(out_dir(root, "fig_a", "small") / "10_fig_a.ipynb", as_version=4)
    assert "bar = progress" in executed.cells[raised[0]["cell"]].source     # the long cell, where it happened
    assert a["threads"]["kernel"]["torch"] == 4 and a["threads"]["kernel"]["omp_num_threads"] == "4", a["threads"]
    import pandas as pd
    seen = pd.read_csv(out_dir(root, "fig_a", "small") / "seen.csv")
    assert seen.torch.iloc[0] == 2 and seen.torch.iloc[-1] == 4 and (seen.torch.diff().fillna(0) >= 0).all()


def test_a_run_others_wait_for_gets_the_cpus_they_would_take(tmp_path):
    # tab_b waits for fig_a (`after:`): it cannot start while fig_a runs, so fig_a starts with all 4 CPUs, not 2
    root = make_repo(tmp_path / "repo")
    text = (root / "nbs" / "p98_fix" / "runs.yaml").read_text()
    (root / "nbs" / "p98_fix" / "runs.yaml").write_text(text.replace("  tab_b:\n", "  tab_b:\n    after: [fig_a]\n"))
    r = run_cli(root, "reproduce", "p98", "--profile", "small", "--device", "cpu", "--jobs", "2",
                OMP_NUM_THREADS="", NEURIPS25_CPUS="4")
    assert r.returncode == 0, r.stdout + r.stderr
    for art in ("fig_a", "tab_b"):
        t = manifest(root, art)["threads"]
        assert t["requested"] == 4 and t["raised"] == [] and t["kernel"]["omp_num_threads"] == "4", (art, t)
