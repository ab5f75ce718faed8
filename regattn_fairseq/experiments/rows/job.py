"""A job of the suite: one model (or trivial baseline) of one experiment, trained with one
mapping and seed, and scored on the experiment's evaluation sets, one row each.

A job is known in full before it runs: its run folder and the key of the rows it will write
(`keys.job_key`, from the config the training will compose), so that a finished job is found
from the rows alone (`Job.finished`). The table runs (`pipelines.reproduce`), the sweeps
(`pipelines.sweep`), γ selection and the re-run of a committed row (`pipelines.rerun`) build
jobs; `pipelines.jobs.run_job` is their lifecycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.rows.keys import finished_rows


@dataclass(frozen=True, eq=False)
class Job:
    """One job: what it trains, where it runs, and the key of its rows.

    Attributes
    ----------
    experiment : DictConfig
        the experiment (configs/reproduce/<table>.yaml's, or a sweep's).
    scale : str
        the scale.
    data : PreparedData
        the experiment's data.
    mapping : str
        the mapping (a baseline's label for a baseline).
    seed : int
        the training seed (0 for a baseline).
    run_dir : Path
        the job's folder: its checkpoints, logs, decodes; its lock (`run_lock`).
    key : tuple or None
        the key of the rows it writes (`keys.job_key`), less their evaluation; None for a
        run that writes none (a γ grid's).
    evaluations : tuple of str
        the evaluation sets it scores, one row each.
    label : str
        the job in messages and its lock, e.g. ``"nmt softmax seed 1"``.
    gamma : float or None
        the mapping's temperature γ the job trains at (None: its config's).
    gamma_selection : dict or None
        GAMMA=auto's record of how γ was chosen, kept in the rows.
    sweep_params : dict
        a sweep job's swept values (parameter -> value as a string); empty for a table's job.
    overrides : tuple of str
        the training's Hydra overrides beyond the experiment's and the mapping's.
    dry_run : dict or None
        a dry run's caps (`dry_run.DryRun.record`), in the rows and their key.
    """

    experiment: DictConfig
    scale: str
    data: PreparedData
    mapping: str
    seed: int
    run_dir: Path
    key: tuple | None
    evaluations: tuple[str, ...]
    label: str
    gamma: float | None = None
    gamma_selection: dict | None = None
    sweep_params: dict = field(default_factory=dict)
    overrides: tuple[str, ...] = ()
    dry_run: dict | None = None

    def finished(self, rows: list[dict]) -> list[dict]:
        """The job's rows among `rows`, one per evaluation set, or [] while one is missing
        (`keys.finished_rows`)."""
        return finished_rows(rows, self.key, list(self.evaluations))
