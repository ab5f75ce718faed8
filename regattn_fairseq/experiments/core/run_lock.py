"""One writer per training folder: a lock per run folder, held from before training until the
job's rows are written (`rows.store.refuse_finished` refuses a second row for a finished job).

Two identical commands started at once (two `make reproduce-table1` with the same folders)
used to train the same model into the same checkpoint folder at once and both write its rows.
Now the second process to reach a run folder **waits** for the first to finish it, then reads
the table again and skips the job as finished (or, if the first one failed or was killed
before its rows, runs it itself, resuming from the checkpoints). Waiting rather than skipping
keeps one contract: a command that exits 0 leaves every job it was asked for finished, and
GAMMA=auto needs every grid run's validation loss anyway.

Processes that share a table's work (``--workers``) take a job only when its folder is free
(`run_lock` with ``wait=False``): a held one is left to its holder and waited for once the free
ones are done.

The lock is `fcntl.flock` on a file beside the run folder (``.<folder>.lock``; --retrain
deletes the folder itself). The kernel releases it when its holder dies, SIGKILL included, so a
killed run never blocks the next one; the lock file records the owner's pid, host and command,
for the waiting message and for the message of the process that takes over a lock whose owner
died without releasing it. The training processes a run starts inherit the lock
(`inherited_fds`, passed by `core.tools.run_logged`): if the orchestrating process is killed while
fairseq trains on, the folder stays locked until that training ends too."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# the file descriptors of the run locks this process holds (children inherit them)
_HELD: list[int] = []


def lock_path(run_dir: Path) -> Path:
    """The lock file of a run folder: beside it, so that deleting the folder (--retrain)
    never deletes a lock another process holds."""
    run_dir = Path(run_dir)
    return run_dir.parent / f".{run_dir.name}.lock"


def owner_record() -> dict:
    """What this process writes into a lock it holds."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv),
    }


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, under another user
        return True
    return True


def describe_owner(owner: dict | None) -> str:
    """The owner of a lock in words (pid, host, since when, whether it still runs)."""
    if not owner:
        return "another process (it recorded no owner)"
    where = f"pid {owner['pid']} on {owner['host']} since {owner['since']}"
    if owner["host"] == socket.gethostname() and not pid_alive(owner["pid"]):
        where += " (no longer running; a training process it started holds the lock)"
    return where


def _read_owner(handle) -> dict | None:
    handle.seek(0)
    text = handle.read()
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:  # an owner killed while writing its record
        return None


@contextmanager
def run_lock(run_dir: Path, label: str, wait: bool = True) -> Iterator[bool | None]:
    """Hold a run folder's lock: wait while another process holds it, or, with ``wait=False``
    (processes sharing a table's jobs, ``--workers``), leave the folder to its holder.

    Parameters
    ----------
    run_dir : Path
        the run folder (checkpoints, decode output, scores).
    label : str
        the job in words, for the messages (e.g. ``"snli softmax seed 1"``).
    wait : bool
        False: never wait; a folder another process holds is said in a line and not held.

    Yields
    ------
    bool or None
        Whether this process had to wait (the caller then reads the table again: the other
        process may have finished the job); None, with ``wait=False``, when another process
        holds the folder and nothing is held.
    """
    with _lock_file(run_dir) as handle:
        waited = False
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_owner(_read_owner(handle))
            if not wait:
                print(
                    f"[share] {label}: {run_dir} is run by {holder}; on to the next job (this "
                    "one is waited for at the end)",
                    flush=True,
                )
                yield None
                return
            print(
                f"[wait] {label}: {run_dir} is locked by {holder}; "
                "waiting for it (then the job is skipped if it finished)",
                flush=True,
            )
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = True
        with _held(handle, run_dir, label):
            yield waited


@contextmanager
def _lock_file(run_dir: Path):
    path = lock_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        yield handle


@contextmanager
def _held(handle, run_dir: Path, label: str) -> Iterator[None]:
    """With the lock taken on `handle`: record this process as its owner (saying so when the
    previous owner was killed holding it), and clear the record and release on the way out."""
    previous = _read_owner(handle)
    if previous is not None:  # its holder ended without clearing it: killed
        print(
            f"[lock] {label}: taking over {run_dir} from pid {previous['pid']} on "
            f"{previous['host']} (started {previous['since']}), which ended without "
            "releasing it; its checkpoints are resumed",
            flush=True,
        )
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(owner_record()) + "\n")
    handle.flush()
    _HELD.append(handle.fileno())
    try:
        yield
    finally:
        _HELD.remove(handle.fileno())
        # cleared: a record left in the file means its owner was killed
        handle.seek(0)
        handle.truncate()
        handle.flush()
        fcntl.flock(handle, fcntl.LOCK_UN)


def inherited_fds() -> tuple[int, ...]:
    """The run locks this process holds, for the processes it starts to inherit
    (`core.tools.run_logged`): the lock then lasts as long as any process of the run."""
    return tuple(_HELD)
