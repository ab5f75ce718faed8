"""How the entry points end (issue #26): a bad argument is one line and exit status 2, a
failure one line and status 1, and Ctrl-C says where the run stopped and the command that
resumes it (status 130, the shell's for SIGINT), never a traceback.

The stage a run is in is noted as it goes (`at`: preparing, training, scoring); an interrupted
run resumes from there when the same command runs again: prepared data is cached, training
resumes from checkpoint_last.pt and finished jobs are skipped.

`OneLineParser` is the entry points' parser (argparse's own errors as one line); the type
functions below give argparse messages in the user's terms (`pipelines.trainers.check_table`
checks what needs a table's spec)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable

from regattn_checkout.errors import ReproError
from regattn_fairseq import log_levels


class UsageError(ReproError):
    """A bad argument: printed as one line, exit status 2 (argparse's convention)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line: ``<prog>: error: <message> (--help lists the
    options)``, exit status 2, without the usage block (the tables' usage is 40 lines), and a
    ``-v`` option: the libraries' log lines (fairseq's, Hydra's, matplotlib's) are shown from
    WARNING up, from INFO with ``-v``, from DEBUG with ``-vv`` (`log_levels`, issue #46)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=0,
            help="show the libraries' INFO log lines (-vv: DEBUG); by default only warnings",
        )

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        log_levels.set_verbosity(parsed.verbose)
        return parsed, rest

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message} (--help lists the options)\n")
        sys.exit(2)


def gamma_seeds(text: str) -> str | list[int]:
    """``"all"``, ``"first"`` or a seed list such as ``"1"`` (argparse type of
    --gamma-seeds: the seeds whose γ grid runs choose γ).

    Raises
    ------
    argparse.ArgumentTypeError
        neither word nor a list of whole numbers >= 0.
    """
    if text in ("all", "first"):
        return text
    try:
        return seed_list(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"--gamma-seeds is `all`, `first` or seeds such as `1` or `1,2`; got {text!r}"
        ) from None


def seed_list(text: str) -> list[int]:
    """``"1 2 3"`` or ``"1,2,3"`` -> [1, 2, 3] (argparse type of --seeds).

    Raises
    ------
    argparse.ArgumentTypeError
        a value is not a whole number >= 0, or there is none.
    """
    values = text.replace(",", " ").split()
    if not values or not all(v.isdigit() for v in values):
        raise argparse.ArgumentTypeError(
            f"seeds are whole numbers >= 0, e.g. `1 2 3` or `1,2,3`; got {text!r}"
        )
    return [int(v) for v in values]


def gamma_grid(text: str) -> list[float]:
    """``"1,4"`` -> [1.0, 4.0] (argparse type of --gamma-grid).

    Raises
    ------
    argparse.ArgumentTypeError
        a value is not a number > 0, or there is none.
    """
    values = text.replace(",", " ").split()
    try:
        grid = [float(v) for v in values]
    except ValueError:
        grid = []
    if not grid or not all(g > 0 for g in grid):
        raise argparse.ArgumentTypeError(
            f"the γ grid is numbers > 0, e.g. `1,4` or `0.5 1 2`; got {text!r}"
        )
    return grid


def whole_number(minimum: int):
    """An argparse type: a whole number >= `minimum`, named as such in its error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


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
