"""`children`: a test that outlives its timeout leaves no process behind, and a child's output
is read while the test waits for it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import children

TESTS_DIR = Path(__file__).resolve().parent

# a child that starts a grandchild (in its group, as fairseq trainings and make recipes are),
# writes both pids, then sleeps; the grandchild sleeps too
SLEEPER = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(sys.argv[1], "w") as pids:
    pids.write(f"{os.getpid()} {grandchild.pid}\\n")
time.sleep(300)
"""

# the test that times out: pytest-timeout (signal method, as in pyproject.toml) ends it in
# `children.run`'s wait, once both pids are written
INNER_TEST = """
import sys, time
from pathlib import Path

import pytest

import children


@pytest.mark.timeout(3)
def test_sleeps_past_its_timeout():
    children.run([sys.executable, "-c", {sleeper!r}, {pids!r}])
"""


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, dead and waiting to be reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_test_past_its_timeout_leaves_no_process_behind(tmp_path):
    pids = tmp_path / "pids"
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER_TEST.format(sleeper=SLEEPER, pids=str(pids)))
    # subprocess.run, not `children.run`: killing the inner session's group at its end would
    # hide what the inner test itself left behind
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(inner)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TESTS_DIR)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    started = [int(pid) for pid in pids.read_text().split()] if pids.exists() else []
    try:
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Timeout (>3.0s)" in result.stdout, result.stdout
        assert len(started) == 2  # the child and the grandchild had both started
        deadline = time.monotonic() + 10  # SIGKILL is delivered at once; the kernel frees lazily
        while any(map(running, started)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in started if running(pid)]
    finally:  # what a failure left behind
        for pid in filter(running, started):
            os.kill(pid, signal.SIGKILL)


def test_a_child_that_fills_its_pipes_does_not_block():
    # 1 MiB on each of stdout and stderr: far past a pipe's 64 KiB
    code = "import sys; sys.stdout.write('o' * 2**20); sys.stderr.write('e' * 2**20)"
    result = children.run([sys.executable, "-c", code], timeout=60)
    assert result.returncode == 0
    assert len(result.stdout) == len(result.stderr) == 2**20


def test_leaving_the_block_on_an_error_kills_the_child(tmp_path):
    try:
        with children.started(
            [sys.executable, "-c", "import time; time.sleep(300)"], output=tmp_path / "log"
        ) as child:
            raise RuntimeError("the test failed")
    except RuntimeError:
        pass
    assert child.returncode == -9 and not running(child.pid)
