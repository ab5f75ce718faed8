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

# no `from __future__ import annotations`: under it Python 3.11's TypedDict cannot see
# `Required` in the (then string) annotations, and every field would count as optional
from typing import Any, Required, TypedDict

ROW_VERSION = 2

# the sweep_params key of the swept mapping itself (Hydra's `attention=<mapping>` override)
SWEPT_MAPPING = "attention"

# A row and its parts are TypedDicts, not dataclasses: a row *is* the JSON object on its line,
# read by `json.loads` and written by `json.dumps` as it is, so the types describe the stored
# JSON and can never change it (no conversion to round-trip, key order kept, an older row's
# missing field stays missing rather than becoming a default that a rewrite would add). The
# optional fields (``total=False``) are those older rows lack; the accessors below give each
# part with its one default for such rows, and readers go through them.


class Provenance(TypedDict, total=False):
    """What produced a row or started its training (`core.provenance.provenance`).

    A row carries these fields at its top level (scored), and its training's in
    ``train.started``.
    """

    date: Required[str]
    git_commit: Required[str]
    git_dirty: Required[bool]
    git_diff_sha256: str | None  # the dirty tree's diff (absent in the oldest rows)
    versions: Required[dict[str, str]]  # package -> version
    hardware: Required[dict[str, Any]]  # cpu, cpu_count, cuda, gpu, platform, torch_threads


class NotRecorded(TypedDict):
    """An empty record (``{}``): a part a row holds with nothing in it."""


class DataRecord(TypedDict, total=False):
    """A row's ``data``: the data it was trained and scored on (`rows.build.data_record`)."""

    variant: Required[str]
    description: Required[str]
    inputs: Required[dict[str, str]]  # input file -> SHA-256
    fingerprint: str  # the binarized files' (`checksums.verify`; absent in older rows)


class TrainRecord(TypedDict, total=False):
    """A row's ``train``: how its model was trained (`rows.build.model_train_record`;
    `pipelines.pretrained` and `rows.baselines` for the other kinds)."""

    wall_s: Required[float | None]
    tokens_per_s: Required[float | None]
    epochs: Required[int | None]
    checkpoint: Required[str | None]
    config: Required[dict[str, Any]]  # `train.config_settings`, hashed into config_sha256
    overrides: list[str]  # the Hydra overrides it was trained with
    # at the training's start; {} for a baseline (nothing trained) and for runs started
    # before it was recorded, absent in the oldest rows
    started: Provenance | NotRecorded
    learning_curve: dict[str, Any]  # per-epoch losses and why it stopped (`report.learning_curves`)
    # each resume from a checkpoint: epoch, updates or step, and the batches it went on with
    # (`train.fairseq_logs.resumes`, `train.hf_finetune`); absent in rows before 2026-12-01
    resumes: list[dict[str, Any]]
    pretrained_embeddings: dict[str, Any]  # `pretrained_embeddings.row_fields`
    # a fine-tuned pretrained encoder's (`pipelines.pretrained`)
    pretrained: dict[str, Any]  # name, distribution, licence, weights_sha256
    pairs_per_s: float
    precision: str
    optimizer: str  # the AdamW kernel it stepped with: loop or fused (`train.hf_finetune`)


class DecodeRecord(TypedDict, total=False):
    """A row's ``decode``: how its evaluation set was decoded (`pipelines.jobs.score_model`)."""

    wall_s: Required[float]
    hypotheses: str | None  # the decoded file
    beam: int
    batch_size: int


class AttentionStats(TypedDict, total=False):
    """A row's ``attention``: the attention statistics of its evaluation set
    (`decode.export_attention`), or an NER model's tag-marginal ones (`decode.tagging`)."""

    export: str  # the exported attention file (Fig. 2's panels)
    rows: int
    sentences: int
    mean_row_length: float
    mean_support_size: float
    mean_zero_fraction: float
    mean_runs_per_row: float
    mean_run_size: float | None
    mean_clusters_per_row: float
    mean_cluster_size: float | None
    by_layer: list[dict[str, Any]]
    alpha: list[list[float]]  # learned entmax α, per layer and head
    alpha_layers: list[str]  # a fairseq Transformer's: the attention module of each α row
    mean_tag_sequences: float | None
    median_tag_sequences: float
    mean_log10_tag_sequences: float
    single_sequence_fraction: float
    transition_zero_fraction: float


