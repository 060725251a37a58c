"""The executors' failure paths, each provoked: a kernel that dies, hangs, never starts or cannot answer the thread
probe; a device the worker lacks; a notebook's own claims.json; a dead worker process; the cleanup of workers and
Dask clients that are already gone. And: runs executing at once in one process each get their own environment."""
import json
import os
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import CLAIMS, out_dir, run_cli, write_notebook
from neurips25.runner import executors
from neurips25.runner.executors import _close_dask, _failing_cell, _probe_result, _stop_workers, execute, plan
from neurips25.runner.store import LockBusy, StoreError, failed_dir


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "outputs").rglob(".*") if p.name.startswith((".tmp-", ".old-")))


def one_job(root: Path, art: str = "fig_a", **sets):
    (job,) = plan([f"p98/{art}"], "small", {k: str(v) for k, v in sets.items()}, "cpu", root=root,
                  outputs=root / "outputs")
    return job


def run_body(root: Path, body: str, art: str = "fig_a", **kw) -> dict:
    "Execute artefact `art` of the fixture repository with `body` as its code cell; return the manifest."
    write_notebook(root / "nbs" / "p98_fix" / ("10_fig_a.ipynb" if art == "fig_a" else "11_tab_b.ipynb"), art,
                   body=textwrap.dedent(body))
    return execute(one_job(root, art), root / "outputs", root, threads=1, **kw)


STARTED = """\
    import os, time
    import pandas as pd
    from neurips25.core import *
    out = start_run("p98_fix", "fig_a")
    save_table(pd.DataFrame({"x": [1]}), "t")
    """


# --- item 3: each run's environment reaches its own kernel ----------------------------------------------------------

RENDEZVOUS = """\
    import os, time
    from pathlib import Path
    import pandas as pd
    from neurips25.core import *
    out = start_run("p98_fix", "{art}")
    rv = Path({rv!r})
    (rv / "{art}").write_text("here")
    t0 = time.time()
    while len(list(rv.iterdir())) < 2 and time.time() - t0 < 60:
        time.sleep(0.1)
    met = len(list(rv.iterdir())) == 2
    save_table(pd.DataFrame({{"out": [os.environ["NEURIPS25_OUTPUT_DIR"]], "omp": [os.environ["OMP_NUM_THREADS"]],
                              "artefact": [os.environ["NEURIPS25_ARTEFACT"]], "cwd": [os.getcwd()]}}), "env")
    record_claim("met", "the other kernel ran at the same time", "qualitative", met, "both present",
                 "reproduced" if met else "not reproduced")
    """


def test_two_runs_in_one_process_run_at_once_each_with_its_own_environment(fixture_repo, tmp_path):
    # Item 3: the run's context goes to its kernel (start_kernel(env=..., cwd=...)), not through os.environ under a
    # process-wide lock: two runs in two threads of one process (a Dask worker's threads) overlap, and each kernel
    # sees its own output folder, artefact and thread count. Under the old lock the first waited 60 s alone.
    rv = tmp_path / "rendezvous"
    rv.mkdir()
    d = fixture_repo / "nbs" / "p98_fix"
    (d / "claims.yaml").write_text(CLAIMS.replace("n_positive", "met"))
    for art, nb in (("fig_a", "10_fig_a.ipynb"), ("tab_b", "11_tab_b.ipynb")):
        write_notebook(d / nb, art, body=textwrap.dedent(RENDEZVOUS.format(art=art, rv=str(rv))))
    env_before, cwd_before = dict(os.environ), os.getcwd()
    results = {}
    def go(art, threads):
        results[art] = execute(one_job(fixture_repo, art), fixture_repo / "outputs", fixture_repo, threads=threads)
    ts = [threading.Thread(target=go, args=("fig_a", 1)), threading.Thread(target=go, args=("tab_b", 2))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=240)
    assert set(results) == {"fig_a", "tab_b"}
    import pandas as pd
    for art, threads in (("fig_a", 1), ("tab_b", 2)):
        m = results[art]
        assert m["status"] == "ok", m["error"]
        final = out_dir(fixture_repo, art, "small")
        claims = json.loads((final / "claims.json").read_text())
        assert claims[0]["verdict"] == "reproduced", f"{art}: the two kernels did not run at the same time"
        env = pd.read_csv(final / "env.csv", dtype=str).iloc[0]
        assert Path(env.out).parent == final.resolve().parent and Path(env.out).name.startswith(".tmp-small-")
        assert (env.omp, env.artefact, Path(env.cwd)) == (str(threads), f"p98_fix/{art}", d.resolve())
        assert m["threads"]["kernel"]["omp_num_threads"] == str(threads)
    assert dict(os.environ) == env_before and os.getcwd() == cwd_before    # this process was never touched
    assert not leftovers(fixture_repo)


