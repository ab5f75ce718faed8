"""The kinds of experiment a table can hold, by its config's ``trainer:`` (none: fairseq): one
`plan.ExperimentTrainer` each. A new kind is one declaration in its module and one entry here.

And what a table run's arguments must satisfy against the table's spec and its experiments'
trainers before any work (issue #26: mappings, the γ grid, the mappings' parameters in the
composed configs), refused up front with one line and exit status 2, never after the data is
built. The argparse types and the one-line parser are `core.cli`'s.
"""

from __future__ import annotations

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.cli import UsageError
from regattn_fairseq.experiments.core.config import (
    check_experiment_mappings,
    check_mappings,
    check_scale,
    experiment_mappings,
)
from regattn_fairseq.experiments.pipelines import fairseq_trainer, pretrained
from regattn_fairseq.experiments.pipelines.plan import ExperimentTrainer

TRAINERS = {trainer.name: trainer for trainer in (fairseq_trainer.TRAINER, pretrained.TRAINER)}
DEFAULT_TRAINER = fairseq_trainer.TRAINER.name


def trainer_of(experiment) -> ExperimentTrainer:
    """The trainer of a table's experiment.

    Raises
    ------
    UsageError
        a ``trainer:`` that is none of `TRAINERS`.
    """
    name = experiment.get("trainer") or DEFAULT_TRAINER
    if name not in TRAINERS:
        raise UsageError(
            f"{experiment.name}: trainer {name!r} is none of {sorted(TRAINERS)} "
            "(configs/reproduce/<table>.yaml, `trainer:`)"
        )
    return TRAINERS[name]


def table_experiments(spec, args) -> list:
    """The experiments a table run trains: the table's at the run's scale, or of those the
    ones `--experiments` names (the cheap SNLI half of the continuous table before its NMT
    half, say), in the table's order.

    Raises
    ------
    UsageError
        an unknown scale, or a name that is none of the table's experiments at that scale.
    """
    try:
        check_scale(args.scale)
    except ReproError as error:
        raise UsageError(str(error)) from None
    at_scale = [e for e in spec.experiments if args.scale in e.scales]
    names = args.experiments or [e.name for e in at_scale]
    unknown = [name for name in names if name not in {e.name for e in at_scale}]
    if unknown:
        raise UsageError(
            f"--experiments {' '.join(unknown)}: none of {spec.table}'s experiments at scale "
            f"{args.scale} ({', '.join(e.name for e in at_scale)}; "
            f"configs/reproduce/{spec.table}.yaml)"
        )
    return [e for e in at_scale if e.name in names]


def check_table(spec, experiments, args) -> None:
    """What a table run's arguments must satisfy before any data is read.

    Parameters
    ----------
    spec : DictConfig
        the table (configs/reproduce/<table>.yaml).
    experiments : list of DictConfig
        its experiments at the run's scale.
    args : argparse.Namespace
        `reproduce.parse_args`'s arguments.

    Raises
    ------
    UsageError
        an unknown scale, mapping or trainer, an experiment's own mappings outside the
        table's, GAMMA=auto without a grid, or a mapping parameter the mapping refuses (the
        experiment's trainer's ``check_mapping``; γ only for its ``gamma_mappings``).
    """
    try:
        check_scale(args.scale)
        mappings = list(args.mappings or spec.mappings)
        check_experiment_mappings(spec)
        for experiment in experiments:
            check_mappings(mappings, experiment.get("mapping_group", "attention"))
    except ReproError as error:
        raise UsageError(str(error)) from None
    if args.gamma == "auto" and not (args.gamma_grid or spec.get("gamma_grid")):
        raise UsageError(
            f"--gamma auto: configs/reproduce/{spec.table}.yaml has no gamma_grid; pass "
            "--gamma-grid (GAMMA_GRID=1,4)"
        )
    # one γ of the grid stands for all: each is > 0 (`gamma_grid`), the other options equal
    grid = args.gamma_grid or spec.get("gamma_grid") or [None]
    gamma = grid[0] if args.gamma == "auto" else args.gamma
    for experiment in experiments:
        trainer = trainer_of(experiment)
        for mapping in experiment_mappings(experiment, mappings):
            tuned = mapping in trainer.gamma_mappings
            trainer.check_mapping(experiment, args, mapping, gamma if tuned else None)
