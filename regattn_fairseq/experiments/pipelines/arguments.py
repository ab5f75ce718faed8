"""The command-line options that several pipelines share, declared once: where the data comes
from (scale, data root, source, local copies), where outputs go (work and results folders) and
whether finished jobs run again."""

from __future__ import annotations

import argparse
from pathlib import Path

from regattn_fairseq.experiments.core.paths import (
    DEFAULT_WORK_DIR,
    RESULTS_DIR,
    SMOKE_RESULTS_DIR,
)
from regattn_fairseq.experiments.data.sources import SOURCES


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """--scale, --data-dir, --source, --local-data and --work-dir."""
    parser.add_argument(
        "--scale",
        default="small",
        help="paper | small | smoke (default small; README, 'Reproducing the papers' tables')",
    )
    parser.add_argument(
        "--data-dir", help="offline data root (default $REGATTN_DATA_DIR or ../shared/data)"
    )
    parser.add_argument(
        "--source",
        choices=list(SOURCES),
        help="data source (default: per dataset and scale, configs/prepare/; "
        "docs/reproduction.md 'Data sources')",
    )
    parser.add_argument(
        "--local-data",
        help="--source local: the folder holding the official distributions "
        "(default $REGATTN_LOCAL_DATA)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK_DIR,
        help="where data/ (prepared data) and checkpoints/ go",
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """--results-dir, --rescore and --allow-dirty: the options of a pipeline that writes rows."""
    parser.add_argument(
        "--results-dir",
        type=Path,
        help=f"where the tables go (default {RESULTS_DIR}; at --scale smoke, a pipeline check, "
        f"the scratch folder {SMOKE_RESULTS_DIR}, so that the committed tables stay as they are)",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="score again jobs whose rows exist (make RESCORE=1); the checkpoint is reused",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="start a small/paper run on a dirty work tree (ALLOW_DIRTY=1); rows are marked",
    )


def results_dir(args: argparse.Namespace) -> Path:
    """The results folder of a run: --results-dir, else results/ (the scratch folder for smoke).

    Parameters
    ----------
    args : argparse.Namespace
        parsed arguments of `add_data_arguments` and `add_run_arguments`.

    Returns
    -------
    Path
        The folder, resolved.
    """
    default = SMOKE_RESULTS_DIR if args.scale == "smoke" else RESULTS_DIR
    return (args.results_dir or default).resolve()