# --- the kernel ------------------------------------------------------------------------------------------------------

def test_a_kernel_that_dies_is_a_failed_run(fixture_repo):
    m = run_body(fixture_repo, STARTED + "os._exit(1)\n")
    assert (m["status"], m["error"]["ename"]) == ("failed", "DeadKernelError"), m["error"]
    assert m["threads"]["kernel"] is None                            # nothing was asked of a dead kernel
    assert manifest(failed_dir(out_dir(fixture_repo, "fig_a", "small")))["error"]["ename"] == "DeadKernelError"
    assert not leftovers(fixture_repo)


def test_a_cell_past_the_timeout_is_a_failed_run_naming_the_cell(fixture_repo):
    m = run_body(fixture_repo, STARTED + "time.sleep(120)\n", timeout=3)
    assert (m["status"], m["error"]["ename"]) == ("failed", "CellTimeoutError"), m["error"]
    assert m["duration_s"] < 60 and not leftovers(fixture_repo)


def test_a_kernel_that_cannot_start_is_a_failed_run(fixture_repo, tmp_path, monkeypatch):
    # the kernel inherits this process's environment: a PYTHONPATH whose ipykernel_launcher exits at once
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "ipykernel_launcher.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    m = execute(one_job(fixture_repo), fixture_repo / "outputs", fixture_repo, threads=1)
    assert (m["status"], m["error"]["ename"]) == ("failed", "RuntimeError"), m["error"]
    assert "Kernel died before replying" in m["error"]["evalue"] and not leftovers(fixture_repo)


@pytest.mark.parametrize("sabotage,status", [
    ("__import__ = None\n", "ok"),                                       # the probe raises in the kernel
    ("__import__ = lambda *a, **k: time.sleep(600)\n", "ok"),            # the probe hangs: interrupted
    ("__import__ = lambda *a, **k: os._exit(1)\n", "failed"),            # the probe kills the kernel
])
def test_a_kernel_that_cannot_answer_the_thread_probe(fixture_repo, monkeypatch, sabotage, status):
    # the probe evaluates `__import__(...)` in the notebook's namespace, so a notebook that shadows it breaks it
    monkeypatch.setattr(executors, "_PROBE_WAIT", 3.0)
    m = run_body(fixture_repo, STARTED + sabotage)
    assert m["status"] == status and m["threads"]["kernel"] is None, m["error"]
    if status == "failed":
        assert m["error"]["ename"] == "DeadKernelError"
    assert m["duration_s"] < 60 and not leftovers(fixture_repo)


def test_probe_replies_that_cannot_be_read():
    ok = {"content": {"user_expressions": {"t": {"status": "ok", "data": {"text/plain": repr('{"torch": 1}')}}}}}
    assert _probe_result(ok) == {"torch": 1}
    for text in ("'not json'", "not a repr", repr("[1, 2]"), "3"):
        reply = {"content": {"user_expressions": {"t": {"status": "ok", "data": {"text/plain": text}}}}}
        assert _probe_result(reply) is None, text
    assert _probe_result({"content": {"user_expressions": {"t": {"status": "error", "ename": "TypeError"}}}}) is None
    assert _probe_result({"content": {}}) is None and _probe_result({}) is None


