"""Hydra callbacks of regattn's fairseq-hydra-train configs (configs/runtime/default.yaml)."""

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from regattn_fairseq.fairseq_adapter import (
    log_progress_into_active_wandb_run,
    reset_best_checkpoint_loss,
    resume_early_stopping,
)


class FreshCheckpointBest(Callback):
    """Each job of a multirun starts with no best validation loss and no early-stopping count.

    Hydra's basic launcher runs a multirun's jobs one after another in one process, and fairseq
    keeps the best validation loss seen so far in the process (see
    fairseq_adapter.reset_best_checkpoint_loss). Left alone, a job whose validation loss never
    beats an earlier job's best writes no checkpoint_best.pt, and the best it records in its
    checkpoint_last.pt is the other job's. A job that resumes from its own checkpoint_last.pt
    gets its own best back from it: fairseq restores it after this callback has run. Its
    early-stopping count is given back here, when the environment carries it
    (fairseq_adapter.resume_early_stopping).
    """

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        reset_best_checkpoint_loss()
        resume_early_stopping(config.checkpoint.save_dir)


class WandbRun(Callback):
    """Each training job is a wandb run (offline unless WANDB_MODE says otherwise), with the
    run's config; fairseq logs its training curves into it, the suite its final metrics
    (regattn_fairseq/experiments/train/tracking.py). A multirun's jobs share one process: each job's
    run ends with the job."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from regattn_fairseq.experiments.train import tracking

        tracking.start_training_run(config)
        # fairseq's hook would otherwise call wandb.init at every progress bar, and each call
        # leaves an empty run folder even while returning this run
        log_progress_into_active_wandb_run()

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from regattn_fairseq.experiments.train import tracking

        tracking.finish_training_run()
