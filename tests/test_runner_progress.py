"""Live progress (issue 36): on a terminal, `neurips25 reproduce` shows where each running notebook is — the cell it
executes and the notebook's own tqdm bar — and prints nothing extra when its output is not a terminal."""
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import textwrap
import time

from conftest import CLI, cli_env, make_repo, run_cli, write_notebook

SLOW = textwrap.dedent("""\
    import time
    from neurips25.core import *
    out = start_run("p98_fix", "{artefact}")
    for i in progress(range(8), desc="steps", mininterval=0):
        time.sleep(0.4)
    record_claim("n_positive", "n is positive", "qualitative", n, "n > 0", "reproduced" if n > 0 else "not reproduced")
    """)


def slow_repo(tmp_path):
    root = make_repo(tmp_path / "repo")
    for nb, art in (("10_fig_a.ipynb", "fig_a"), ("11_tab_b.ipynb", "tab_b")):
        write_notebook(root / "nbs" / "p98_fix" / nb, art, body=SLOW.format(artefact=art))
    return root


def run_in_pty(root, *args, timeout=240):
    "Run the CLI with a pseudo-terminal (200 columns) as stdin, stdout and stderr; return (rc, everything it wrote)."
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = cli_env(NEURIPS25_PROGRESS="1", COLUMNS="200")
    p = subprocess.Popen([*CLI, "--root", str(root), *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                         cwd=str(root), close_fds=True)
    os.close(slave)
    buf, deadline = b"", time.time() + timeout
    try:
        while time.time() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:                    # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                buf += chunk
            elif p.poll() is not None:
                break
        else:
            p.kill()
            raise AssertionError(f"no exit within {timeout} s:\n{buf.decode(errors='replace')[-3000:]}")
    finally:
        os.close(master)
    return p.wait(), buf.decode(errors="replace")


def test_live_progress_on_a_terminal_from_workers_and_in_process(tmp_path):
    root = slow_repo(tmp_path)
    rc, out = run_in_pty(root, "reproduce", "p98", "--profile", "small", "--device", "cpu", "--jobs", "2")
    assert rc == 0, out[-3000:]
    for art in ("fig_a", "tab_b"):             # each worker's kernel reported its cell and its own tqdm bar
        assert re.search(rf"p98_fix/{art} \[small\]: cell \d/\d · steps: \d+% \d/8", out), out[-3000:]
    rc, out = run_in_pty(root, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu", "--force")
    assert rc == 0 and re.search(r"p98_fix/fig_a \[small\]: cell \d/\d · steps: \d+% \d/8", out), out[-3000:]


def test_no_live_progress_when_not_a_terminal(tmp_path):
    root = slow_repo(tmp_path)
    r = run_cli(root, "reproduce", "p98/fig_a", "--profile", "small", "--device", "cpu", NEURIPS25_PROGRESS="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cell " not in r.stdout + r.stderr and "steps:" not in r.stdout + r.stderr