def test_failing_cell_of_a_missing_or_corrupt_notebook(tmp_path):
    none = {"cell_index": None, "cell_source": None}
    assert _failing_cell(tmp_path / "absent.ipynb") == none
    (tmp_path / "cut.ipynb").write_text('{"cells": [')
    assert _failing_cell(tmp_path / "cut.ipynb") == none


# --- the run's surroundings ------------------------------------------------------------------------------------------

def test_a_device_the_machine_lacks_is_a_failed_run_without_a_kernel(fixture_repo):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    job = one_job(fixture_repo)
    job.device = "cuda"                 # planned for a cluster's GPU worker, executed where there is none
    m = execute(job, fixture_repo / "outputs", fixture_repo, threads=1)
    assert (m["status"], m["error"]["ename"]) == ("failed", "DeviceUnavailable"), m["error"]
    assert "CUDA is not available" in m["error"]["evalue"] and m["threads"]["kernel"] is None
    failed = failed_dir(out_dir(fixture_repo, "fig_a", "small"))
    assert manifest(failed)["error"]["ename"] == "DeviceUnavailable" and not leftovers(fixture_repo)


@pytest.mark.parametrize("text", ["{not json", '{"a": 1}'])
def test_a_claims_json_written_by_the_notebook_itself_is_a_failed_run(fixture_repo, text):
    m = run_body(fixture_repo, STARTED + f"(out / 'claims.json').write_text({text!r})\n")
    assert (m["status"], m["error"]["ename"], m["claims"]) == ("failed", "BadClaims", 0), m["error"]
    assert (failed_dir(out_dir(fixture_repo, "fig_a", "small")) / "claims.json").is_file()
    assert not leftovers(fixture_repo)                  # it used to escape as a ValueError, leaving .tmp-* behind


def test_an_executed_notebook_that_cannot_be_written_is_a_failed_run(fixture_repo, monkeypatch):
    # papermill writes the executed notebook into the temporary folder: a full disk there is the run's failure
    import papermill
    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(papermill, "execute_notebook", full)
    m = execute(one_job(fixture_repo), fixture_repo / "outputs", fixture_repo, threads=1)
    assert (m["status"], m["error"]["ename"]) == ("failed", "OSError") and "No space left" in m["error"]["evalue"]
    assert manifest(failed_dir(out_dir(fixture_repo, "fig_a", "small")))["error"]["ename"] == "OSError"
    assert not leftovers(fixture_repo)


def test_guarded_execute_records_store_errors_and_lets_runner_bugs_through(fixture_repo, monkeypatch):
    job = one_job(fixture_repo)
    for exc, ename in ((StoreError("disk full"), "StoreError"), (LockBusy("held by x"), "LockBusy")):
        def boom(*a, exc=exc, **k):
            raise exc
        monkeypatch.setattr(executors, "execute", boom)
        m = executors.guarded_execute(job)
        assert (m["status"], m["error"]["ename"]) == ("failed", ename)
    def bug(*a, **k):
        raise TypeError("a bug of the runner")
    monkeypatch.setattr(executors, "execute", bug)
    with pytest.raises(TypeError, match="a bug of the runner"):
        executors.guarded_execute(job)


KILLER = """\
import os, signal
from neurips25.core import *
out = start_run("p98_fix", "tab_b")
os.kill(os.getppid(), signal.SIGKILL)    # the kernel's parent: the worker process executing the notebook
"""


