"""The real registry: every notebook named in a runs.yaml exists, has a parameters cell, and its profiles fit it."""
import ast
import re
from pathlib import Path

import nbformat
import pytest

from neurips25 import core
from neurips25.runner import load_registry, notebook_parameters, coerce_parameters, PROFILES

ERRORS: dict = {}
REGISTRY = load_registry(core.REPO_ROOT, errors=ERRORS)     # a broken runs.yaml fails one test, not the collection
ARTEFACTS = [a for s in REGISTRY for a in s.artefacts]


def name_template(art) -> str | None:
    "A notebook registered for several artefacts names its run from parameters: start_run(series, f\"..{seed}..\")."
    src = "\n".join(c.source for c in nbformat.read(art.notebook, as_version=4).cells if c.cell_type == "code")
    m = re.search(r'start_run\("' + re.escape(art.series) + r'", f"([^"]+)"\)', src)
    return m.group(1) if m else None


def naming_parameters(art) -> set:
    t = name_template(art)
    return set(re.findall(r"{(\w+)}", t)) if t and art.shared_notebook else set()


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
    coerce_parameters({**art.profiles["small"], **art.gpu_check}, declared, f"{art.id} [gpu_check]")  # gpu-check size
    # the small profile IS the notebook's defaults (nbdev_test runs the defaults); a notebook registered for several
    # artefacts: its first artefact's, the others differ only in the parameters that name them (e.g. seed)
    first = art.notebook_artefacts[0] == art.name           # load_series: the artefacts on its notebook, in order
    for k, v in art.profiles["small"].items():
        assert declared[k]["default"] == v or (not first and k in naming_parameters(art)), \
            f"{art.id}: small {k}={v!r} but the notebook's default is {declared[k]['default']!r}"


@pytest.mark.parametrize("art", ARTEFACTS, ids=[a.id for a in ARTEFACTS])
def test_figure_notebook_declares_its_artefact_and_exports_nothing(art):
    nb = nbformat.read(art.notebook, as_version=4)
    src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    if art.shared_notebook:                                # one notebook, several artefacts: named by parameters
        t = name_template(art)
        assert t, f"{art.id}: a notebook registered {len(art.notebook_artefacts)} times must name its artefact " \
                  f"from its parameters: start_run(\"{art.series}\", f\"...{{param}}...\")"
        for p in PROFILES:
            named = t.format(**art.profiles[p])
            assert named == art.name, f"{art.id} [{p}]: start_run names {named!r}"
    else:
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


def _art(art_id):
    return next(a for a in ARTEFACTS if a.id == art_id)


def test_run_keys_cover_the_modules_a_notebook_imports_not_every_module():
    # issue 36: an lm.py change must not make P10's results stale, but must make P09's
    from neurips25.runner.registry import library_modules
    p10, p09 = library_modules(_art("p10_fair_matroid/tab_alg1_colours")), library_modules(
        _art("p09_unlearning/tab_smollm2_headline"))
    assert "neurips25.lm" not in p10 and "neurips25.fair_matroid.greedy" in p10 and "neurips25.core" in p10
    assert "neurips25.lm" in p09 and "neurips25.unlearning.trainer" in p09
    assert not any(m.startswith("neurips25.unlearning") for m in p10)           # no other series
    assert not any(m.startswith(("neurips25.runner", "neurips25.docs")) for m in p10 + p09)   # no tooling


def test_run_key_changes_with_an_imported_module_only(tmp_path, monkeypatch):
    # the fixture repository on a fake package: fig_a imports core only, tab_b also imports neurips25.lm
    from conftest import make_repo, write_notebook
    from neurips25.runner.registry import library_modules, run_key
    pkg = tmp_path / "pkg" / "neurips25"
    pkg.mkdir(parents=True)
    for name, src in {"__init__.py": "", "core.py": "X = 1\n", "lm.py": "from .core import X\nY = 2\n",
                      "datasets.py": "Z = 3\n"}.items():
        (pkg / name).write_text(src)
    root = make_repo(tmp_path / "repo")
    write_notebook(root / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", extra="from neurips25 import lm\n")
    monkeypatch.setattr(core, "__file__", str(pkg / "core.py"))   # library_modules and library_hash read this package
    reg = load_registry(root)
    fig_a, tab_b = reg[0].artefacts
    assert library_modules(fig_a) == ["neurips25.core"]
    assert library_modules(tab_b) == ["neurips25.core", "neurips25.lm"]
    keys = lambda: (run_key(fig_a, {}, "small", "cpu"), run_key(tab_b, {}, "small", "cpu"))
    a0, b0 = keys()
    (pkg / "lm.py").write_text("from .core import X\nY = 3\n")               # lm changes: only tab_b is stale
    a1, b1 = keys()
    assert a1 == a0 and b1 != b0
    (pkg / "datasets.py").write_text("Z = 4\n")                              # imported by neither: nothing is stale
    assert keys() == (a1, b1)
    (pkg / "core.py").write_text("X = 2\n")                                  # core: both
    a2, b2 = keys()
    assert a2 != a1 and b2 != b1
