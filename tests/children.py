"""The processes the tests start: every test that starts one goes through here.

Two ways in: `run` runs a command to its end (its output read while the test waits), and
`started` hands the test a running child (one it talks to, or several at once) for the length
of a ``with`` block. Either way the child leads a process group of its own, and when the test
leaves (normally, on a failed assertion, on its own timeout or on pytest-timeout's, which
raises in the test: ``timeout_method = "signal"`` in pyproject.toml) the whole group is killed
and the child reaped: make's recipes, ``reproduce.py``'s fairseq trainings and torchrun's
workers included. So a test leaves no process behind to hold a run lock or two cores.

The other half of the rule: a child writing into a pipe that nobody reads blocks once the pipe
is full (64 KiB: a model printout and a page of fairseq log lines), and a test waiting for that
child waits for ever. `run` reads both pipes while it waits (``communicate``); a test that runs
children side by side gives each an ``output`` file instead of pipes.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def kill_group(process: subprocess.Popen) -> None:
    """Kill `process`'s process group (the child and whatever it started that is still in
    the group), then reap the child; a group already gone is not an error. Also after a
    child that ended by itself: what it started may still run in its group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


@contextmanager
def started(
    args: Sequence[str | os.PathLike], *, output: Path | None = None, **popen
) -> Iterator[subprocess.Popen]:
    """A running child for the length of a ``with`` block; its process group is killed when
    the block is left, however it is left.

    Parameters
    ----------
    args : sequence of str or path
        the command.
    output : Path, optional
        a file for the child's stdout and stderr, one stream (for children that run while the
        test waits on something else). Without it the test passes ``stdout=``/``stderr=`` in
        `popen` and reads what it asked for.
    **popen
        `subprocess.Popen`'s other arguments (``cwd``, ``env``, ``text``...).

    Yields
    ------
    subprocess.Popen
    """
    if output is not None:
        with open(output, "wb") as sink:  # the child has its own copy of the descriptor
            process = subprocess.Popen(
                args, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, **popen
            )
    else:
        process = subprocess.Popen(args, start_new_session=True, **popen)
    try:
        yield process
    finally:
        kill_group(process)


def run(
    args: Sequence[str | os.PathLike],
    *,
    timeout: float | None = None,
    input: str | None = None,
    check: bool = False,
    **popen,
) -> subprocess.CompletedProcess:
    """Run a command to its end and return its exit status and output (text), as
    ``subprocess.run(args, capture_output=True, text=True)`` does, with the child's whole
    process group killed when the test stops waiting (`started`).

    Parameters
    ----------
    args : sequence of str or path
        the command.
    timeout : float, optional
        seconds to wait; past them `subprocess.TimeoutExpired` is raised, the group killed.
        Without it the test's own timeout (pytest-timeout) bounds the wait.
    input : str, optional
        text for the child's stdin (otherwise it inherits the test's).
    check : bool
        a non-zero exit status fails the test, with the command and the end of its output.
    **popen
        `subprocess.Popen`'s other arguments (``cwd``, ``env``...).

    Returns
    -------
    subprocess.CompletedProcess
        ``returncode``, ``stdout`` and ``stderr`` (text).
    """
    stdin = subprocess.PIPE if input is not None else None
    with started(
        args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    ) as process:
        stdout, stderr = process.communicate(input, timeout=timeout)
    done = subprocess.CompletedProcess(list(args), process.returncode, stdout, stderr)
    if check and done.returncode != 0:
        command = " ".join(map(str, args))
        raise AssertionError(
            f"{command} exited with {done.returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
        )
    return done
