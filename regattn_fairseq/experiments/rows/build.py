"""Building the result rows of a trained model: one row per evaluation set."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from regattn_fairseq.experiments.core import cli
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.data import checksums
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.rows.keys import config_sha256
from regattn_fairseq.experiments.rows.schema import ROW_VERSION, ResultRow
from regattn_fairseq.experiments.score.evaluate import evaluate
from regattn_fairseq.experiments.score.significance import write_items
from regattn_fairseq.experiments.train import tracking
from regattn_fairseq.experiments.train.train import TrainedModel, composed_config
from regattn_fairseq.pretrained_embeddings import row_fields as pretrained_embedding_fields


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
) -> list[ResultRow]:
    """Score every evaluation set of a trained model: one provenance-complete row each.

    Parameters
    ----------
    table : str
        the result table.
    experiment : DictConfig
        the experiment (name, test sets: `data.test_sets.experiment_test_sets`).
    scale : str
        the scale.
    mapping : str
        the mapping's name (a sweep job's swept values go in `sweep_params`).
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
    list of ResultRow
        One row per evaluation set.

    Raises
    ------
    ReproError
        a tool failed.
    """

    rows = []
    config = composed_config(model)
    context = provenance()
    # checked before decoding and again before the rows leave (issue #26): the fingerprint is
    # that of the recorded checksums, which the files were just found to match
    fingerprint = checksums.verify(prepared)
    cli.at(f"scoring {experiment.name} {mapping} seed {seed} ({out_dir})")
    for name, test_set in experiment_test_sets(experiment).items():
        result = evaluate(model, prepared, name, test_set.metric, decode_cfg, out_dir)
        items = None
        if results_dir is not None and result.get("items"):
            items = write_items(results_dir, run_id, name, result["items"])
        rows.append(
            ResultRow(
                row_version=ROW_VERSION,
                run_id=run_id,
                config_sha256=config_sha256(config),
                items=items,
                gamma_selection=gamma_selection,
                dry_run=dry_run,
                table=table,
                experiment=experiment.name,
                evaluation=name,
                scale=scale,
                mapping=mapping,
                sweep_params=sweep_params or {},
                seed=seed,
                metrics=result["metrics"],
                signature=result.get("signature"),
                data_source=prepared.manifest["source"],
                data={
                    **{k: prepared.manifest[k] for k in ("variant", "description", "inputs")},
                    "fingerprint": fingerprint,
                },
                train={
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
                decode={
                    "wall_s": result["decode_wall_s"],
                    "hypotheses": result.get("hypotheses"),
                    **OmegaConf.to_container(decode_cfg),
                },
                attention=result["attention"],
                **context,
            )
        )
    checksums.verify(prepared)
    # the final metrics and attention statistics into the training run's wandb run
    tracking.log_results(model.checkpoint.parent, rows)
    return rows
