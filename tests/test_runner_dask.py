"""The Dask executor end to end: a LocalCluster of 2 process workers gives the same manifests and claims as the local
executor; a failing notebook and a dying worker are reported failed; runs already present are never sent."""
import json
import os
import time
from pathlib import Path

import pytest

from conftest import RUNS, cli, make_repo, popen_cli, run_cli, write_notebook

pytest.importorskip("dask.distributed")

KILLER = """\
import os, signal
from neurips25.core import *
out = start_run("p98_fix", "fig_kill")
os.kill(os.getppid(), signal.SIGKILL)    # the kernel's parent: the process executing the notebook (a Dask worker)
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = make_repo(tmp_path_factory.mktemp("dask") / "repo")
    d = root / "nbs" / "p98_fix"
    write_notebook(d / "11_tab_b.ipynb", "fig_a")     # declares another artefact: core.start_run refuses it
    write_notebook(d / "12_fig_kill.ipynb", "fig_kill", body=KILLER)
    (d / "runs.yaml").write_text(RUNS + "  fig_kill:\n    notebook: 12_fig_kill.ipynb\n    paper_ref: ours\n"
                                 "    gpu: false\n    small: {}\n    medium: {}\n    full: {}\n")
    return root


def _slots(out: Path) -> dict:
    "slot folder (relative) -> (manifest, claims.json text) for every run under `out`."
    res = {}
    for m in sorted(out.rglob("manifest.json")):
        claims = m.parent / "claims.json"
        res[m.parent.relative_to(out).as_posix()] = (json.loads(m.read_text()),
                                                    claims.read_text() if claims.is_file() else None)
    return res


def test_dask_localcluster_matches_local_executor(repo):
    targets = ("p98/fig_a", "p98/tab_b")
    r = run_cli(repo, "--outputs", str(repo / "out_local"), "reproduce", *targets, "--profile", "small",
                "--device", "cpu")
    assert r.returncode == 1 and "1 ok, 1 failed" in r.stdout, r.stdout + r.stderr
    r = run_cli(repo, "--outputs", str(repo / "out_dask"), "reproduce", *targets, "p98/fig_kill", "--profile", "small",
                "--device", "cpu", "--executor", "dask", "--jobs", "2", timeout=240)
    assert r.returncode == 1 and "1 ok, 2 failed" in r.stdout, r.stdout + r.stderr
    local, dask = _slots(repo / "out_local"), _slots(repo / "out_dask")
    kill = dask.pop("p98_fix/fig_kill/small.failed")
    assert set(local) == set(dask) == {"p98_fix/fig_a/small", "p98_fix/tab_b/small.failed"}
    for slot in local:
        (ml, cl), (md, cd) = local[slot], dask[slot]
        for k in ("status", "run_key", "parameters", "effective_parameters", "claims", "profile"):
            assert ml[k] == md[k], (slot, k)
        assert cl == cd                                             # byte-identical claims
        assert {f["path"] for f in ml["files"]} == {f["path"] for f in md["files"]}
        same = {f["path"]: f["sha256"] for f in ml["files"] if not f["path"].endswith(".ipynb")}
        assert same == {f["path"]: f["sha256"] for f in md["files"] if not f["path"].endswith(".ipynb")}
    for e in (local["p98_fix/tab_b/small.failed"][0]["error"], dask["p98_fix/tab_b/small.failed"][0]["error"]):
        assert (e["ename"], e["cell_index"]) == ("RuntimeError", 2) and "registered it as p98_fix/tab_b" in e["evalue"]
    # the worker that died: reported failed with Dask's message, a failure record written, nothing left behind
    assert kill[0]["status"] == "failed" and kill[0]["error"]["ename"] == "KilledWorker", kill[0]["error"]
    assert "FAILED nbs/p98_fix/12_fig_kill.ipynb" in r.stdout and "KilledWorker" in r.stdout
    assert not (repo / "out_dask" / "p98_fix" / "fig_kill" / "small").exists()
    # runs already present are skipped before anything is sent: an unreachable scheduler is never contacted
    rc, out, err = cli(repo, "--outputs", str(repo / "out_dask"), "reproduce", "p98/fig_a", "--profile", "small",
                       "--device", "cpu", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9")
    assert rc == 0 and "0 ok, 0 failed, 1 skipped" in out, out + err


def test_gpu_runs_need_a_worker_declaring_a_gpu(repo):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the LocalCluster declares it")
    rc, out, err = cli(repo, "--outputs", str(repo / "out_gpu"), "reproduce", "p98/tab_b", "--profile", "full",
                       "--device", "cuda", "--executor", "dask", "--jobs", "1")
    assert rc == 2 and "no worker of the cluster declares one" in err, out + err
    assert not (repo / "out_gpu" / "p98_fix").exists() or not list((repo / "out_gpu").rglob("manifest.json"))


def test_scheduler_needs_dask_executor(repo):
    rc, _, err = cli(repo, "reproduce", "p98", "--scheduler", "tcp://127.0.0.1:9", "--dry-run")
    assert rc == 2 and "--scheduler needs --executor dask" in err


@pytest.fixture
def empty_cluster():
    "A scheduler without workers (a batch system's jobs still in the queue); workers declare GPU=1 when they come."
    from dask.distributed import LocalCluster
    cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True, resources={"GPU": 1},
                           dashboard_address=None, silence_logs=50)
    yield cluster
    cluster.close()


def test_no_worker_joining_within_wait_workers_is_one_clear_error(repo, empty_cluster):
    # issue 28, 3.5
    addr, t0 = empty_cluster.scheduler_address, time.time()
    rc, out, err = cli(repo, "--outputs", str(repo / "out_wait"), "reproduce", "p98/fig_a", "--profile", "small",
                       "--device", "cpu", "--executor", "dask", "--scheduler", addr, "--wait-workers", "1")
    assert rc == 2 and f"no worker joined the Dask scheduler {addr} within 1 s (--wait-workers)" in err, out + err
    assert time.time() - t0 < 30 and not list((repo / "out_wait").rglob("manifest.json"))


def test_a_gpu_worker_that_joins_late_is_waited_for(repo, empty_cluster):
    # issue 28, 3.5: the GPU check used to run as soon as the client connected, before any worker had joined
    import torch
    p = popen_cli(repo, "--outputs", str(repo / "out_late"), "reproduce", "p98/fig_a", "--profile", "small",
                  "--device", "cuda", "--executor", "dask", "--scheduler", empty_cluster.scheduler_address,
                  "--wait-workers", "120")
    time.sleep(3)
    assert p.poll() is None, p.communicate()                 # still waiting for a worker
    empty_cluster.scale(1)
    out, err = p.communicate(timeout=240)
    assert "no worker of the cluster declares one" not in err and "no worker joined" not in err, out + err
    if torch.cuda.is_available():
        assert p.returncode == 0 and "1 ok, 0 failed" in out, out + err
    else:        # the worker declares a GPU it does not have: the run reaches it and fails there, clearly
        assert p.returncode == 1 and "DeviceUnavailable: " in out and "CUDA is not available" in out, out + err


def _start_worker(address: str, bf16: str, log: Path):
    "A `dask worker` process whose environment says whether its CPU has native bf16 (as /proc/cpuinfo would)."
    import subprocess
    import sys
    env = {**os.environ, "NEURIPS25_CPU_BF16": bf16}
    return subprocess.Popen([str(Path(sys.executable).with_name("dask")), "worker", address, "--nthreads", "1",
                             "--no-dashboard"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _wait_n_workers(address: str, n: int, timeout: float = 120.0):
    from dask.distributed import Client
    with Client(address, timeout="30s") as c:
        c.wait_for_workers(n, timeout=timeout)


def test_bf16_runs_go_only_to_dask_workers_whose_cpu_has_native_bf16(tmp_path, empty_cluster):
    # issue 36, 4: the client's CPU flags do not decide for a cluster; each worker's own do
    import nbformat
    root = make_repo(tmp_path / "repo")
    d = root / "nbs" / "p98_fix"
    seen = ('\nimport os\nsave_table(pd.DataFrame({"bf16": [os.environ.get("NEURIPS25_CPU_BF16")]}), "worker_cpu")\n')
    for nb_name, art in (("10_fig_a.ipynb", "fig_a"), ("11_tab_b.ipynb", "tab_b")):
        write_notebook(d / nb_name, art, extra=seen)
        nbk = nbformat.read(d / nb_name, as_version=4)
        nbk.cells[1].source += "\nautocast: str = ''  # bf16: bf16 autocast"
        nbformat.write(nbk, d / nb_name)
    addr, procs = empty_cluster.scheduler_address, []
    args = ("--outputs", str(root / "out"), "reproduce", "p98", "--profile", "small", "--device", "cpu",
            "--set", "autocast=bf16", "--executor", "dask", "--scheduler", addr)
    try:
        procs.append(_start_worker(addr, "0", tmp_path / "w0.log"))      # a worker whose CPU emulates bf16
        _wait_n_workers(addr, 1)
        r = run_cli(root, *args, timeout=240, NEURIPS25_CPU_BF16="1")    # the client's CPU has it: not enough
        assert r.returncode == 2, r.stdout + r.stderr
        assert "2 run(s) cannot start here" in r.stderr and "none of the cluster's 1 worker(s) has it" in r.stderr
        assert "--set autocast=" in r.stderr and not list((root / "out").rglob("manifest.json"))
        procs.append(_start_worker(addr, "1", tmp_path / "w1.log"))      # a worker with native bf16 joins
        _wait_n_workers(addr, 2)
        r = run_cli(root, *args, timeout=240, NEURIPS25_CPU_BF16="0")    # the client's CPU lacks it: it does not matter
        assert r.returncode == 0 and "2 ok, 0 failed" in r.stdout, r.stdout + r.stderr
        got = sorted(p.read_text() for p in (root / "out").rglob("worker_cpu.csv"))
        assert got == ["bf16\n1\n", "bf16\n1\n"], got                    # both ran on the worker with native bf16
        r = run_cli(root, *args[:-4], "--force", timeout=240, NEURIPS25_CPU_BF16="0")   # local: this CPU decides
        assert r.returncode == 2 and "this one emulates it" in r.stderr, r.stdout + r.stderr
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
