"""Shared fixtures: a throw-away repository with tiny parameterized notebooks, run through the real `neurips25` CLI."""
import os, subprocess, sys, textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "neurips25.runner"]

BODY = textwrap.dedent("""\
    import pandas as pd
    from neurips25.core import *
    out = start_run("p98_fix", "{artefact}")
    if fail: raise ValueError("boom on purpose in {artefact}")
    save_table(pd.DataFrame({{"n": [n], "scale": [scale], "label": [label]}}), "params")
    record_claim("n_positive", "n is positive", "qualitative", n, "n > 0", "reproduced" if n > 0 else "not reproduced")
    """)


def write_notebook(path: Path, artefact: str, tagged: bool = True, extra: str = ""):
    params = new_code_cell("n: int = 3  # a count\nscale: float = 1.0  # a scale\nlabel: str = 'a'  # a label\n"
                           "fail: bool = False  # raise on purpose")
    if tagged: params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[new_markdown_cell(f"# fixture {artefact}"), params,
                             new_code_cell(BODY.format(artefact=artefact) + extra)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


RUNS = textwrap.dedent("""\
    series: p98_fix
    module: fix
    paper: {id: P98, title: Fixture paper, authors: Nobody et al., url: "https://example.org/p98"}
    artefacts:
      fig_a:
        notebook: 10_fig_a.ipynb
        paper_ref: Fig. 1
        gpu: false
        small: {n: 3}
        medium: {n: 30, label: med}
        full: {n: 300}
      tab_b:
        notebook: 11_tab_b.ipynb
        paper_ref: Table 2
        gpu: true
        small: {}
        medium: {n: 5}
        full: {n: 50}
    """)


@pytest.fixture
def fixture_repo(tmp_path):
    "A repository with one series (two artefacts) in tmp_path."
    (tmp_path / "settings.ini").write_text("[DEFAULT]\nlib_name = neurips25\n")
    d = tmp_path / "nbs" / "p98_fix"; d.mkdir(parents=True)
    write_notebook(d / "10_fig_a.ipynb", "fig_a")
    write_notebook(d / "11_tab_b.ipynb", "tab_b")
    (d / "runs.yaml").write_text(RUNS)
    return tmp_path


def run_cli(root: Path, *args: str, timeout: int = 300):
    "Run `neurips25 --root ROOT ARGS...` in a subprocess; return the CompletedProcess."
    env = {**os.environ, "NEURIPS25_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    env.pop("IN_TEST", None)
    return subprocess.run([*CLI, "--root", str(root), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(root))
