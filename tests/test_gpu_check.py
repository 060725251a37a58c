"""`neurips25 gpu-check`: the gpu: true artefacts at their small profile on one device, checked and reported."""
import json
from pathlib import Path

import pytest
import torch

from conftest import out_dir, run_cli


def test_gpu_check_cpu_runs_the_gpu_artefacts_in_scratch(fixture_repo, tmp_path):
    rep_path = tmp_path / "gc.json"
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--out", str(rep_path))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(rep_path.read_text())
    assert rep["ok"] and rep["device"] == "cpu" and rep["profile"] == "small"
    assert [x["artefact"] for x in rep["runs"]] == ["p98_fix/tab_b"]          # only the gpu: true one by default
    row = rep["runs"][0]
    assert row["status"] == "ok" and row["device"] == "cpu" and not row["cuda_used"] and row["wall_s"] > 0
    assert "1/1 ok; " in r.stdout and " wall (1 at a time)" in r.stdout
    assert 0 < rep["total_s"] <= rep["wall_s"]              # one at a time: the check's wall covers its one run
    assert not out_dir(fixture_repo, "tab_b", "small").exists()               # the reference outputs are untouched
    assert not (fixture_repo / "outputs" / "gpu-check.json").exists()


def test_gpu_check_runs_a_notebook_registered_for_several_artefacts_once(fixture_repo, tmp_path):
    "One notebook registered as several artefacts (P09's per-seed target step): the same code, checked once."
    runs = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    runs.write_text(runs.read_text() + "  tab_b2:\n    notebook: 11_tab_b.ipynb\n    paper_ref: Table 2, seed 1\n"
                    "    gpu: true\n    small: {}\n    medium: {n: 5}\n    full: {n: 50}\n")
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--out", str(tmp_path / "gc.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "gc.json").read_text())
    assert [x["artefact"] for x in rep["runs"]] == ["p98_fix/tab_b"]
    assert rep["same_notebook"] == {"p98_fix/tab_b2": "p98_fix/tab_b"}
    assert "1 not run, their notebook runs as another artefact (p98_fix/tab_b2)" in r.stdout
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "p98/tab_b2", "--out", str(tmp_path / "g2.json"))
    assert r.returncode == 1 and "registered it as p98_fix/tab_b2" in r.stdout + r.stderr   # named: it runs (and the
    # fixture notebook, which names tab_b literally, is refused by core.start_run)


