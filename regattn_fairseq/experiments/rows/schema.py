"""The result row: one scored evaluation set of one trained model, with its provenance.

A row is a JSON object, one per line of ``results/raw/<table>.jsonl`` (append-only: a row is
never rewritten). `ResultRow` declares its fields; `rows.build.job_rows` is the one place
that makes rows, `rows.store` the one place that writes and reads them. Rows written before a
field existed lack it: readers use ``row.get`` for the optional fields below.

Versions (``row_version``; absent = 1):

1. A sweep row's ``mapping`` carries the swept value: ``"sparsemax attention_gamma=4.0"``.
2. ``mapping`` is the mapping's name alone; the swept values are in ``sweep_params`` (and, as
   every mapping parameter, in ``train.config.model``).

`upgrade` turns a row of any version into the current one as it is read; the raw files stay
as they were written.
"""

from __future__ import annotations

from typing import Any, TypedDict

ROW_VERSION = 2

# the sweep_params key of the swept mapping itself (Hydra's `attention=<mapping>` override)
SWEPT_MAPPING = "attention"


class ResultRow(TypedDict, total=False):
    """The fields of a result row (`rows.build.job_rows` assembles them).

    Required in every row: run_id, table, experiment, evaluation, scale, mapping, seed,
    metrics, data, train, decode, date, git_commit. The others are optional: older rows lack
    them.
    """

    row_version: int
    run_id: str
    table: str
    experiment: str
    evaluation: str
    scale: str
    data_source: str
    mapping: str  # the mapping's name (an `attention` config, or a `dp` regulariser for NER)
    # a sweep job's swept overrides, e.g. {"attention": "sparsemax", "model.attention_gamma": "4.0"}
    sweep_params: dict[str, str]
    seed: int
    config_sha256: str  # `keys.config_sha256` of train.config
    metrics: dict[str, float]
    signature: str | None  # the scorer's settings (sacrebleu's signature, ROUGE's)
    items: dict | None  # the per-item sidecar (`score.significance.write_items`)
    gamma_selection: dict | None  # GAMMA=auto's choice on validation
    dry_run: dict | None  # a dry run's caps (`core.dry_run.DryRun.record`)
    data: dict[str, Any]  # variant, description, inputs (file -> SHA-256), fingerprint
    # wall_s, tokens_per_s, epochs, learning_curve, checkpoint, started, overrides, config
    train: dict[str, Any]
    baseline: dict | None  # a trivial baseline's rows: its name and settings (`rows.baselines`)
    decode: dict[str, Any]  # wall_s, hypotheses, beam, batch_size
    attention: dict | None  # attention (or NER tag-marginal) statistics of the evaluation set
    # provenance (`core.provenance.provenance`)
    date: str
    git_commit: str
    git_dirty: bool
    git_diff_sha256: str | None
    packages: dict[str, str]
    hardware: dict[str, Any]


def swept_values(sweep_params: dict | None) -> dict[str, str]:
    """A sweep job's swept values other than the mapping, e.g. ``{"model.attention_gamma": "4.0"}``.

    Parameters
    ----------
    sweep_params : dict or None
        a row's ``sweep_params`` (empty or None for a table's rows).

    Returns
    -------
    dict
        The swept overrides, in the sweep's order, less the mapping's own.
    """
    return {k: v for k, v in (sweep_params or {}).items() if k != SWEPT_MAPPING}


# the fields every row must have, with their types: those a row is read and keyed by
# (`keys.row_key`, the tables' cells); a row without them cannot be placed in a table
REQUIRED = {
    "run_id": str,
    "table": str,
    "experiment": str,
    "evaluation": str,
    "scale": str,
    "mapping": str,
    "seed": int,
    "metrics": dict,
}


def row_problem(record: dict) -> str | None:
    """What makes a stored record not a row (`rows.store.read_rows`), or None.

    Parameters
    ----------
    record : dict
        a JSON object read from a raw results file.

    Returns
    -------
    str or None
        e.g. ``"not a result row: no 'seed'"``; None for a valid row.
    """
    missing = [field for field in REQUIRED if field not in record]
    if missing:
        return f"not a result row: no {', '.join(repr(field) for field in missing)}"
    wrong = [
        f"{field!r} is {type(record[field]).__name__}, not {kind.__name__}"
        for field, kind in REQUIRED.items()
        if not isinstance(record[field], kind) or isinstance(record[field], bool)
    ]
    return f"not a result row: {'; '.join(wrong)}" if wrong else None


def upgrade(record: dict) -> ResultRow:
    """A row of any version (see the module docstring) as a row of the current version.

    Parameters
    ----------
    record : dict
        a row as stored.

    Returns
    -------
    ResultRow
        The same row; a version-1 sweep row gets its mapping's name alone in ``mapping``
        (the swept value stays in ``sweep_params``). Nothing else changes: the row's key
        (`keys.cell_key`) and its CSV columns stay those of the stored row.
    """
    if record.get("row_version", 1) >= ROW_VERSION or not record.get("sweep_params"):
        return record
    return {**record, "mapping": record["sweep_params"][SWEPT_MAPPING]}
