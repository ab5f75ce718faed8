"""fairseq command lines for one experiment: train (fairseq-hydra-train), decode
(fairseq-generate) or evaluate a classifier (fairseq-validate), and turn their output into
scored metrics. Everything is anchored to absolute paths (fairseq-notes traps 5 and 8)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from regattn.mappings.learned_alpha import alpha_from_logit
from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_json
from regattn_fairseq.experiments.core import cli
from regattn_fairseq.experiments.core.paths import CONFIG_DIR, USER_DIR
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.tools import run_logged
from regattn_fairseq.experiments.data import checksums
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.train.fairseq_logs import (
    EarlyStopping,
    early_stopping_state,
    is_progress,
    json_records,
    last_record_with,
    replay_early_stopping,
    resumes,
)
from regattn_fairseq.experiments.train.launch import ONE_PROCESS, Launch
from regattn_fairseq.fairseq_adapter import EARLY_STOPPING_ENV


@dataclass
class TrainedModel:
    checkpoint: Path
    started: dict  # provenance of the code that started training (see train())
    wall_s: float | None  # fairseq's cumulative training wall time (survives resumes)
    tokens_per_s: float | None  # target tokens per second in the last epoch (fairseq `wps`)
    epochs: int | None
    config_file: Path  # the composed config fairseq-hydra-train ran with
    overrides: list[str] = field(default_factory=list)
    # the validation loss after each epoch (`learning_curve`): where training stopped and why
    curve: dict = field(default_factory=dict)
    # each resume from its checkpoint (`fairseq_logs.resumes`); none for a run trained at one go
    resumes: list[dict] = field(default_factory=list)


def learning_curve(
    log_text: str,
    patience: int | None = None,
    max_epoch: int | None = None,
    metric: str = "loss",
    maximize: bool = False,
) -> dict:
    """The per-epoch losses of a training log and where training stopped.

    fairseq validates after every epoch and keeps as checkpoint_best.pt the epoch of the best
    ``checkpoint.best_checkpoint_metric`` (the last of equal values: it saves on a tie); with
    ``checkpoint.patience`` N it stops once N validations in a row have not strictly improved on
    the best (`fairseq_logs.replay_early_stopping`). A resumed run appends to the same log;
    should an epoch appear twice, its last record counts.

    Parameters
    ----------
    log_text : str
        the fairseq training log (JSON records).
    patience : int, optional
        the run's ``checkpoint.patience`` (None or <= 0: no early stopping).
    max_epoch : int, optional
        the run's epoch cap.
    metric : str
        the run's ``checkpoint.best_checkpoint_metric`` (``valid_<metric>`` in the log).
    maximize : bool
        its ``checkpoint.maximize_best_checkpoint_metric``.

    Returns
    -------
    dict
        ``epochs`` (the epochs validated, in order), ``valid_loss`` and ``train_loss`` per epoch
        (None where not logged), and for another metric than the loss ``valid_<metric>``;
        ``metric``; ``best_epoch`` (the epoch checkpoint_best.pt holds), ``best_valid_loss``
        (and ``best_valid_<metric>``) at it; ``stopped_epoch`` (the last validated);
        ``rule_stop_epoch`` (where early stopping's rule ends the run, None if it does not: a
        later ``stopped_epoch`` means the run trained past it, as runs resumed before the
        count was kept across a resume did); and ``stop``: ``"patience"`` when early stopping
        ended training, ``"max_epoch"`` when the cap did (the model may not have converged),
        None when the log shows neither (an interrupted run); empty when no epoch was
        validated.
    """
    key = f"valid_{metric}"
    valid, train, scores = _per_epoch(log_text, ("valid_loss", "train_loss", key))
    if not scores:
        return {}
    epochs = sorted(scores)
    values = [scores[epoch] for epoch in epochs]
    best_value = max(values) if maximize else min(values)
    best_epoch = max(epoch for epoch in epochs if scores[epoch] == best_value)
    _, _, rule_stop = replay_early_stopping(values, patience, maximize, epochs)
    stop = None
    if rule_stop is not None:
        stop = "patience"
    elif max_epoch is not None and max_epoch > 0 and epochs[-1] >= max_epoch:
        stop = "max_epoch"
    curve = {
        "epochs": epochs,
        "valid_loss": [valid.get(epoch) for epoch in epochs],
        "train_loss": [train.get(epoch) for epoch in epochs],
        "metric": metric,
        "best_epoch": best_epoch,
        "best_valid_loss": valid.get(best_epoch),
        "stopped_epoch": epochs[-1],
        "rule_stop_epoch": None if rule_stop is None else epochs[rule_stop],
        "stop": stop,
        "patience": patience if patience is not None and patience > 0 else None,
        "max_epoch": max_epoch,
    }
    if metric != "loss":
        curve[key] = values
        curve[f"best_{key}"] = best_value
    return curve


def _per_epoch(log_text: str, fields: tuple[str, ...]) -> list[dict[int, float]]:
    """Each field's value per epoch in a training log's records (an epoch logged twice, by a
    resumed run: its last record's)."""
    values = [{} for _ in fields]
    for record in json_records(log_text):
        if "epoch" not in record:
            continue
        epoch = int(record["epoch"])
        for field_values, name in zip(values, fields, strict=True):
            if name in record:
                field_values[epoch] = float(record[name])
    return values


def hydra_overrides(experiment: DictConfig, scale: str, prepared: PreparedData) -> list[str]:
    """The overrides every run of an experiment needs: scale, absolute data and plugin paths."""
    return [
        f"scale/{experiment.scale_group}={scale}",
        f"task.data={prepared.bin_dir}",
        f"common.user_dir={USER_DIR}",
    ]


def mapping_override(experiment: DictConfig, mapping: str) -> str:
    """`attention=<mapping>`, or `<group>=<mapping>` for an experiment with a `mapping_group`
    (the NER table trains one model per `dp` regulariser)."""
    return f"{experiment.get('mapping_group', 'attention')}={mapping}"


# fairseq-hydra-train without Hydra's deprecation warnings (`regattn_fairseq.hydra_train`), run
# by this environment's Python (as `tools.tool_path` finds fairseq's commands in it)
HYDRA_TRAIN = (sys.executable, "-m", "regattn_fairseq.hydra_train")


def train_command(
    experiment: DictConfig, overrides: list[str], multirun: bool = False
) -> list[str]:
    """The fairseq-hydra-train command line of an experiment.

    Parameters
    ----------
    experiment : DictConfig
        the experiment (its ``train_config`` names the config in configs/).
    overrides : list[str]
        Hydra overrides.
    multirun : bool
        add ``--multirun`` (a sweep).

    Returns
    -------
    list[str]
        The command as a list.
    """
    return [
        *HYDRA_TRAIN,
        *(["--multirun"] if multirun else []),
        "--config-dir",
        str(CONFIG_DIR),
        "--config-name",
        experiment.train_config,
        *overrides,
    ]


def train(
    experiment: DictConfig,
    scale: str,
    mapping: str,
    seed: int,
    prepared: PreparedData,
    run_dir: Path,
    extra_overrides: list[str],
    launch: Launch = ONE_PROCESS,
) -> TrainedModel | None:
    """Train one model in run_dir (resuming from run_dir/checkpoints if a run was interrupted).

    `launch` says on how many processes and machines (`launch.Launch.command`); its
    `overrides()` must be among `extra_overrides`, which the caller also uses for the job's
    key. Returns None on a machine other than the first of several: it trains its share, the
    first one holds the checkpoint and scores.
    """
    overrides = [
        *hydra_overrides(experiment, scale, prepared),
        mapping_override(experiment, mapping),
        f"common.seed={seed}",
        f"checkpoint.save_dir={run_dir / 'checkpoints'}",
        f"hydra.run.dir={run_dir / 'hydra'}",
        *extra_overrides,
    ]
    print(f"[train] {experiment.name} {scale} {mapping} seed {seed} -> {run_dir}", flush=True)
    checksums.verify(prepared)  # never train on damaged data (issue #26)
    stopping = resumed_early_stopping(experiment, overrides, run_dir / "train.log")
    if stopping is not None and stopping.stopped:
        # fairseq would train it again (its early-stopping count restarts at a resume)
        print(
            f"[train] stopped early at {stopping.updates} updates (best {stopping.best}, "
            f"{stopping.num_runs} validations without improvement): not trained again",
            flush=True,
        )
    else:
        cli.at(f"training {experiment.name} {mapping} seed {seed} in {run_dir}")
        record_training_start(run_dir)
        launch.check_visible_gpus()
        run_logged(
            launch.command(train_command(experiment, overrides)),
            run_dir / "train.log",
            env=early_stopping_environment(stopping, run_dir / "checkpoints"),
            show=is_progress,
        )
    if not launch.scores:
        return None
    return collect_trained(
        run_dir, run_dir / "hydra", run_dir / "checkpoints", run_dir / "train.log", overrides
    )


def resumed_early_stopping(
    experiment: DictConfig, overrides: list[str], log_file: Path
) -> EarlyStopping | None:
    """The early-stopping state of a run to resume, replayed from its log with the patience and
    metric of the config it is resumed with (`fairseq_logs.early_stopping_state`); None for a
    run never started or that saved no checkpoint."""
    if not log_file.is_file():
        return None
    checkpoint = compose_config(experiment.train_config, overrides).checkpoint
    return early_stopping_state(
        log_file.read_text(),
        checkpoint.patience,
        checkpoint.best_checkpoint_metric,
        checkpoint.maximize_best_checkpoint_metric,
        last_checkpoint_validation(Path(checkpoint.save_dir) / "checkpoint_last.pt"),
    )


def last_checkpoint_validation(path: Path) -> tuple[int, float | None] | None:
    """(updates, validation value) that a fairseq checkpoint records of itself (its
    optimizer history's ``num_updates``, its ``extra_state["val_loss"]``: the
    best_checkpoint_metric value it was saved with); None when there is no such file."""
    if not path.is_file():
        return None
    # our own checkpoint: it holds an argparse.Namespace, which weights_only refuses
    state = torch.load(path, map_location="cpu", weights_only=False)
    updates = int(state["optimizer_history"][-1]["num_updates"])
    return updates, (state.get("extra_state") or {}).get("val_loss")


def learned_alphas(checkpoint: Path) -> dict | None:
    """The α each attention head learned (α-entmax with a learned α per head, Correia et al.
    2019), read from a fairseq checkpoint's parameters: ``{"alpha": [[α per head] per attention
    module], "alpha_layers": [the module's name]}``, the modules in the model's order (the
    encoder's self-attention, then each decoder layer's self- and cross-attention, as
    "encoder 0 self_attn"); None for a model with no learned α.

    The rows' ``attention.alpha`` (`report.alpha_plots`), as the Hugging Face backend records
    it (`score.hf_classify`).
    """
    # our own checkpoint: it holds an argparse.Namespace, which weights_only refuses
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    keys = [key for key in state if key.endswith(".alpha_logit")]
    if not keys:
        return None
    names = []
    for key in keys:  # e.g. decoder.layers.0.encoder_attn.normalizer.alpha_logit
        parts = key.split(".")
        layered = len(parts) > 3 and parts[1] == "layers"
        names.append(f"{parts[0]} {parts[2]} {parts[3]}" if layered else ".".join(parts[:-2]))
    alphas = [[round(float(a), 4) for a in alpha_from_logit(state[key].float())] for key in keys]
    return {"alpha": alphas, "alpha_layers": names}


def early_stopping_environment(stopping: EarlyStopping | None, save_dir: Path) -> dict:
    """The environment that gives a resumed training its early-stopping state
    (fairseq_adapter.resume_early_stopping); empty for a fresh run."""
    if stopping is None:
        return {}
    state = {
        "save_dir": str(save_dir),
        "best": stopping.best,
        "num_runs": stopping.num_runs,
        "updates": stopping.updates,
    }
    return {EARLY_STOPPING_ENV: json.dumps(state)}


def record_training_start(run_dir: Path) -> None:
    """Write run_dir/started.json (commit, packages, hardware, date) the first time a run
    starts. A resumed or re-scored run keeps it, so result rows scored by later code still
    name the code that trained the model."""
    started = run_dir / "started.json"
    # a run directory with content but no record was started by code older than the record:
    # the training code is then unknown (rows show none), never mistaken for the current one
    if not started.is_file() and not (run_dir.is_dir() and any(run_dir.iterdir())):
        write_json(started, provenance())


def collect_trained(
    run_dir: Path, hydra_dir: Path, save_dir: Path, log_file: Path, overrides: list[str]
) -> TrainedModel:
    """A finished training run: its best checkpoint and the last epoch's statistics.

    Parameters
    ----------
    run_dir : Path
        the run's folder (its started.json records the training code).
    hydra_dir : Path
        Hydra's output folder (holds .hydra/config.yaml).
    save_dir : Path
        the checkpoint folder.
    log_file : Path
        the training log (fairseq JSON log lines).
    overrides : list[str]
        the Hydra overrides the run was started with.

    Returns
    -------
    TrainedModel
        The trained model's record.

    Raises
    ------
    ReproError
        the run wrote no checkpoint_best.pt.
    """
    checkpoint = save_dir / "checkpoint_best.pt"
    if not checkpoint.is_file():
        raise ReproError(f"training produced no checkpoint {checkpoint} (log: {log_file})")
    log_text = log_file.read_text()
    stats = last_record_with(log_text, "train_wps") or {}
    config_file = hydra_dir / ".hydra" / "config.yaml"
    limits = OmegaConf.load(config_file) if config_file.is_file() else None
    checkpointing = limits.checkpoint if limits is not None else {}
    curve = learning_curve(
        log_text,
        patience=checkpointing.get("patience"),
        max_epoch=limits.optimization.get("max_epoch") if limits is not None else None,
        metric=checkpointing.get("best_checkpoint_metric") or "loss",
        maximize=bool(checkpointing.get("maximize_best_checkpoint_metric")),
    )
    as_float = lambda key: float(stats[key]) if key in stats else None  # noqa: E731
    started = run_dir / "started.json"
    return TrainedModel(
        checkpoint=checkpoint,
        # runs trained before started.json existed have none
        started=json.loads(started.read_text()) if started.is_file() else {},
        wall_s=as_float("train_wall"),
        tokens_per_s=as_float("train_wps"),
        epochs=int(stats["epoch"]) if "epoch" in stats else None,
        config_file=config_file,
        overrides=overrides,
        curve=curve,
        resumes=resumes(log_text),
    )


def composed_config(model: TrainedModel) -> dict:
    """The key settings of the composed training config, for the result rows."""
    if not model.config_file.is_file():
        return {}
    return {**config_settings(OmegaConf.load(model.config_file)), "file": str(model.config_file)}


def compose_settings(train_config: str, overrides: list[str]) -> dict:
    """The settings (`config_settings`) a training run would have, composed in-process.

    Composition is Hydra's compose API against fairseq's schema, as fairseq-hydra-train
    does, so that the result equals the run's .hydra/config.yaml settings: a job's key is
    known before it trains.

    Parameters
    ----------
    train_config : str
        the config name in configs/.
    overrides : list[str]
        the run's Hydra overrides (``hydra.*`` ones are ignored).

    Returns
    -------
    dict
        The settings.
    """
    return config_settings(compose_config(train_config, overrides))


def compose_config(train_config: str, overrides: list[str]) -> DictConfig:
    """A training config composed in-process, as fairseq-hydra-train composes it.

    Parameters
    ----------
    train_config : str
        the config name in configs/.
    overrides : list[str]
        Hydra overrides (``hydra.*`` ones are ignored).

    Returns
    -------
    DictConfig
        The composed config.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from regattn_fairseq.fairseq_adapter import register_fairseq_schema

    GlobalHydra.instance().clear()
    register_fairseq_schema()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
            cfg = compose(
                config_name=train_config,
                overrides=[o for o in overrides if not o.startswith("hydra.")],
            )
    finally:
        GlobalHydra.instance().clear()
    return cfg


# the criteria of a sparse output layer (regattn_fairseq/criterions/regattn_fenchel_young.py)
FENCHEL_YOUNG_CRITERIA = ("regattn_fy",)


def config_settings(cfg: DictConfig) -> dict:
    """The settings of a composed training config that a row records and its key hashes.

    Parameters
    ----------
    cfg : DictConfig
        the composed config.

    Returns
    -------
    dict
        model, optimizer, lr, max_epoch, batch_size, max_tokens (no paths), the
        data-parallel world size when it is above 1 (each process takes a batch of the
        configured size: the effective batch is that many times larger), the early-stopping
        patience when it is set, and the criterion when it is the Fenchel-Young loss of a
        sparse output layer (configs without either keep the hashes they had).
    """
    world_size = cfg.distributed_training.distributed_world_size
    patience = cfg.checkpoint.get("patience", -1)
    # the other configs' criteria follow from their task and model, and predate the record
    criterion = cfg.get("criterion") or {}
    fenchel_young = criterion.get("_name") in FENCHEL_YOUNG_CRITERIA
    return {
        **({"distributed_world_size": world_size} if world_size > 1 else {}),
        **({"patience": patience} if patience is not None and patience > 0 else {}),
        **({"criterion": OmegaConf.to_container(criterion)} if fenchel_young else {}),
        "model": OmegaConf.to_container(cfg.model, resolve=False),
        "optimizer": OmegaConf.to_container(cfg.optimizer, resolve=False),
        "lr": OmegaConf.to_container(cfg.optimization.lr, resolve=False),
        "max_epoch": cfg.optimization.max_epoch,
        "batch_size": cfg.dataset.batch_size,
        "max_tokens": cfg.dataset.max_tokens,
    }
