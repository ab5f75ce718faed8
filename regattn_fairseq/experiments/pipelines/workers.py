"""Processes that share one table run's jobs on this machine (``--workers N``, ``WORKERS=N``).

The process a user starts is worker 0. Once the data is prepared and the plan printed, it
starts workers 1..N-1: the same command line, each told its number (``--worker k``), its
output in ``WORK_DIR/logs/reproduce-<table>-<scale>-worker<k>.log``. Every worker walks the
table's jobs in the same order twice (the trainers' ``run``):

1. it trains each job whose run folder no other worker holds (`core.run_lock.run_lock` with
   ``wait=False``), leaving a held one to its holder;
2. it walks them again as a single process does, waiting for a held folder, then finding the
   job finished (its rows written by its holder) and skipping it.

So each job is trained once, by whichever worker reaches it first, and a worker that exits 0
leaves every job it was asked for finished, as a single process does. A worker killed mid-job
frees its folder (the kernel drops the lock); the worker that comes to it next resumes it from
its checkpoints. Worker 0 waits for the others before it exits, and fails, naming the log,
when one of them failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from regattn_checkout.errors import ReproError


@dataclass(frozen=True)
class Worker:
    """A worker that worker 0 started: its number, its process and the file of its output."""

    number: int
    process: subprocess.Popen
    log: Path


def worker_log(work_dir: Path, table: str, scale: str, number: int) -> Path:
    """Where worker `number` (1..N-1) writes its output."""
    return work_dir / "logs" / f"reproduce-{table}-{scale}-worker{number}.log"


def worker_command(argv: list[str], number: int) -> list[str]:
    """Worker `number`'s command: this command line (`argv`, without the program), told its
    number."""
    module = "regattn_fairseq.experiments.pipelines.reproduce"
    return [sys.executable, "-m", module, *argv, "--worker", str(number)]


@contextmanager
def other_workers(
    argv: list[str], workers: int, work_dir: Path, table: str, scale: str
) -> Iterator[list[Worker]]:
    """Start workers 1..`workers`-1 on this command line; on leaving, wait for each.

    Parameters
    ----------
    argv : list of str
        the command line of worker 0, without the program.
    workers : int
        how many workers share the jobs, worker 0 included (1: none is started).
    work_dir : Path
        the run's work folder (the logs go to its ``logs/``).
    table, scale : str
        for the logs' names.

    Yields
    ------
    list of Worker
        the workers started.

    Raises
    ------
    ReproError
        on leaving, a worker that failed (its exit status and its log), unless worker 0 is
        already leaving with an error of its own.
    """
    started: list[Worker] = []
    for number in range(1, workers):
        log = worker_log(work_dir, table, scale, number)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"--- worker {number} of {workers}, started {time.strftime('%F %T')}\n")
            out.flush()
            process = subprocess.Popen(
                worker_command(argv, number), stdout=out, stderr=subprocess.STDOUT
            )
        started.append(Worker(number, process, log))
    if started:
        others = "; ".join(f"worker {w.number}: pid {w.process.pid}, log {w.log}" for w in started)
        print(
            f"[workers] {workers} workers share the jobs: this process (worker 0) and {others}",
            flush=True,
        )
    failed = True
    try:
        yield started
        failed = False
    finally:
        _wait_for(started, raise_on_failure=not failed)


def _wait_for(started: list[Worker], raise_on_failure: bool) -> None:
    """Wait for each worker to end; a failed one is an error naming its log (only said when
    worker 0 has an error of its own, which is the one raised)."""
    failures = []
    for worker in started:
        if worker.process.poll() is None:
            print(
                f"[workers] waiting for worker {worker.number} (pid {worker.process.pid}) to "
                f"end; its log: {worker.log}",
                flush=True,
            )
        status = worker.process.wait()
        if status != 0:
            failures.append(f"worker {worker.number} exited with status {status}: see {worker.log}")
    if failures and raise_on_failure:
        raise ReproError("; ".join(failures))
    for failure in failures:
        print(f"[workers] {failure}", flush=True)
