"""P05 without ../shared: a fresh clone has no ../shared/data beside it, so every P05 artefact's small and medium
parameters must plan, and each artefact's data-loading step must run, from what `make setup` installs alone.

`$NEURIPS25_SHARED_DATA` points the shared folder at an empty temporary one (as on a user's machine). The data step of
each artefact is the notebook's own code — its parameters cell, the medium values the runner would inject, and its code
cells up to and including the line that loads the data — run in one fresh interpreter with the runner's environment
(`NEURIPS25_ARTEFACT` set, under which `load_shared_sample` refuses). Asking for MP-20 (the data layer's source) without
its files is one clear error naming them (no fallback). Tests that need the real samples in ../shared skip with a reason."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neurips25.runner.executors import plan

REPO = Path(__file__).resolve().parents[1]
ARTEFACTS = ("fig_equivariance", "tab_data", "tab_metrics", "fig_training_curves", "fig_samples", "tab_generation",
             "tab_likelihood")
GENERATIVE = ("fig_training_curves", "fig_samples", "tab_generation", "tab_likelihood")
# the line (a prefix, at the top level of a code cell) after which each notebook has its data; the step runs through it
MARKER = {"fig_equivariance": 'out = start_run(', "tab_data": 'print(f"{n_raw} package structures',
          "tab_metrics": "train, test = real[0::2], real[1::2]", **{a: "D = load_training_data(" for a in GENERATIVE}}
# what the step left behind, read back as JSON
PROBE = {"fig_equivariance": "str(out)", "tab_data": "[len(kept), sorted({k[0] for k in kept})]",
         "tab_metrics": "[len(train), len(test)]",
         **{a: "[len(D['train']), len(D['test_structs']), D['source']]" for a in GENERATIVE}}

STEP = r'''
import json, os, sys, traceback, warnings
warnings.filterwarnings("ignore")
spec = json.load(open(sys.argv[1])); res = {}
for r in spec:
    os.environ["NEURIPS25_ARTEFACT"] = r["artefact_id"]; os.environ["NEURIPS25_OUTPUT_DIR"] = r["out"]
    ns = {"__name__": "__main__"}
    try:
        code, found = [], False
        for c in r["cells"]:
            if found: break
            if c["tags"] and "parameters" in c["tags"]:
                code.append(c["source"]); code.append("\n".join(f"{k} = {v!r}" for k, v in r["params"].items())); continue
            for line in c["source"].splitlines():
                code.append(line)
                if line.startswith(r["marker"]): found = True; break
        if not found: raise LookupError(f"marker {r['marker']!r} not found in {r['notebook']}")
        exec(compile("\n".join(code), r["notebook"], "exec"), ns)
        res[r["key"]] = dict(ok=True, probe=eval(r["probe"], ns))
    except Exception as e:
        res[r["key"]] = dict(ok=False, error=f"{type(e).__name__}: {e}", tb=traceback.format_exc()[-2000:])
json.dump(res, open(sys.argv[2], "w"), default=str)
'''


def _cells(nb_path: Path) -> list[dict]:
    nb = json.loads(nb_path.read_text())
    return [dict(source="".join(c["source"]), tags=c.get("metadata", {}).get("tags"))
            for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.fixture(scope="module")
def no_shared(tmp_path_factory):
    "The data step of every P05 artefact (medium; small; MP-20 asked for without its files), with ../shared hidden."
    tmp = tmp_path_factory.mktemp("p05_clone")
    empty = tmp / "empty_shared"; empty.mkdir()
    no_mp20 = tmp / "no_mp20"; no_mp20.mkdir()                    # a named MP-20 folder without its CSVs
    jobs = {p: {j.art.name: j for j in plan(["p05"], profile=p, device="cpu", force=True, outputs=tmp / "outputs")}
            for p in ("small", "medium")}
    spec = []
    def add(key, job, **over):
        params = {**job.effective, **over}
        spec.append(dict(key=key, artefact_id=job.art.id, notebook=str(job.art.notebook), cells=_cells(job.art.notebook),
                         params=params, marker=MARKER[job.art.name], probe=PROBE[job.art.name], out=str(tmp / "out" / key)))
    for name in ARTEFACTS:
        add(f"medium/{name}", jobs["medium"][name])
    add("small/tab_metrics", jobs["small"]["tab_metrics"])
    add("optin/tab_metrics", jobs["medium"]["tab_metrics"], reference="mp20", mp20_source=str(no_mp20))
    add("optin/tab_data", jobs["medium"]["tab_data"], mp20_source=str(no_mp20), mp20_rows=100)
    add("optin/fig_training_curves", jobs["medium"]["fig_training_curves"], dataset="package+mp20", mp20_source="")
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "NEURIPS25_SHARED_DATA": str(empty), "NEURIPS25_PROGRESS": "0", "OMP_NUM_THREADS": "1",
           "NEURIPS25_CACHE": "0", "NEURIPS25_PROFILE": "medium"}
    env.pop("IN_TEST", None)
    p = subprocess.run([sys.executable, "-c", STEP, str(tmp / "spec.json"), str(tmp / "res.json")], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(res=json.loads((tmp / "res.json").read_text()), jobs=jobs, empty=empty, no_mp20=no_mp20)


@pytest.mark.parametrize("profile", ["small", "medium"])
def test_profiles_plan_without_mp20(no_shared, profile):
    "Every artefact plans, and no small/medium parameter asks for the user's MP-20 (the source is off)."
    jobs = no_shared["jobs"][profile]
    assert sorted(jobs) == sorted(ARTEFACTS)
    for name, j in jobs.items():
        eff = j.effective
        assert eff.get("mp20_source", "") == "", (name, eff)
        assert eff.get("dataset") not in ("package+mp20", "mp_20") or name == "tab_metrics", (name, eff)
        assert eff.get("reference", "package") == "package", (name, eff)
        assert not any("shared" in k for k in eff), (name, eff)


@pytest.mark.parametrize("name", ARTEFACTS)
def test_medium_data_step_runs_without_shared(no_shared, name):
    r = no_shared["res"][f"medium/{name}"]
    assert r["ok"], f"{name}: {r.get('error')}\n{r.get('tb', '')}"
    probe = r["probe"]
    if name == "tab_data":                                        # the package collections, de-duplicated, no MP-20
        assert probe[0] >= 300 and {"aflow", "ase", "pymatgen"} <= set(probe[1]) and "mp_20 test" not in probe[1], probe
    elif name == "tab_metrics":                                   # 100 package crystals split in two halves
        assert probe == [50, 50], probe
    elif name in GENERATIVE:                                      # de-duplicated package crystals, even/odd
        n_train, n_test, source = probe
        assert source.startswith("package (") and n_train >= 100 and n_test >= 100, probe


def test_small_tab_metrics_without_shared(no_shared):
    r = no_shared["res"]["small/tab_metrics"]
    assert r["ok"] and r["probe"] == [8, 8], r


@pytest.mark.parametrize("name", ["tab_metrics", "tab_data"])
def test_mp20_opt_in_without_files_is_one_clear_error(no_shared, name):
    "A named MP-20 folder without its CSVs: the data layer's error names the folder and the files; nothing is substituted."
    r = no_shared["res"][f"optin/{name}"]
    assert not r["ok"] and r["error"].startswith("SourceError"), r
    assert f"incomplete under {no_shared['no_mp20']}: missing train.csv, val.csv, test.csv" in r["error"], r
    assert "shared" not in r["error"], r


def test_mp20_dataset_without_source_is_refused(no_shared):
    r = no_shared["res"]["optin/fig_training_curves"]
    assert not r["ok"] and "names no MP-20 source" in r["error"] and "mp20_source=mp_20" in r["error"], r


def test_shared_tests_skip_when_shared_is_absent(tmp_path):
    "The tests that read ../shared skip, with a reason naming the folder, when $NEURIPS25_SHARED_DATA is empty."
    env = {**os.environ, "NEURIPS25_SHARED_DATA": str(tmp_path), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                        str(REPO / "tests" / "test_p05_sgequidiff.py"), "-k", "shared"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "failed" not in p.stdout and " skipped" in p.stdout and str(tmp_path / "crystals") in p.stdout, p.stdout[-3000:]
