"""`neurips25 gpu-check`: the gpu: true artefacts at their small profile on one device, checked and reported."""
import json

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
    assert "1/1 ok" in r.stdout
    assert not out_dir(fixture_repo, "tab_b", "small").exists()               # the reference outputs are untouched
    assert not (fixture_repo / "outputs" / "gpu-check.json").exists()


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
    assert "| p05_sgequidiff/fig_samples | ✓ | 4.2 s | cuda:0 | 812 MiB |  |" in text
    assert "ran, but not on the GPU" in text
    (tmp_path / "gpu-check.json").write_text("{not json")
    assert "unreadable" in "\n".join(gpu_check_section(tmp_path))
