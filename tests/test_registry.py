"""The real registry: every notebook named in a runs.yaml exists, has a parameters cell, and its profiles fit it."""
import ast
from pathlib import Path

import nbformat
import pytest

from neurips25 import core
from neurips25.runner import load_registry, notebook_parameters, coerce_parameters, PROFILES

ERRORS: dict = {}
REGISTRY = load_registry(core.REPO_ROOT, errors=ERRORS)     # a broken runs.yaml fails one test, not the collection
ARTEFACTS = [a for s in REGISTRY for a in s.artefacts]


def test_registry_is_not_empty():
    assert ARTEFACTS, "no runs.yaml found under nbs/"


@pytest.mark.parametrize("folder", sorted(ERRORS) or ["-"])
def test_every_runs_yaml_is_valid(folder):
    assert folder not in ERRORS, ERRORS.get(folder)


@pytest.mark.parametrize("art", ARTEFACTS, ids=[a.id for a in ARTEFACTS])
def test_notebook_exists_has_parameters_and_profiles_fit(art):
    assert art.notebook.is_file(), f"{art.id}: {art.notebook} missing"
    declared = notebook_parameters(art.notebook)            # raises if the parameters tag is lost
    for p in PROFILES: coerce_parameters(art.profiles[p], declared, f"{art.id} [{p}]")
    # the small profile IS the notebook's defaults (nbdev_test runs the defaults)
    for k, v in art.profiles["small"].items():
        assert declared[k]["default"] == v, \
            f"{art.id}: small {k}={v!r} but the notebook's default is {declared[k]['default']!r}"


@pytest.mark.parametrize("art", ARTEFACTS, ids=[a.id for a in ARTEFACTS])
def test_figure_notebook_declares_its_artefact_and_exports_nothing(art):
    nb = nbformat.read(art.notebook, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert f'start_run("{art.series}", "{art.name}")' in src, \
        f"{art.id}: notebook must call start_run(\"{art.series}\", \"{art.name}\")"
    assert "#| export" not in src and "#| default_exp" not in src, f"{art.id}: figure notebooks export nothing"
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])][0]
    for line in params.source.splitlines():
        if "#" in line: assert "=" not in line.split("#", 1)[1], f"{art.id}: '=' in a parameter comment ({line!r})"


def test_series_folders_and_modules_follow_the_conventions():
    for s in REGISTRY:
        assert s.folder == "p00_demo" or (s.number and s.module), s.folder
        if s.module: assert (core.REPO_ROOT / "neurips25" / s.module).is_dir(), f"module neurips25.{s.module} missing"
        assert s.paper.get("title") and s.paper.get("id"), f"{s.folder}: paper metadata missing in runs.yaml"


def test_index_notebook_carries_the_readme():
    nb = nbformat.read(core.REPO_ROOT / "nbs" / "index.ipynb", as_version=4)
    md = [c for c in nb.cells if c.cell_type == "markdown"]
    assert md and md[0].source == (core.REPO_ROOT / "README.md").read_text(), \
            "nbs/index.ipynb differs from README.md: run `neurips25 report --readme README.md` (it syncs both)"