class GammaSelection(TypedDict, total=False):
    """A row's ``gamma_selection``: how GAMMA=auto chose γ on validation
    (`pipelines.gamma_select`)."""

    chosen: Required[float]
    criterion: Required[str]
    grid: Required[list[float]]
    seeds: Required[list[int]]
    validation: Required[dict[str, float]]  # γ (as a string) -> its score on validation
    extend: int  # how many times the edge rule may extend the grid
    extended: list[float]  # the γ it added beyond the grid


class ItemsRecord(TypedDict):
    """A row's ``items``: its per-item sidecar (`score.significance.write_items`)."""

    file: str  # relative to the results folder
    sha256: str


class BaselineRecord(TypedDict):
    """A trivial baseline's row's ``baseline`` (`rows.baselines`)."""

    name: str
    settings: dict[str, Any]


class ResultRow(Provenance, total=False):
    """The fields of a result row (`rows.build.job_rows` assembles them), its provenance
    (`Provenance`) among them.

    The `Required` fields are in every row; the others are optional: older rows lack them
    (`REQUIRED`: those a stored record must have to be read as a row at all).
    """

    row_version: int
    run_id: Required[str]
    table: Required[str]
    experiment: Required[str]
    evaluation: Required[str]
    scale: Required[str]
    data_source: Required[str]
    mapping: Required[
        str
    ]  # the mapping's name (an `attention` config, or a `dp` regulariser for NER)
    # a sweep job's swept overrides, e.g. {"attention": "sparsemax", "model.attention_gamma": "4.0"}
    sweep_params: Required[dict[str, str]]
    seed: Required[int]
    config_sha256: str  # `keys.config_sha256` of train.config
    metrics: Required[dict[str, float]]
    signature: Required[str | None]  # the scorer's settings (sacrebleu's signature, ROUGE's)
    items: ItemsRecord | None
    gamma_selection: GammaSelection | None
    dry_run: dict | None  # a dry run's caps (`core.dry_run.DryRun.record`)
    data: Required[DataRecord]
    train: Required[TrainRecord]
    baseline: BaselineRecord
    decode: Required[DecodeRecord]
    attention: AttentionStats | None


def train_record(row: ResultRow) -> TrainRecord:
    """A row's ``train`` (empty for a record without one)."""
    return row.get("train") or {}


def train_settings(row: ResultRow) -> dict[str, Any]:
    """The composed training config's settings a row records (``train.config``; empty for a
    row with no recorded config)."""
    return train_record(row).get("config") or {}


def model_settings(row: ResultRow) -> dict[str, Any]:
    """The ``model`` part of a row's training settings: its attention's parameters among them."""
    return train_settings(row).get("model") or {}


def training_start(row: ResultRow) -> Provenance | None:
    """The provenance of a row's training at its start (``train.started``); None for the
    oldest rows, which did not record it."""
    return train_record(row).get("started") or None


def training_commit(row: ResultRow) -> str | None:
    """The commit a row's model was trained at; None when unknown."""
    return (training_start(row) or {}).get("git_commit") or None


def from_dirty_tree(row: ResultRow) -> bool:
    """Whether a row was scored, or its model trained, from a tree that differed from its
    commit."""
    return bool(row.get("git_dirty") or (training_start(row) or {}).get("git_dirty"))


def decode_record(row: ResultRow) -> DecodeRecord:
    """A row's ``decode`` (empty for a record without one)."""
    return row.get("decode") or {}


def attention_stats(row: ResultRow) -> AttentionStats:
    """A row's attention statistics (empty for a row without: no attention, or none measured)."""
    return row.get("attention") or {}


def items_record(row: ResultRow) -> ItemsRecord | None:
    """Where a row's per-item scores are; None for a row without (written before them)."""
    return row.get("items") or None


def gamma_selection(row: ResultRow) -> GammaSelection | None:
    """How GAMMA=auto chose the γ a row was trained at; None when γ was not chosen so."""
    return row.get("gamma_selection") or None


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