def test_gpu_check_named_targets_and_a_failing_run(fixture_repo, tmp_path):
    runs = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    runs.write_text(runs.read_text().replace("small: {}", "small: {fail: true}"))
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "p98/fig_a", "p98/tab_b", "--out", str(tmp_path / "g.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    rep = json.loads((tmp_path / "g.json").read_text())
    ok = {x["artefact"]: x for x in rep["runs"]}
    assert ok["p98_fix/fig_a"]["ok"] and not ok["p98_fix/tab_b"]["ok"] and not rep["ok"]
    assert "boom on purpose" in ok["p98_fix/tab_b"]["problem"]
    assert "FAILED" in r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_check_cuda_without_cuda_is_a_clear_error(fixture_repo):
    r = run_cli(fixture_repo, "gpu-check")
    assert r.returncode == 2 and "CUDA" in r.stderr, r.stdout + r.stderr


def test_gpu_check_bad_device(fixture_repo):
    r = run_cli(fixture_repo, "gpu-check", "--device", "tpu")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_report_gpu_check_section(tmp_path):
    from neurips25.runner.report import gpu_check_section
    assert "No GPU check is recorded" in "\n".join(gpu_check_section(tmp_path))
    (tmp_path / "gpu-check.json").write_text(json.dumps({
        "device": "cuda", "gpu": "NVIDIA H200", "finished": "2026-12-02T12:00:00+00:00", "profile": "small", "ok": False,
        "runs": [{"artefact": "p05_sgequidiff/fig_samples", "ok": True, "wall_s": 4.25, "device": "cuda:0",
                  "cuda_peak_mib": 812.4, "problem": None},
                 {"artefact": "p09_unlearning/tab_smollm2_headline", "ok": False, "wall_s": 2.0, "device": "cuda:0",
                  "cuda_peak_mib": 0.0, "problem": "ran, but not on the GPU"}]}))
    text = "\n".join(gpu_check_section(tmp_path))
    assert "NVIDIA H200" in text and "**failed**, 1/2 runs ok" in text
    assert "| p05_sgequidiff/fig_samples | ✓ | 4.2 s | cuda:0 | 812 MiB |  |  |  |" in text
    assert "ran, but not on the GPU" in text and "Projected `full` time" not in text
    rep = json.loads((tmp_path / "gpu-check.json").read_text())
    rep["runs"][0].update(rates=[{"name": "train", "value": 412.0, "unit": "steps", "work_full": 2.4e6},
                                 {"name": "eval", "value": 3.1e4, "unit": "samples", "work_full": None}],
                          projected_full_s=2.4e6 / 412.0)
    rep.update(projected_full_s=2.4e6 / 412.0, not_projected=["p09_unlearning/tab_smollm2_headline"])
    (tmp_path / "gpu-check.json").write_text(json.dumps(rep))
    text = "\n".join(gpu_check_section(tmp_path))
    assert "| p05_sgequidiff/fig_samples | ✓ | 4.2 s | cuda:0 | 812 MiB | train 412 steps/s, eval 3.1e+04 samples/s " \
           "| 1.6 h |  |" in text, text
    assert "1.6 h in all; no projection for p09_unlearning/tab_smollm2_headline (no rate with its `full` work recorded)" \
        in text
    rep.update(software="torch 2.11.0+cu130", calls=[
        {"finished": "t1", "runs": 2, "ok": 1, "failed": {"p09_unlearning/tab_smollm2_headline": "TypeError: x"}},
        {"finished": "t2", "runs": 1, "ok": 1, "rerun": ["p09_unlearning/tab_smollm2_headline"], "why": "after a fix"}])
    (tmp_path / "gpu-check.json").write_text(json.dumps(rep))
    text = "\n".join(gpu_check_section(tmp_path))
    assert "Software: torch 2.11.0+cu130." in text
    assert "- call 1, t1: 1/2 runs ok (failed: p09_unlearning/tab_smollm2_headline: TypeError: x)" in text
    assert "- call 2, t2: 1/1 runs ok; reran p09_unlearning/tab_smollm2_headline after a fix" in text
    (tmp_path / "gpu-check.json").write_text("{not json")
    assert "unreadable" in "\n".join(gpu_check_section(tmp_path))


def test_reference_gpu_check_is_a_cuda_run_of_registered_gpu_artefacts():
    "The committed outputs/gpu-check.json (REPORT's GPU section) is a CUDA run of artefacts that exist and are gpu: true."
    from neurips25.core import REPO_ROOT
    from neurips25.runner.registry import load_registry
    from neurips25.runner.report import gpu_check_section
    p = REPO_ROOT / "outputs" / "gpu-check.json"
    if not p.is_file():
        pytest.skip("no reference GPU check committed")
    rep = json.loads(p.read_text())
    arts = {a.id: a for s in load_registry() for a in s.artefacts}
    assert rep["device"] == "cuda" and rep["gpu"] and rep["ok"] is all(r["ok"] for r in rep["runs"])
    for r in rep["runs"]:
        assert r["artefact"] in arts and arts[r["artefact"]].gpu, r["artefact"]
        assert not r["ok"] or (r["cuda_used"] and r["device"].startswith("cuda")), r
    assert rep["total_s"] == pytest.approx(sum(r["wall_s"] or 0 for r in rep["runs"]), abs=0.05)
    assert all(f"| {r['artefact']} |" in "\n".join(gpu_check_section(p.parent)) for r in rep["runs"])


# tab_b (gpu: true) times its "full" work under the check only: 250 steps/s measured (a fixed number here), full does
# n x 1000 steps (runs.yaml: n = 50 at full), so 200 s projected; it also reports what its kernel's environment was
RATE = """
import os, json
from neurips25.core import gpu_check_active, profile_params, record_rate
save_table(pd.DataFrame({"check": [gpu_check_active()], "cache": [os.environ.get("NEURIPS25_CACHE")]}), "env")
if gpu_check_active():
    record_rate("train", 250.0, "steps", work_full=profile_params("full")["n"] * 1000, note="fixture")
    record_rate("eval", 2000.0, "samples", work_full=profile_params("full")["n"] * 4000)
    record_rate("probe", 9.0, "steps")
"""


def test_gpu_check_collects_rates_and_projects_full(fixture_repo, tmp_path):
    from conftest import write_notebook
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", extra=RATE)
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--out", str(tmp_path / "gc.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "gc.json").read_text())
    (row,) = rep["runs"]
    assert [(x["name"], x["unit"], x["value"], x["work_full"]) for x in row["rates"]] == [
        ("train", "steps", 250.0, 50_000.0), ("eval", "samples", 2000.0, 200_000.0), ("probe", "steps", 9.0, None)]
    assert row["projected_full_s"] == pytest.approx(50_000 / 250 + 200_000 / 2000)          # 200 s + 100 s
    assert row["projected_by"] == "rates"
    assert rep["projected_full_s"] == pytest.approx(300.0) and rep["not_projected"] == []
    assert "train 250 steps/s, eval 2e+03 samples/s, probe 9 steps/s, full projected 5.0 min" in r.stdout
    # the check's kernels ran with NEURIPS25_GPU_CHECK=1 and no cache; a plain run records no rate
    scratch = r.stdout.split("scratch outputs in ")[1].split()[0].rstrip(";")
    import pandas as pd
    env = pd.read_csv(f"{scratch}/p98_fix/tab_b/small/env.csv")
    assert bool(env.check[0]) and str(env.cache[0]) == "0"
    r = run_cli(fixture_repo, "reproduce", "p98/tab_b", "--profile", "small", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (out_dir(fixture_repo, "tab_b", "small") / "rates.json").exists()
    assert not bool(pd.read_csv(out_dir(fixture_repo, "tab_b", "small") / "env.csv").check[0])


def test_gpu_check_rates_file_that_is_not_core_s_is_a_failure(fixture_repo, tmp_path):
    from conftest import write_notebook
    bad = "\n(out / 'rates.json').write_text('{\"train\": 3}')\n"
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", extra=bad)
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--out", str(tmp_path / "gc.json"))
    assert r.returncode == 1, r.stdout + r.stderr
    (row,) = json.loads((tmp_path / "gc.json").read_text())["runs"]
    assert not row["ok"] and "is not a list of rates" in row["problem"]


def test_gpu_check_parameters_and_parallel_checks(fixture_repo, tmp_path):
    # runs.yaml's gpu_check shrinks small for the check only; --jobs 2 runs both at once, rows in registry order
    runs = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    runs.write_text(runs.read_text().replace("    small: {}\n", "    small: {}\n    gpu_check: {n: 7, label: gc}\n"))
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "p98/fig_a", "p98/tab_b", "--jobs", "2",
                "--out", str(tmp_path / "g.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "g.json").read_text())
    assert [x["artefact"] for x in rep["runs"]] == ["p98_fix/fig_a", "p98_fix/tab_b"] and rep["ok"]
    assert "2 at a time" in r.stdout
    scratch = r.stdout.split("scratch outputs in ")[1].split()[0].rstrip(";")
    import pandas as pd
    from pathlib import Path
    (tab_b,) = (Path(scratch) / "p98_fix" / "tab_b").glob("small.set-*")            # the check's parameters
    assert pd.read_csv(tab_b / "params.csv").to_dict("records") == [{"n": 7, "scale": 1.0, "label": "gc"}]
    assert pd.read_csv(Path(scratch) / "p98_fix" / "fig_a" / "small" / "params.csv").n.tolist() == [3]
    rc = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--jobs", "0")
    assert rc.returncode == 2 and "--jobs must be at least 1" in rc.stderr


def test_gpu_check_parameters_are_validated(fixture_repo):
    runs = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    text = runs.read_text()
    runs.write_text(text.replace("    small: {}\n", "    small: {}\n    gpu_check: {n: [1, 2]}\n"))
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu")
    assert r.returncode == 2 and "gpu_check: parameter 'n': must be a plain scalar" in r.stderr, r.stderr
    runs.write_text(text.replace("    small: {}\n", "    small: {}\n    gpu_check: {epochs: 2}\n"))
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu")
    assert r.returncode == 2 and "unknown parameter(s) ['epochs']" in r.stderr, r.stderr


def test_gpu_check_forked_and_fresh_kernels_give_the_same_run(fixture_repo, tmp_path):
    # default: kernels forked from the preloading zygote; --no-preload: a fresh Python per run; same results
    import pandas as pd
    from pathlib import Path
    outs = {}
    for flag, kind in (([], "forked"), (["--no-preload"], "fresh")):
        r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "p98/fig_a", "p98/tab_b", *flag,
                    "--out", str(tmp_path / f"{kind}.json"))
        assert r.returncode == 0, r.stdout + r.stderr
        rep = json.loads((tmp_path / f"{kind}.json").read_text())
        assert rep["ok"] and rep["kernels"] == kind and all(x["status"] == "ok" for x in rep["runs"])
        assert ("kernels: forks of one process" in r.stdout) == (kind == "forked")
        scratch = Path(r.stdout.split("scratch outputs in ")[1].split()[0].rstrip(";"))
        outs[kind] = pd.read_csv(scratch / "p98_fix" / "fig_a" / "small" / "params.csv")
    pd.testing.assert_frame_equal(outs["forked"], outs["fresh"])


def test_fork_kernels_zygote_that_cannot_start_is_an_error(tmp_path, monkeypatch):
    from neurips25.runner.forkkernel import ForkKernels
    (tmp_path / "_neurips25_boom.py").write_text("import sys\nprint('boom at import', file=sys.stderr)\nraise SystemExit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    fk = ForkKernels(preload=("_neurips25_boom",))
    with pytest.raises(RuntimeError, match=r"(?s)did not start \(exit code 3\).*boom at import"):
        fk.__enter__()
    import os
    assert "NEURIPS25_KERNEL" not in os.environ and not os.path.exists(fk.tmp)


def test_fork_kernels_refuse_a_zygote_whose_preload_initialised_cuda(tmp_path, monkeypatch):
    "A forked child cannot use CUDA its parent initialised: the zygote refuses to serve (a stand-in torch says so)."
    from neurips25.runner.forkkernel import ForkKernels
    (tmp_path / "_neurips25_cuda_init.py").write_text(
        "import os, sys, types\n"
        "assert os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK') == '1'\n"
        "t = types.ModuleType('torch')\n"
        "t.cuda = types.SimpleNamespace(is_initialized=lambda: True)\n"
        "sys.modules['torch'] = t\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    fk = ForkKernels(preload=("_neurips25_cuda_init",))
    with pytest.raises(RuntimeError, match=r"(?s)did not start.*initialised CUDA.*--no-preload"):
        fk.__enter__()


# tab_b's time grows with n: 0.5 s per unit of n, so the two runs (n = 3 and 9) give a slope of 0.5 s per 1,000 steps
SCALE = """    gpu_scale:
      unit: steps
      work: "n * 1000"
      scale: [n]
      set: {label: timed}
      note: "fixture: sleeps 0.5 s per unit of n"
"""


def test_gpu_check_two_run_projection(fixture_repo, tmp_path):
    from conftest import write_notebook
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", extra="\ntime.sleep(0.5 * n)\n")
    runs = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    runs.write_text(runs.read_text().replace("    full: {n: 50}\n", "    full: {n: 50}\n" + SCALE))
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--scale", "--out", str(tmp_path / "gc.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads((tmp_path / "gc.json").read_text())["runs"]
    sc = row["scale"]
    assert [p["params"] for p in sc["points"]] == [{"n": 3}, {"n": 9}] and sc["work_full"] == 50_000
    assert [p["work"] for p in sc["points"]] == [3000, 9000]
    assert 2000 / 1.5 < sc["rate"] < 2000 * 1.3, sc                     # 1,000 steps per 0.5 s, plus noise
    assert row["projected_full_s"] == pytest.approx(sc["fixed_s"] + 50_000 / sc["rate"])
    assert row["projected_by"] == "two runs"
    assert 20 < row["projected_full_s"] < 45 and "full projected" in r.stdout and "second timed run" in r.stdout
    from neurips25.runner.report import gpu_check_section
    (tmp_path / "gpu-check.json").write_text((tmp_path / "gc.json").read_text())
    text = "\n".join(gpu_check_section(tmp_path))
    assert "Two-run projections" in text and "| p98_fix/tab_b | `n * 1000` (steps) | 3e+03," in text, text
    # --jobs 2: the A runs as one pool, then the B runs as a second pool
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--scale", "--jobs", "2", "--out", str(tmp_path / "g2.json"))
    assert r.returncode == 0 and "then the 1 second timed run(s), 2 at a time" in r.stdout, r.stdout + r.stderr
    rep = json.loads((tmp_path / "g2.json").read_text())
    assert rep["jobs"] == 2 and [p["params"] for p in rep["runs"][0]["scale"]["points"]] == [{"n": 3}, {"n": 9}]
    # without --scale (the CPU default) there is one run and no projection
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--out", str(tmp_path / "gc1.json"))
    (row,) = json.loads((tmp_path / "gc1.json").read_text())["runs"]
    assert r.returncode == 0 and "scale" not in row and row["projected_full_s"] is None


@pytest.mark.parametrize("entry, message", [
    # malformed entries
    ('{unit: steps, work: "n *", scale: [n]}', "does not parse"),
    ('{unit: steps, work: "__import__(1)", scale: [n]}', "may be called"),
    ('{unit: steps, work: "n", scale: [n], factor: 1}', "factor must be a number > 1"),
    ('{unit: steps, work: "n"}', "a mapping with unit, work and scale"),
    ('{unit: two words, work: "n", scale: [n]}', "unit must be one word"),
    ('{unit: steps, work: "n", scale: [n], lower_bound: yes please}', "lower_bound must be true or false"),
    ('{unit: steps, work: "n", scale: [n], lower_bound: true}', "needs a note"),
    # well-formed entries that cannot be evaluated on the artefact's parameters
    ('{unit: steps, work: "epochs * n", scale: [n]}', "reads ['epochs']"),
    ('{unit: steps, work: "n", scale: [label]}', "not declare as int or float"),
    ('{unit: steps, work: "n * label", scale: [n]}', "must be a positive number"),
])
def test_bad_gpu_scale_fails_before_running(fixture_repo, entry, message):
    "Every faulty gpu_scale entry is refused (exit 2, the reason on stderr) before any artefact runs."
    runs = fixture_repo / "nbs" / "p98_fix" / "runs.yaml"
    runs.write_text(runs.read_text().replace("    full: {n: 50}\n", f"    full: {{n: 50}}\n    gpu_scale: {entry}\n"))
    r = run_cli(fixture_repo, "gpu-check", "--device", "cpu", "--scale")
    assert r.returncode == 2 and message in r.stderr and "scratch outputs" not in r.stdout, r.stdout + r.stderr


def test_report_marks_lower_bound_projections(tmp_path):
    from neurips25.runner.report import gpu_check_section
    sc = {"unit": "steps", "work": "n * 1000", "factor": 3, "note": "the user's model is not timed", "lower_bound": True,
          "work_full": 5e4, "points": [{"work": 3e3, "wall_s": 5.0}, {"work": 9e3, "wall_s": 8.0}], "rate": 2000.0,
          "fixed_s": 3.5, "projected_full_s": 28.5, "problem": None}
    (tmp_path / "gpu-check.json").write_text(json.dumps({
        "device": "cuda", "gpu": "H200", "finished": "t", "profile": "small", "ok": True, "projected_full_s": 28.5,
        "projected_lower_bound": ["p98_fix/tab_b"], "not_projected": [],
        "runs": [{"artefact": "p98_fix/tab_b", "ok": True, "wall_s": 5.0, "device": "cuda:0", "cuda_peak_mib": 9.0,
                  "problem": None, "rates": [], "projected_full_s": 28.5, "projected_by": "two runs",
                  "scale": sc}]}))
    text = "\n".join(gpu_check_section(tmp_path))
    assert "| 2e+03 steps/s (two runs) | ≥ 28 s |" in text, text
    assert "at least 28 s in all (1 of them lower bounds, marked ≥)" in text
    assert "| p98_fix/tab_b | `n * 1000` (steps) | 3e+03, 5.0 s | 9e+03, 8.0 s | 3.5 s | 5e+04 | ≥ 28 s | " \
           "the user's model is not timed |" in text, text
    # runs.yaml changed after the check: the projection is for the old `full`, and the table says so
    text = "\n".join(gpu_check_section(tmp_path, {"p98_fix/tab_b": ("n * 1000", 1.5e5)}))
    assert "| ≥ 28 s (old `full`) | full's parameters changed since this check: w(full) is 1.5e+05 today, 5e+04 " \
           "when checked, so the projection is for the old `full`; rerun `make gpu-check` |" in text, text
    assert "1 of them (p98_fix/tab_b) for a `full` that runs.yaml has changed since" in text
    text = "\n".join(gpu_check_section(tmp_path, {"p98_fix/tab_b": ("n * 2000", 5e4)}))
    assert "the work formula changed since this check" in text
    text = "\n".join(gpu_check_section(tmp_path, {"p98_fix/tab_b": ("n * 1000", 5e4)}))      # unchanged: no flag
    assert "old `full`" not in text and "changed since" not in text


def test_full_work_now_reads_todays_runs_yaml():
    "REPORT compares each recorded projection with today's w(full); P07's images panel trains 3 ensembles at full."
    from neurips25.runner.report import full_work_now
    from neurips25.runner.registry import load_registry
    now = full_work_now(load_registry())
    work, wf = now["p07_iipm/fig_ar_images"]
    assert work.startswith("n_seeds * ") and wf == 3 * 10 * 200 * 196
    assert all(isinstance(v, tuple) for v in now.values()), [v for v in now.values() if isinstance(v, str)]


def test_gpu_check_cut_short_keeps_what_finished(fixture_repo, tmp_path, monkeypatch):
    # the second run is interrupted (Ctrl-C, a time limit): the first one's row is already on disk, marked partial
    import neurips25.runner.gpucheck as gc
    real, calls = gc.execute, []

    def execute(job, **kw):
        calls.append(job.art.id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(job, **kw)

    monkeypatch.setattr(gc, "execute", execute)
    out, lines = tmp_path / "gc.json", []
    with pytest.raises(KeyboardInterrupt):
        gc.gpu_check("cpu", ["p98/fig_a", "p98/tab_b"], out=out, root=fixture_repo, work=tmp_path / "w",
                     preload=False, say=lines.append)
    assert not out.exists()                                           # no report that looks complete
    part = json.loads(gc.partial_path(out).read_text())
    assert part["partial"] and not part["ok"] and part["not_run"] == ["p98_fix/tab_b"]
    assert [r["artefact"] for r in part["runs"]] == ["p98_fix/fig_a"] and part["runs"][0]["ok"]
    assert "stopped after 1 run(s)" in lines[-1] and "gc.partial.json" in lines[-1]
    # a check that completes writes the report and removes the partial file
    monkeypatch.setattr(gc, "execute", real)
    rep = gc.gpu_check("cpu", ["p98/fig_a", "p98/tab_b"], out=out, root=fixture_repo, work=tmp_path / "w2",
                       preload=False, say=lines.append)
    assert rep["ok"] and "partial" not in rep and out.exists() and not gc.partial_path(out).exists()
    assert gc.partial_path(Path("outputs/gpu-check.json")) == Path("outputs/gpu-check.partial.json")
