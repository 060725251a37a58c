"""Shared fixtures: a throw-away repository with tiny parameterized notebooks, run through the real `neurips25` CLI."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "neurips25.runner.cli"]

PARAMS = ("n: int = 3  # a count\nscale: float = 1.0  # a scale\nlabel: str = 'a'  # a label\n"
          "fail: bool = False  # raise on purpose\nsleep: float = 0.0  # seconds to sleep first")

BODY = textwrap.dedent("""\
    import time
    import pandas as pd
    from neurips25.core import *
    out = start_run("p98_fix", "{artefact}")
    time.sleep(sleep)
    if fail: raise ValueError("boom on purpose in {artefact}")
    save_table(pd.DataFrame({{"n": [n], "scale": [scale], "label": [label]}}), "params")
    record_claim("n_positive", "n is positive", "qualitative", n, "n > 0", "reproduced" if n > 0 else "not reproduced")
    """)


def write_notebook(path: Path, artefact: str, tagged: bool = True, extra: str = "", body: str | None = None):
    "A fixture figure notebook: markdown, parameters cell, one code cell (BODY, or `body`) + `extra`."
    params = new_code_cell(PARAMS)
    if tagged:
        params.metadata["tags"] = ["parameters"]
    code = (BODY.format(artefact=artefact) if body is None else body) + extra
    nb = new_notebook(cells=[new_markdown_cell(f"# fixture {artefact}"), params, new_code_cell(code)])
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


CLAIM = "{statement: n is positive, paper: qualitative, criterion: n > 0, kind: preregistered}"
CLAIMS = textwrap.dedent(f"""\
    series: p98_fix
    artefacts:
      fig_a:
        n_positive: {CLAIM}
      tab_b:
        n_positive: {CLAIM}
    """)


def make_repo(root: Path) -> Path:
    "A repository with one series (two artefacts, their claims registered) in `root`."
    root.mkdir(parents=True, exist_ok=True)
    (root / "settings.ini").write_text("[DEFAULT]\nlib_name = neurips25\n")
    d = root / "nbs" / "p98_fix"
    d.mkdir(parents=True)
    write_notebook(d / "10_fig_a.ipynb", "fig_a")
    write_notebook(d / "11_tab_b.ipynb", "tab_b")
    (d / "runs.yaml").write_text(RUNS)
    (d / "claims.yaml").write_text(CLAIMS)
    return root


@pytest.fixture
def fixture_repo(tmp_path):
    "A fresh fixture repository (nothing run yet)."
    return make_repo(tmp_path / "repo")


@pytest.fixture(scope="session")
def _ran_small(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("ran") / "repo")
    r = run_cli(root, "reproduce", "p98", "--profile", "small", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    return root


@pytest.fixture
def ran_small(_ran_small, tmp_path):
    "A copy of a fixture repository whose two artefacts ran at the small profile (one run per session)."
    dst = tmp_path / "repo"
    shutil.copytree(_ran_small, dst)
    return dst


def cli_env(**extra) -> dict:
    env = {**os.environ, "NEURIPS25_PROGRESS": "0", "OMP_NUM_THREADS": "1", **extra}
    env.pop("IN_TEST", None)
    return env


def run_cli(root: Path, *args: str, timeout: int = 300, cwd: Path | None = None, root_arg: str | None = None, **env):
    "Run `neurips25 --root ROOT ARGS...` in a subprocess; return the CompletedProcess."
    return subprocess.run([*CLI, "--root", root_arg or str(root), *args], capture_output=True, text=True,
                          timeout=timeout, env=cli_env(**env), cwd=str(cwd or root))


def popen_cli(root: Path, *args: str, **env) -> subprocess.Popen:
    "Start `neurips25 --root ROOT ARGS...` without waiting."
    return subprocess.Popen([*CLI, "--root", str(root), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=cli_env(**env), cwd=str(root))


def cli(root: Path, *args: str):
    "`neurips25 --root ROOT ARGS` in this process (for runs that start no kernel): (rc, stdout, stderr)."
    import contextlib
    import io
    from neurips25.runner import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["--root", str(root), *args])
    return rc, out.getvalue(), err.getvalue()


def out_dir(root: Path, art: str, slot: str) -> Path:
    return root / "outputs" / "p98_fix" / art / slot


@pytest.fixture
def notebook_defaults():
    "A function: notebook path -> the defaults of its `parameters` cell, read by the runner's own parser."
    from neurips25.runner.registry import notebook_parameters
    return lambda nb_path: {name: p["default"] for name, p in notebook_parameters(nb_path).items()}


@pytest.fixture(scope="module")
def p09_tiny():
    ("P09's smallest world, one per test module: SynthTOFU (10 authors x 3 questions), its word tokenizer and an "
     "untrained one-layer Llama.")
    import torch
    from neurips25 import lm
    from neurips25.unlearning.data import synth_tofu, synth_tokenizer
    torch.set_num_threads(1)
    bench = synth_tofu(10, 3, seed=0)
    tok = synth_tokenizer(bench)
    return bench, tok, lm.tiny_lm(tok, n_layer=1, d_model=32, n_head=2, n_ctx=64, seed=0, device="cpu")