def test_a_dead_local_worker_is_reported_recorded_and_its_folder_swept(fixture_repo):
    write_notebook(fixture_repo / "nbs" / "p98_fix" / "11_tab_b.ipynb", "tab_b", body=KILLER)
    r = run_cli(fixture_repo, "reproduce", "p98", "--profile", "small", "--jobs", "2", "--device", "cpu")
    assert r.returncode == 1 and "FAILED nbs/p98_fix/11_tab_b.ipynb" in r.stdout, r.stdout + r.stderr
    assert "BrokenProcessPool: worker process died" in r.stdout
    m = manifest(failed_dir(out_dir(fixture_repo, "tab_b", "small")))
    assert m["error"]["ename"] == "BrokenProcessPool"
    assert not leftovers(fixture_repo)                   # the dead worker's .tmp-small-* went with the record


class _Proc:
    "A worker process that is already gone: closed (ValueError) or not ours to signal (OSError)."
    def __init__(self, exc):
        self.exc, self.calls = exc, []

    def _fail(self, name):
        self.calls.append(name)
        raise self.exc

    def terminate(self):
        self._fail("terminate")

    def join(self, timeout=None):
        self._fail("join")

    def is_alive(self):
        return True

    def kill(self):
        self._fail("kill")


class _Pool:
    def __init__(self, procs, exc=None):
        self._processes, self.exc, self.shut = dict(enumerate(procs)), exc, False

    def shutdown(self, wait=True, cancel_futures=False):
        self.shut = True
        if self.exc:
            raise self.exc


def test_stop_workers_tolerates_workers_that_are_gone():
    procs = [_Proc(ValueError("process object is closed")), _Proc(PermissionError(1, "Operation not permitted"))]
    pool = _Pool(procs, exc=BrokenPipeError(32, "Broken pipe"))
    _stop_workers(pool, grace=0.1)
    assert all(p.calls == ["terminate", "join"] for p in procs) and pool.shut
    pool = _Pool([_Proc(TypeError("a bug"))])
    with pytest.raises(TypeError):
        _stop_workers(pool, grace=0.1)


def test_local_gpus_without_torch_or_with_a_failing_driver(monkeypatch):
    import sys
    import torch
    def failing():
        raise RuntimeError("driver too old")
    monkeypatch.setattr(torch.cuda, "device_count", failing)
    assert executors._local_gpus() == 0
    monkeypatch.setitem(sys.modules, "torch", None)                      # import torch -> ImportError
    assert executors._local_gpus() == 0


class _Gone:
    "A Dask client or cluster whose scheduler is gone."
    def __init__(self, exc):
        self.exc, self.calls = exc, []

    def cancel(self, futs):
        self.calls.append("cancel")
        raise self.exc

    def close(self):
        self.calls.append("close")
        raise self.exc


def test_close_dask_tolerates_a_scheduler_that_is_gone_and_lets_bugs_through():
    from distributed.comm.core import CommClosedError
    client, cluster = _Gone(CommClosedError("in <TCP>: Stream is closed")), _Gone(RuntimeError("IOLoop is closed"))
    _close_dask(client, cluster, {"f": 1})
    assert client.calls == ["cancel", "close"] and cluster.calls == ["close"]
    slow = _Gone(TimeoutError("timed out"))
    _close_dask(slow, None)
    assert slow.calls == ["cancel", "close"]
    _close_dask(None, None)                                              # nothing was started
    with pytest.raises(AttributeError):
        _close_dask(_Gone(AttributeError("a bug")), None)


def test_kernel_threads_on_a_dask_worker_ignore_the_nannys_omp_setting(monkeypatch):
    import distributed
    monkeypatch.setenv("OMP_NUM_THREADS", "1")                # what Dask's nanny sets in every worker process
    monkeypatch.setattr(executors, "usable_cpus", lambda: 8)
    class W:
        class state:
            nthreads = 2
    monkeypatch.setattr(distributed, "get_worker", lambda: W)
    assert executors._worker_threads() == 4
    def nowhere():
        raise ValueError("No worker found")
    monkeypatch.setattr(distributed, "get_worker", nowhere)
    assert executors._worker_threads() == 1                   # outside a worker: kernel_threads (OMP_NUM_THREADS)
