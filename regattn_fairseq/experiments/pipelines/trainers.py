"""The kinds of experiment a table can hold, by its config's ``trainer:`` (none: fairseq): one
`plan.ExperimentTrainer` each. A new kind is one declaration in its module and one entry here.
"""

from __future__ import annotations

from regattn_fairseq.experiments.core.cli import UsageError
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
