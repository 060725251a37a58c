"""Cross-cutting behaviour of core outside notebooks: device errors, paths under different working directories."""
import os, subprocess, sys
from pathlib import Path

import pytest

from neurips25 import core


def test_paths_do_not_depend_on_the_working_directory(tmp_path):
    code = "from neurips25 import core; print(core.REPO_ROOT); print(core.OUTPUTS_PATH)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURIPS25_")}
    outs = {subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=env).stdout
            for cwd in (tmp_path, core.REPO_ROOT / "nbs", core.REPO_ROOT)}
    assert len(outs) == 1
    root, outputs = outs.pop().split()
    assert Path(root) == core.REPO_ROOT and Path(outputs) == core.REPO_ROOT / "outputs"


def test_cuda_request_without_cuda_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available(): pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA is not available"): core.get_device("cuda")


def test_torch_is_the_cpu_build_here():
    torch = pytest.importorskip("torch")
    if os.environ.get("NEURIPS25_ALLOW_CUDA_TORCH"): pytest.skip("CUDA torch allowed explicitly")
    assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build; make setup pins the CPU wheel"


def test_data_file_names_source_and_command(tmp_path):
    with pytest.raises(core.DataFileError, match=r"missing\. Source: X\. Obtain it with: make data"):
        core.data_file(tmp_path / "absent.bin", source="X", obtain="make data")
