"""fairseq command lines for one experiment: train (fairseq-hydra-train), decode
(fairseq-generate) or evaluate a classifier (fairseq-validate), and turn their output into
scored metrics. Everything is anchored to absolute paths (fairseq-notes traps 5 and 8)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from regattn_fairseq.pretrained_embeddings import row_fields as pretrained_embedding_fields

from . import cli, data_checksums, scoring, tagging, tracking
from .builders.inflection import decode_target
from .common import ReproError, run_logged, tool_path, write_json
from .fairseq_logs import json_records, last_record_with
from .launch import ONE_PROCESS, Launch
from .paths import CONFIG_DIR, USER_DIR
from .prepare import PreparedData
from .provenance import provenance
from .rouge import MEASURES, ROUGE_TYPES
from .rouge import item_scores as rouge_item_scores
from .text_processing import moses_detokenize

# fairseq-fixed 0.12.3.1 silently drops a final batch whose size is not a multiple of
# --required-batch-size-multiple (default 8): 30 test items decode as 24. Evaluation must see
# every example.
_EVERY_EXAMPLE = ("--required-batch-size-multiple", "1")


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


def learning_curve(
    log_text: str, patience: int | None = None, max_epoch: int | None = None
) -> dict:
    """The per-epoch losses of a training log and where training stopped.

    fairseq validates after every epoch, keeps the checkpoint of the lowest validation loss as
    checkpoint_best.pt, and with ``checkpoint.patience`` N stops once N validations in a row
    have not improved on it. A resumed run appends to the same log and repeats no epoch it
    finished; should one appear twice, its last record counts.

    Parameters
    ----------
    log_text : str
        the fairseq training log (JSON records).
    patience : int, optional
        the run's ``checkpoint.patience`` (None or <= 0: no early stopping).
    max_epoch : int, optional
        the run's epoch cap.

    Returns
    -------
    dict
        ``epochs`` (the epochs validated, in order), ``valid_loss`` and ``train_loss`` per epoch
        (None where not logged), ``best_epoch`` (lowest validation loss, the first of ties, as
        fairseq keeps it), ``best_valid_loss``, ``stopped_epoch``, and ``stop``: ``"patience"``
        when early stopping ended training (the validation loss had stopped improving),
        ``"max_epoch"`` when the cap did (the model may not have converged), None when the
        log shows neither (an interrupted run); empty when no epoch was validated.
    """
    valid, train = {}, {}
    for record in json_records(log_text):
        if "valid_loss" in record and "epoch" in record:
            valid[int(record["epoch"])] = float(record["valid_loss"])
        if "train_loss" in record and "epoch" in record:
            train[int(record["epoch"])] = float(record["train_loss"])
    if not valid:
        return {}
    epochs = sorted(valid)
    best_epoch = min(epochs, key=lambda epoch: (valid[epoch], epoch))
    stopped = epochs[-1]
    stop = None
    if patience is not None and patience > 0 and stopped - best_epoch >= patience:
        stop = "patience"
    elif max_epoch is not None and max_epoch > 0 and stopped >= max_epoch:
        stop = "max_epoch"
    return {
        "epochs": epochs,
        "valid_loss": [valid[epoch] for epoch in epochs],
        "train_loss": [train.get(epoch) for epoch in epochs],
        "best_epoch": best_epoch,
        "best_valid_loss": valid[best_epoch],
        "stopped_epoch": stopped,
        "stop": stop,
        "patience": patience if patience is not None and patience > 0 else None,
        "max_epoch": max_epoch,
    }


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

    Raises
    ------
    ReproError
        fairseq-hydra-train is not installed in this environment.
    """
    return [
        tool_path("fairseq-hydra-train"),
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
    data_checksums.verify(prepared)  # never train on damaged data (issue #26)
    cli.at(f"training {experiment.name} {mapping} seed {seed} in {run_dir}")
    record_training_start(run_dir)
    launch.check_visible_gpus()
    run_logged(launch.command(train_command(experiment, overrides)), run_dir / "train.log")
    if not launch.scores:
        return None
    return collect_trained(
        run_dir, run_dir / "hydra", run_dir / "checkpoints", run_dir / "train.log", overrides
    )


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
    curve = learning_curve(
        log_text,
        patience=limits.checkpoint.get("patience") if limits is not None else None,
        max_epoch=limits.optimization.get("max_epoch") if limits is not None else None,
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
    )


def decode(
    model: TrainedModel,
    prepared: PreparedData,
    subset: str,
    out_dir: Path,
    decode_cfg: DictConfig,
    remove_bpe: bool,
) -> tuple[list[str], float]:
    """Beam-search the `subset` with fairseq-generate.

    Parameters
    ----------
    model : TrainedModel
        the trained model.
    prepared : PreparedData
        its data.
    subset : str
        the fairseq subset (test, test1, ...).
    out_dir : Path
        where the generate output and log go.
    decode_cfg : DictConfig
        beam and batch_size.
    remove_bpe : bool
        undo subword-nmt's segmentation in the output.

    Returns
    -------
    tuple[list[str], float]
        The hypotheses in corpus order, and the decoding wall time in seconds.

    Raises
    ------
    ReproError
        fairseq-generate is missing or failed.
    """
    cmd = [
        tool_path("fairseq-generate"),
        str(prepared.bin_dir),
        "--path",
        str(model.checkpoint),
        "--user-dir",
        str(USER_DIR),
        "--gen-subset",
        subset,
        "--cpu",
        "--beam",
        str(decode_cfg.beam),
        "--batch-size",
        str(decode_cfg.batch_size),
        "--results-path",
        str(out_dir),
        *_EVERY_EXAMPLE,
        *(["--remove-bpe"] if remove_bpe else []),
    ]
    start = time.time()
    run_logged(cmd, out_dir / f"generate-{subset}.log", echo=False)
    elapsed = time.time() - start
    hypotheses = {}
    for line in (out_dir / f"generate-{subset}.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("H-"):
            key, _score, *text = line.split("\t")
            hypotheses[int(key[2:])] = text[0] if text else ""
    return [hypotheses[i] for i in sorted(hypotheses)], elapsed


def validate_accuracy(
    model: TrainedModel, prepared: PreparedData, subset: str, out_dir: Path
) -> tuple[float, float]:
    """Classification accuracy of the checkpoint on `subset` (the task's criterion reports it).

    Parameters
    ----------
    model : TrainedModel
        the trained classifier.
    prepared : PreparedData
        its data.
    subset : str
        the fairseq subset.
    out_dir : Path
        where the log goes.

    Returns
    -------
    tuple[float, float]
        The accuracy (percent) and the wall time in seconds.

    Raises
    ------
    ReproError
        fairseq-validate is missing, failed, or logged no accuracy.
    """
    cmd = [
        tool_path("fairseq-validate"),
        str(prepared.bin_dir),
        "--path",
        str(model.checkpoint),
        "--user-dir",
        str(USER_DIR),
        "--task",
        "regattn_snli",
        "--valid-subset",
        subset,
        "--cpu",
        "--log-format",
        "json",
        "--batch-size",
        "64",
        *_EVERY_EXAMPLE,
    ]
    start = time.time()
    output = run_logged(cmd, out_dir / f"validate-{subset}.log", echo=False)
    elapsed = time.time() - start
    record = last_record_with(output, f"{subset}_accuracy")  # JSON logs prefix the subset
    if record is not None:
        return float(record[f"{subset}_accuracy"]), elapsed
    raise ReproError(
        f"fairseq-validate reported no accuracy (log {out_dir / f'validate-{subset}.log'})"
    )


def export_and_measure_attention(
    model: TrainedModel,
    prepared: PreparedData,
    subset: str,
    out_dir: Path,
    decode_cfg: DictConfig,
    classifier: bool,
) -> dict:
    """Export the model's attention on every example of `subset` and measure it.

    The export is regattn_fairseq.experiments.export_attention (the beam-search output's
    attention, or the SNLI hypothesis' attention over the premise); the measures are
    `regattn.analysis.attention_statistics` (sparsity and structure, exact zeros).

    Parameters
    ----------
    model : TrainedModel
        the trained model.
    prepared : PreparedData
        its data.
    subset : str
        the fairseq subset.
    out_dir : Path
        the export goes to out_dir/attention-<subset>.jsonl.
    decode_cfg : DictConfig
        beam and batch_size.
    classifier : bool
        the model is the SNLI classifier (no beam search).

    Returns
    -------
    dict
        The statistics, with ``"export"`` (the file) and ``"sentences"`` added.

    Raises
    ------
    ReproError
        the export failed (the message names its log).
    """
    from regattn.analysis import attention_statistics as statistics_of
    from regattn.analysis import read_export, rows_of_export

    export = out_dir / f"attention-{subset}.jsonl"
    task = ["--task", "regattn_snli"] if classifier else ["--beam", str(decode_cfg.beam)]
    cmd = [
        sys.executable,
        "-m",
        "regattn_fairseq.experiments.export_attention",
        str(prepared.bin_dir),
        "--path",
        str(model.checkpoint),
        "--user-dir",
        str(USER_DIR),
        "--gen-subset",
        subset,
        "--cpu",
        "--batch-size",
        str(decode_cfg.batch_size),
        *task,
        "--attention-output",
        str(export),
    ]
    run_logged(cmd, out_dir / f"export-attention-{subset}.log", echo=False)
    records = read_export(export)
    stats = {
        "export": str(export),
        "sentences": len(records),
        **statistics_of(rows_of_export(records)),
    }
    print(
        f"[attention] {subset}: {100 * stats['mean_zero_fraction']:.1f}% zeros, support "
        f"{stats['mean_support_size']:.2f}, {stats['mean_runs_per_row']:.2f} runs/row",
        flush=True,
    )
    return stats


def _read(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def evaluate(
    model: TrainedModel,
    prepared: PreparedData,
    name: str,
    scorer: str,
    decode_cfg: DictConfig,
    out_dir: Path,
) -> dict:
    """Decode (or classify) one evaluation set and score it.

    Parameters
    ----------
    model : TrainedModel
        the trained model.
    prepared : PreparedData
        its data.
    name : str
        the evaluation set (a key of the manifest's evaluations).
    scorer : str
        bleu, rouge_f1, rouge_recall, exact_match, accuracy or entity_f1 (tagging.py).
    decode_cfg : DictConfig
        beam and batch_size.
    out_dir : Path
        where hypotheses, logs and the attention export go.

    Returns
    -------
    dict
        ``{"metrics", "decode_wall_s", "attention", ...}`` (plus "hypotheses" and
        "signature" for the generation scorers).

    Raises
    ------
    ReproError
        unknown evaluation set or scorer, or a failed tool.
    """
    if scorer == "entity_f1":  # the NER tagger: Viterbi decoding, seqeval (tagging.py)
        return tagging.evaluate(model, prepared, name, out_dir)
    evaluation = prepared.evaluation(name)
    subset = evaluation["subset"]
    attention = export_and_measure_attention(
        model, prepared, subset, out_dir, decode_cfg, classifier=scorer == "accuracy"
    )
    if scorer == "accuracy":
        accuracy, elapsed = validate_accuracy(model, prepared, subset, out_dir)
        return {
            "metrics": {"accuracy": round(accuracy, 2)},
            "decode_wall_s": round(elapsed, 1),
            "attention": attention,
            "items": _classifier_items(Path(attention["export"])),
        }

    hypotheses, elapsed = decode(
        model, prepared, subset, out_dir, decode_cfg, remove_bpe=scorer == "bleu"
    )
    if scorer == "bleu":
        hypotheses = [moses_detokenize(h, evaluation["detokenize"]) for h in hypotheses]
    elif scorer == "exact_match":
        hypotheses = [decode_target(h) for h in hypotheses]
    result = {
        "decode_wall_s": round(elapsed, 1),
        "hypotheses": str(out_dir / f"{name}.hyp"),
        "attention": attention,
        **score_hypotheses(evaluation, name, scorer, hypotheses),
    }
    Path(result["hypotheses"]).write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    return result


def score_hypotheses(evaluation: dict, name: str, scorer: str, hypotheses: list[str]) -> dict:
    """Score plain-text outputs of one evaluation set: a model's decoded hypotheses or a
    baseline's (`baselines`), the same way.

    Parameters
    ----------
    evaluation : dict
        the evaluation set's manifest entry (`PreparedData.evaluation`).
    name : str
        its name.
    scorer : str
        bleu (detokenized hypotheses), rouge_f1, rouge_recall, exact_match (inflected forms),
        accuracy (predicted labels) or entity_f1 (IOB2 tags, space-separated).
    hypotheses : list of str
        one output per item, in order.

    Returns
    -------
    dict
        ``{"metrics", "items"}`` and, for BLEU and ROUGE, ``"signature"``.

    Raises
    ------
    ReproError
        an unknown scorer.
    """
    result = {}
    if scorer == "bleu":
        references = _read(evaluation["refs"][0])
        result["metrics"], result["signature"] = scoring.bleu(hypotheses, references)
        result["items"] = {
            "kind": "bleu",
            "n": len(hypotheses),
            "hypotheses": hypotheses,
            "references": references,
        }
        print(
            f"[score] {name}: BLEU {result['metrics']['bleu']}  ({result['signature']})", flush=True
        )
    elif scorer in ("rouge_f1", "rouge_recall"):
        references = list(zip(*(_read(path) for path in evaluation["refs"]), strict=True))
        measure = "fmeasure" if scorer == "rouge_f1" else "recall"
        truncate = evaluation.get("truncate_bytes")
        result["metrics"] = scoring.rouge(
            hypotheses, [list(refs) for refs in references], measure=measure, truncate=truncate
        )
        result["signature"] = scoring.rouge_signature(measure, truncate, len(evaluation["refs"]))
        per_item = [
            rouge_item_scores(h, list(refs), truncate)
            for h, refs in zip(hypotheses, references, strict=True)
        ]
        column = MEASURES.index(measure)
        result["items"] = {
            "kind": "mean",
            "n": len(per_item),
            "scores": {
                t: [round(100 * item[t][column], 4) for item in per_item] for t in ROUGE_TYPES
            },
        }
    elif scorer == "entity_f1":  # IOB2 tag sequences, one sentence per line (NER)
        gold = [line.split() for line in _read(evaluation["refs"][0])]
        predicted = [line.split() for line in hypotheses]
        result["metrics"] = tagging.entity_scores(gold, predicted)
        result["items"] = tagging.entity_counts(gold, predicted)
        result["signature"] = "seqeval default mode (conlleval)"
    elif scorer == "accuracy":  # a classifier's predicted labels (SNLI)
        gold = _read(evaluation["refs"][0])
        result["metrics"] = scoring.accuracy(hypotheses, gold)
        result["items"] = {
            "kind": "mean",
            "n": len(gold),
            "scores": {
                "accuracy": [100 * int(h == g) for h, g in zip(hypotheses, gold, strict=True)]
            },
        }
    elif scorer == "exact_match":
        gold, languages = _read(evaluation["refs"][0]), _read(evaluation["languages"])
        result["metrics"] = scoring.exact_match(hypotheses, gold, languages)
        result["items"] = {
            "kind": "macro",
            "n": len(gold),
            "correct": [int(h == g) for h, g in zip(hypotheses, gold, strict=True)],
            "groups": languages,
        }
    else:
        raise ReproError(f"unknown scorer {scorer!r}")
    return result


def _classifier_items(export: Path) -> dict:
    """Per-item correctness of the SNLI classifier, from its attention export (in id order)."""
    from regattn.analysis import read_export

    records = sorted(read_export(export), key=lambda r: int(r["id"]))
    return {
        "kind": "mean",
        "n": len(records),
        "scores": {"accuracy": [100 * int(r["prediction"] == r["label"]) for r in records]},
    }


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
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    hydra_init(train_config)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.1"):
            cfg = compose(
                config_name=train_config,
                overrides=[o for o in overrides if not o.startswith("hydra.")],
            )
    finally:
        GlobalHydra.instance().clear()
    return cfg


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
        configured size: the effective batch is that many times larger), and the early-stopping
        patience when it is set (configs without it keep the hashes they had).
    """
    world_size = cfg.distributed_training.distributed_world_size
    patience = cfg.checkpoint.get("patience", -1)
    return {
        **({"distributed_world_size": world_size} if world_size > 1 else {}),
        **({"patience": patience} if patience is not None and patience > 0 else {}),
        "model": OmegaConf.to_container(cfg.model, resolve=False),
        "optimizer": OmegaConf.to_container(cfg.optimizer, resolve=False),
        "lr": OmegaConf.to_container(cfg.optimization.lr, resolve=False),
        "max_epoch": cfg.optimization.max_epoch,
        "batch_size": cfg.dataset.batch_size,
        "max_tokens": cfg.dataset.max_tokens,
    }


def result_rows(
    table: str,
    experiment: DictConfig,
    scale: str,
    mapping: str,
    seed: int,
    prepared: PreparedData,
    model: TrainedModel,
    decode_cfg: DictConfig,
    out_dir: Path,
    run_id: str,
    sweep_params: dict | None = None,
    results_dir: Path | None = None,
    gamma_selection: dict | None = None,
    dry_run: dict | None = None,
) -> list[dict]:
    """Score every evaluation set of a trained model: one provenance-complete row each.

    Parameters
    ----------
    table : str
        the result table.
    experiment : DictConfig
        the experiment (name, evaluations).
    scale : str
        the scale.
    mapping : str
        the mapping's name in the table.
    seed : int
        the training seed.
    prepared : PreparedData
        the data.
    model : TrainedModel
        the trained model.
    decode_cfg : DictConfig
        beam and batch size.
    out_dir : Path
        where the outputs go.
    run_id : str
        the rows' run id.
    sweep_params : dict, optional
        the swept values of a sweep job.
    results_dir : Path, optional
        where the per-item sidecars go (``raw/items/``); none are written without it.
    gamma_selection : dict, optional
        GAMMA=auto's record of the γ choice on validation.
    dry_run : dict, optional
        a dry run's caps (`dry_run.DryRun.record`), recorded in the rows and their key.

    Returns
    -------
    list[dict]
        One row per evaluation set.

    Raises
    ------
    ReproError
        a tool failed.
    """
    from .rowkeys import config_sha256
    from .significance import write_items

    rows = []
    config = composed_config(model)
    context = provenance()
    # checked before decoding and again before the rows leave (issue #26): the fingerprint is
    # that of the recorded checksums, which the files were just found to match
    fingerprint = data_checksums.verify(prepared)
    cli.at(f"scoring {experiment.name} {mapping} seed {seed} ({out_dir})")
    for name, scorer in experiment.evaluations.items():
        result = evaluate(model, prepared, name, scorer, decode_cfg, out_dir)
        items = None
        if results_dir is not None and result.get("items"):
            items = write_items(results_dir, run_id, name, result["items"])
        rows.append(
            {
                "run_id": run_id,
                "config_sha256": config_sha256(config),
                "items": items,
                "gamma_selection": gamma_selection,
                "dry_run": dry_run,
                "table": table,
                "experiment": experiment.name,
                "evaluation": name,
                "scale": scale,
                "mapping": mapping,
                "sweep_params": sweep_params or {},
                "seed": seed,
                "metrics": result["metrics"],
                "signature": result.get("signature"),
                "data_source": prepared.manifest["source"],
                "data": {
                    **{k: prepared.manifest[k] for k in ("variant", "description", "inputs")},
                    "fingerprint": fingerprint,
                },
                "train": {
                    "wall_s": model.wall_s,
                    "tokens_per_s": model.tokens_per_s,
                    "epochs": model.epochs,
                    "learning_curve": model.curve,
                    "checkpoint": str(model.checkpoint),
                    "started": model.started,
                    "overrides": model.overrides,
                    "config": config,
                    # issue #24: pretrained word vectors' source, SHA-256 and coverage, from
                    # <save_dir>/pretrained_embeddings.json; nothing for a run without them
                    **pretrained_embedding_fields(model.checkpoint.parent),
                },
                "decode": {
                    "wall_s": result["decode_wall_s"],
                    "hypotheses": result.get("hypotheses"),
                    **OmegaConf.to_container(decode_cfg),
                },
                "attention": result["attention"],
                **context,
            }
        )
    data_checksums.verify(prepared)
    # the final metrics and attention statistics into the training run's wandb run
    tracking.log_results(model.checkpoint.parent, rows)
    return rows
