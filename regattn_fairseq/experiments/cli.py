"""How the entry points end (issue #26): a bad argument is one line and exit status 2, a
failure one line and status 1, and Ctrl-C says where the run stopped and the command that
resumes it (status 130, the shell's for SIGINT), never a traceback.

The stage a run is in is noted as it goes (`at`: preparing, training, scoring); an interrupted
run resumes from there when the same command runs again: prepared data is cached, training
resumes from checkpoint_last.pt and finished jobs are skipped."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable

from .arguments import UsageError
from .common import ReproError

_STAGE = {"now": "starting"}


def at(stage: str) -> None:
    """Note the stage the run is in, for the message of an interrupt.

    Parameters
    ----------
    stage : str
        e.g. ``"training nmt multi30k softmax seed 1 in <folder>"``.
    """
    _STAGE["now"] = stage


def resume_command(argv: list[str] | None = None) -> str:
    """The command that resumes an interrupted run: the same one, without --retrain (which
    would delete the interrupted job's checkpoints and start it over).

    Parameters
    ----------
    argv : list of str, optional
        the command line (default `sys.argv`).

    Returns
    -------
    str
        A shell command line.
    """
    argv = [arg for arg in (argv or sys.argv) if arg != "--retrain"]
    command = shlex.join([os.path.relpath(sys.executable), *argv])
    # under make the user typed a make command: the same one does it
    return command + " (or the same make command)" * bool(os.environ.get("MAKELEVEL"))


def run_main(run: Callable[[], None]) -> None:
    """Run an entry point's `run`, ending as the module docstring says.

    Parameters
    ----------
    run : callable
        the entry point's body.
    """
    try:
        run()
    except UsageError as error:
        sys.stderr.write(f"error: {error}\n")
        sys.exit(2)
    except ReproError as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:
        note = " (--retrain left out: it would start the interrupted job over)" * (
            "--retrain" in sys.argv
        )
        sys.stderr.write(
            f"\ninterrupted while {_STAGE['now']}. Nothing was written for the unfinished "
            f"job; to resume, run the same command again{note}:\n  {resume_command()}\n"
        )
        sys.exit(130)
