"""The committed reference results (outputs/) and what README, REPORT and the registries say about them."""
import json
import subprocess
from pathlib import Path

import pytest

from neurips25 import core
from neurips25.docsync import update_status_block
from neurips25.runner.claims import check_registries
from neurips25.runner.registry import load_registry
from neurips25.runner.report import collect, render_report, status_rows

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "outputs"


def committed(path: Path) -> bool:
    r = subprocess.run(["git", "ls-files", "--error-unmatch", str(path.relative_to(REPO))], cwd=REPO,
                       capture_output=True)
    return r.returncode == 0


def test_every_registry_is_valid_and_matches_runs_yaml():
    assert check_registries(REPO) == []


def test_every_committed_claim_is_registered():
    bad = [f"{r['art'].id}:{c['id']}" for r in collect(REPO, OUT) if r["profile"] == "medium"
           for c in r["claims"] if c.get("unregistered")]
    assert bad == []


@pytest.mark.skipif(not (OUT / "REPORT.md").is_file(), reason="no outputs/REPORT.md in this checkout")
def test_report_is_what_the_committed_results_give():
    # REPORT is a function of the results on disk and the registries' history: regenerate it and compare
    assert (OUT / "REPORT.md").read_text() == render_report(REPO, OUT), \
        "outputs/REPORT.md is out of date: run `neurips25 report --readme README.md` and commit it"


def test_readme_status_is_what_the_committed_results_give(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text((REPO / "README.md").read_text())
    changed = update_status_block(readme, status_rows(REPO, OUT))
    assert not changed, "README's status block differs from the committed outputs: run `neurips25 report --readme README.md`"


def test_committed_outputs_hold_only_reference_results():
    files = subprocess.run(["git", "ls-files", "outputs"], cwd=REPO, capture_output=True, text=True).stdout.split()
    allowed = (".json", ".csv", ".png", ".gitkeep", "outputs/REPORT.md")
    assert [f for f in files if not f.endswith(allowed)] == []
    assert [f for f in files if f.count("/") >= 3 and f.split("/")[3] != "medium"] == []   # medium results only
    sizes = {f: (REPO / f).stat().st_size for f in files if (REPO / f).is_file()}
    assert [f for f, s in sizes.items() if f.endswith(".png") and s > 1 << 20] == []
    assert sum(sizes.values()) <= 60 << 20


def test_every_series_has_its_registry_committed_no_later_than_its_results():
    for s in load_registry(REPO):
        reg = REPO / "nbs" / s.folder / "claims.yaml"
        assert reg.is_file(), f"{s.folder} has no claims.yaml"
        res = sorted((OUT / s.folder).glob("*/medium/claims.json")) if (OUT / s.folder).is_dir() else []
        res = [p for p in res if committed(p)]
        if not res or not committed(reg):
            continue
        first_reg = subprocess.run(["git", "log", "--reverse", "--format=%H", "--", str(reg.relative_to(REPO))],
                                   cwd=REPO, capture_output=True, text=True).stdout.split()[0]
        for p in res:
            first_res = subprocess.run(["git", "log", "--reverse", "--format=%H", "--", str(p.relative_to(REPO))],
                                       cwd=REPO, capture_output=True, text=True).stdout.split()[0]
            anc = subprocess.run(["git", "merge-base", "--is-ancestor", first_reg, first_res], cwd=REPO)
            assert anc.returncode == 0, f"{p} was committed before {reg}"
