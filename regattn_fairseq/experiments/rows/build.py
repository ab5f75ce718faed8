"""Assembling a job's result rows, one per scored evaluation set.

`job_rows` is the one place a row is put together, for every kind of job: a fairseq model
(`model_train_record`), a fine-tuned pretrained encoder (`pipelines.pretrained`) and a trivial
baseline (`rows.baselines`). The scoring itself (decoding, the metric) is done before, by the
pipeline that runs the job (`pipelines.jobs`); here rows only take its results.
"""

from __future__ import annotations

from dataclasses import dataclass

from regattn_fairseq.experiments.core.result_row import (
    ROW_VERSION,
    AttentionStats,
    BaselineRecord,
    DataRecord,
    DecodeRecord,
    ResultRow,
    TrainRecord,
)
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import config_sha256
from regattn_fairseq.experiments.train.train import TrainedModel
from regattn_fairseq.pretrained_embeddings import row_fields as pretrained_embedding_fields


@dataclass(frozen=True)
class Scored:
    """What a row records of one scored evaluation set.

    Attributes
    ----------
    evaluation : str
        the evaluation set.
    metrics : dict
        metric -> value.
    signature : str or None
        the scorer's settings (sacrebleu's signature, ROUGE's).
    items : dict or None
        the per-item sidecar (`score.significance.write_items`).
    decode : dict
        how it was decoded: wall_s, and the decoder's settings.
    attention : dict or None
        the attention statistics of the evaluation set.
    baseline : dict or None
        a trivial baseline's name and its settings on this set (``baseline`` of its row).
    """

    evaluation: str
    metrics: dict
    signature: str | None
    items: dict | None
    decode: DecodeRecord
    attention: AttentionStats | None
    baseline: BaselineRecord | None = None


def data_record(prepared: PreparedData, fingerprint: str) -> DataRecord:
    """A row's ``data``: the manifest's variant, description and inputs, and the fingerprint
    of the files scored."""
    return {
        **{k: prepared.manifest[k] for k in ("variant", "description", "inputs")},
        "fingerprint": fingerprint,
    }


def job_rows(
    job: Job,
    table: str,
    run_id: str,
    train: TrainRecord,
    scored: list[Scored],
    fingerprint: str,
    context: dict,
) -> list[ResultRow]:
    """A job's rows: one provenance-complete row per scored evaluation set.

    Parameters
    ----------
    job : Job
        the job (experiment, scale, data, mapping, seed, γ's selection, swept values, dry run).
    table : str
        the result table.
    run_id : str
        the rows' run id.
    train : TrainRecord
        the rows' ``train`` record; its ``config`` is hashed into ``config_sha256``.
    scored : list of Scored
        each evaluation set's scores.
    fingerprint : str
        the data's fingerprint (`checksums.verify`).
    context : dict
        the provenance (`provenance.provenance`) recorded in each row.

    Returns
    -------
    list of ResultRow
        One row per scored evaluation set, in their order.
    """
    rows = []
    for score in scored:
        row = ResultRow(
            row_version=ROW_VERSION,
            run_id=run_id,
            config_sha256=config_sha256(train["config"]),
            items=score.items,
            gamma_selection=job.gamma_selection,
            dry_run=job.dry_run,
            table=table,
            experiment=job.experiment.name,
            evaluation=score.evaluation,
            scale=job.scale,
            mapping=job.mapping,
            sweep_params=job.sweep_params or {},
            seed=job.seed,
            metrics=score.metrics,
            signature=score.signature,
            data_source=job.data.manifest["source"],
            data=data_record(job.data, fingerprint),
            train=train,
            decode=score.decode,
            attention=score.attention,
            **context,
        )
        if score.baseline is not None:
            row["baseline"] = score.baseline
        rows.append(row)
    return rows


def model_train_record(model: TrainedModel, config: dict) -> TrainRecord:
    """A fairseq model's ``train`` record: its training's wall time, speed, epochs, learning
    curve, resumes, checkpoint, start, overrides and composed config."""
    return {
        "wall_s": model.wall_s,
        "tokens_per_s": model.tokens_per_s,
        "epochs": model.epochs,
        "learning_curve": model.curve,
        "resumes": model.resumes,
        "checkpoint": str(model.checkpoint),
        "started": model.started,
        "overrides": model.overrides,
        "config": config,
        # issue #24: pretrained word vectors' source, SHA-256 and coverage, from
        # <save_dir>/pretrained_embeddings.json; nothing for a run without them
        **pretrained_embedding_fields(model.checkpoint.parent),
    }
