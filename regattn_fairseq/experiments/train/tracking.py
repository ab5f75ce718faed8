"""Experiment tracking with wandb: every training run is a wandb run, offline unless the user
asks otherwise (`WANDB_MODE=online WANDB_PROJECT=...`; offline runs are uploaded later with
`wandb sync`).

One wandb run per training run, in three steps:

1. `start_training_run`, from the Hydra callback `regattn_fairseq.hydra_callbacks.WandbRun`
   when a training job starts (in the training process, rank 0 only): the run's config
   (mapping and its γ/λ/p/α, scale, seed, data and its fingerprint, commit, world size), its
   group (a sweep's jobs share one: `sweep_<name>/<scale>-<source>`) and a run id derived from
   the checkpoint folder, so a resumed training continues the same run. Its identity is
   written to `<run dir>/wandb_run.json`.
2. fairseq's own wandb hook (`common.wandb_project`, set in configs/runtime/default.yaml)
   logs the training curves into that run, which the callback makes it do without calling
   wandb.init again (`fairseq_adapter.log_progress_into_active_wandb_run`): so a training
   leaves exactly one run folder, `<run dir>/wandb/offline-run-*` when offline.
3. `log_results`, after scoring (`pipelines.jobs.score_model`): the final metrics and attention
   statistics go into the run's summary, by its id.

Everything wandb writes goes under `<run dir>/wandb/` (WANDB_DIR and its cache folders), the
run dir being the checkpoint folder's parent; never the home folder.

`WANDB_MODE=disabled` turns tracking off: none of the three steps runs and wandb is not
imported, so a machine without wandb (the GPU machine, whose Python has none) trains and scores;
fairseq's own hook then finds no wandb and logs a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.provenance import git_state
from regattn_fairseq.experiments.core.labels import MAPPING_PARAMS, mapping_label
from regattn_fairseq.experiments.core.result_row import attention_stats
from regattn_fairseq.experiments.data.fingerprint import data_fingerprint

RUN_RECORD = "wandb_run.json"
# the attention options a run's config names (None where the model has none)


def disabled() -> bool:
    """Whether the user turned tracking off (``WANDB_MODE=disabled``, wandb's own switch)."""
    return os.environ.get("WANDB_MODE") == "disabled"


def offline_by_default() -> None:
    """wandb stays offline and quiet unless the user set WANDB_MODE / WANDB_SILENT."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")


def run_id(save_dir: Path) -> str:
    """The wandb run id of a training run: stable for its checkpoint folder, so that a
    resumed training and its scoring log into the same run."""
    return hashlib.sha256(str(Path(save_dir).resolve()).encode()).hexdigest()[:16]


def file_settings(run_dir: Path) -> dict:
    """The environment that puts WANDB_DIR and wandb's cache, data and artifact folders (which
    default to the home folder) under `run_dir/wandb`."""
    root = Path(run_dir) / "wandb"
    root.mkdir(parents=True, exist_ok=True)
    return {
        "WANDB_DIR": str(run_dir),
        "WANDB_CACHE_DIR": str(root / "cache"),
        "WANDB_DATA_DIR": str(root / "data"),
        "WANDB_ARTIFACT_DIR": str(root / "artifacts"),
    }


@contextlib.contextmanager
def files_under(run_dir: Path):
    """`file_settings(run_dir)` while the block runs, restored afterwards."""
    settings = file_settings(run_dir)
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_config(cfg: DictConfig, task_overrides: list[str]) -> dict:
    """What a training run's wandb config records, from its composed config.

    Parameters
    ----------
    cfg : DictConfig
        the job's composed fairseq config.
    task_overrides : list[str]
        the job's Hydra overrides (the scale is the choice of its `scale/<group>` override).

    Returns
    -------
    dict
        mapping, its parameters, scale, seed, data (path and fingerprint), commit (and
        whether the tree was dirty), model architecture and data-parallel world size (keys
        apart from the sections of fairseq's own config, which its hook adds).
    """

    model = cfg.model
    criterion = cfg.get("criterion") or {}
    scales = [o.split("=", 1)[1] for o in task_overrides if o.startswith("scale/")]
    state = git_state()
    return {
        # the NER tagger has no attention: its "mapping" is the DP regulariser
        "mapping": model.get("attention") or criterion.get("dp_reg"),
        **{name: model.get(name) for name in MAPPING_PARAMS},
        **({"dp_gamma": criterion.get("dp_gamma")} if "dp_reg" in criterion else {}),
        "scale": scales[0] if scales else None,
        "seed": cfg.common.seed,
        "data": {"path": cfg.task.data, "fingerprint": data_fingerprint(Path(cfg.task.data))},
        "commit": state["git_commit"],
        "dirty": state["git_dirty"],
        "architecture": model.get("_name"),
        "world_size": cfg.distributed_training.distributed_world_size,
    }


def run_name(config: dict) -> str:
    """e.g. ``fusedmax (λ=0.1) seed1``: the mapping with its parameters
    (`labels.mapping_label`), the seed."""
    params = {name: config.get(name) for name in MAPPING_PARAMS}
    return f"{mapping_label(str(config['mapping']), params)} seed{config['seed']}"


def start_training_run(cfg: DictConfig) -> None:
    """Start the wandb run of the training job about to run in this process (see the module
    docstring); ranks other than 0 log nothing (fairseq logs from rank 0 only).

    Parameters
    ----------
    cfg : DictConfig
        the job's composed config (Hydra's `on_job_start`).
    """
    if disabled():
        return
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    offline_by_default()
    if int(os.environ.get("RANK", "0")) != 0:  # torchrun's rank of this process
        return
    import wandb

    hydra = HydraConfig.get()
    save_dir = Path(cfg.checkpoint.save_dir)
    run_dir = save_dir.parent
    config = run_config(cfg, list(hydra.overrides.task))
    group = os.environ.get("WANDB_RUN_GROUP")
    if hydra.mode == RunMode.MULTIRUN:  # a sweep: its jobs form one group
        sweep_dir = Path(hydra.sweep.dir)
        group = f"{sweep_dir.parent.name}/{sweep_dir.name}"
    identity = {
        "id": run_id(save_dir),
        # fairseq's common.wandb_project: $WANDB_PROJECT, else regattn (configs/runtime/)
        "project": cfg.common.wandb_project,
        "name": run_name(config),
        "group": group,
        "dir": str(run_dir),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_RECORD).write_text(json.dumps(identity, indent=2) + "\n")
    # for the whole job: fairseq's wandb.init, and what wandb writes while it trains
    os.environ.update(file_settings(run_dir))
    wandb.init(
        id=identity["id"],
        project=identity["project"],
        name=identity["name"],
        group=group,
        job_type="train",
        dir=str(run_dir),
        config=config,
        resume="allow",
    )


def finish_training_run() -> None:
    """End this process's wandb run, if any: the next job of a multirun (same process) starts
    its own."""
    if disabled():
        return
    import wandb

    if wandb.run is not None:
        wandb.finish()


def log_results(save_dir: Path, rows: list[dict]) -> None:
    """Put a trained model's final metrics and attention statistics into its wandb run.

    Parameters
    ----------
    save_dir : Path
        the run's checkpoint folder (its parent holds `wandb_run.json`).
    rows : list[dict]
        the scored result rows (`pipelines.jobs.score_model`), one per evaluation set.

    Notes
    -----
    A run trained before tracking existed has no `wandb_run.json`: nothing is logged.
    Offline, the summary is a second offline run with the same id, which `wandb sync`
    uploads into the same run.
    """
    record = Path(save_dir).parent / RUN_RECORD
    if disabled() or not record.is_file():
        return
    identity = json.loads(record.read_text())
    summary = {}
    for row in rows:
        evaluation = row["evaluation"]
        summary.update({f"{evaluation}/{k}": v for k, v in row["metrics"].items()})
        summary.update(
            {
                f"{evaluation}/attention/{k}": v
                for k, v in attention_stats(row).items()
                if isinstance(v, (int, float))
            }
        )
    offline_by_default()
    import wandb

    with files_under(Path(identity["dir"])):
        run = wandb.init(
            id=identity["id"],
            project=identity["project"],
            name=identity["name"],
            group=identity["group"],
            job_type="train",
            dir=identity["dir"],
            resume="allow",
        )
        run.summary.update(summary)
        run.finish()
