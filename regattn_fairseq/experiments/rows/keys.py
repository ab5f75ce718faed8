"""What identifies a result row, and the checks that keep rows from being replaced silently.

A row's key is (experiment, evaluation, scale, data source, mapping, the mapping's parameters
γ/λ/p/α, dry-run caps, seed, config hash), the config hash being the SHA-256 of the composed
training config's settings (`train.config_settings`: model, optimizer, lr, epochs, batch size;
no paths). Rows that share everything but the config hash belong to the same table cell: the
cell shows the config of the newest row, and the others are *superseded* (kept in the raw
history, listed under the table). A dry run's rows (`dry_run.DryRun`: capped data, a few
updates) carry their caps in the key, so they never share a cell with real rows. A job whose key
already has a row is not trained or scored again unless asked."""

from __future__ import annotations

import hashlib
import json

from regattn_fairseq.experiments.core.labels import MAPPING_PARAMS, mapping_label
from regattn_fairseq.experiments.core.result_row import (
    ResultRow,
    model_settings,
    swept_values,
    train_settings,
)


def config_sha256(settings: dict) -> str:
    """The hash of a composed training config's settings.

    Parameters
    ----------
    settings : dict
        `train.config_settings` of the config (or a row's ``train.config``; its ``file``, a
        path, is ignored).

    Returns
    -------
    str
        The first 12 hex digits of the SHA-256 of the settings as sorted JSON; ``""`` for an
        empty config (rows with no recorded config).
    """
    settings = {k: v for k, v in (settings or {}).items() if k != "file"}
    if not settings:
        return ""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def row_config_sha256(row: ResultRow) -> str:
    """A row's config hash: the recorded one, else computed from its ``train.config``.

    Parameters
    ----------
    row : dict
        a result row.

    Returns
    -------
    str
        12 hex digits (``""`` when the row has no config).
    """
    return row.get("config_sha256") or config_sha256(train_settings(row))


def mapping_params(row: ResultRow) -> dict:
    """The attention parameters a row's model was trained with (the ones that are set).

    Parameters
    ----------
    row : dict
        a result row.

    Returns
    -------
    dict
        e.g. ``{"attention_gamma": 4.0}``; empty for the mapping's defaults.
    """
    model = model_settings(row)
    return {k: model[k] for k in MAPPING_PARAMS if model.get(k) is not None}


def mapping_key(mapping: str, sweep_params: dict | None = None) -> str:
    """The mapping part of a row's key: the mapping's name, followed by a sweep job's swept
    values as ``<parameter>=<value as swept>``.

    The swept value is in the key in the words the sweep wrote it (``"1.0"``, ``"learned"``),
    so that a sweep job's rows share their key with its version-1 rows, whose mapping names
    held it (`schema.upgrade`).

    Parameters
    ----------
    mapping : str
        the mapping's name.
    sweep_params : dict, optional
        a sweep job's swept overrides (`ResultRow.sweep_params`).

    Returns
    -------
    str
        e.g. ``"sparsemax"``, or ``"sparsemax attention_gamma=4.0"`` for a sweep job.
    """
    swept = swept_values(sweep_params)
    return " ".join([mapping, *(f"{k.split('.')[-1]}={v}" for k, v in swept.items())])


def is_baseline(row: ResultRow) -> bool:
    """Whether a row is a trivial baseline's (`rows.baselines`: nothing trained), read off its
    ``baseline`` record; its mapping name ("baseline: lead") is a label for the tables.

    Parameters
    ----------
    row : dict
        a result row.

    Returns
    -------
    bool
    """
    return bool(row.get("baseline"))


def row_label(row: ResultRow) -> str:
    """A row's mapping with its parameters (`labels.mapping_label`).

    Parameters
    ----------
    row : dict
        a result row.

    Returns
    -------
    str
        e.g. ``"sparsemax (γ=4)"``; a swept value that is no model parameter (learned α) is
        shown as swept.
    """
    params = mapping_params(row)
    swept = {
        k.split(".")[-1]: v
        for k, v in swept_values(row.get("sweep_params")).items()
        if k.split(".")[-1] not in params
    }
    return mapping_label(row["mapping"], {**params, **swept})


def cell_key(row: ResultRow) -> tuple:
    """The table cell a row belongs to: its key without the evaluation, seed and config.

    Parameters
    ----------
    row : dict
        a result row.

    Returns
    -------
    tuple
        (experiment, scale, data source, mapping, parameters as JSON, dry-run caps as JSON):
        a dry run's rows (`dry_run.DryRun`) never share a cell with real rows.
    """
    return (
        row["experiment"],
        row["scale"],
        row.get("data_source"),
        mapping_key(row["mapping"], row.get("sweep_params")),
        json.dumps(mapping_params(row), sort_keys=True),
        json.dumps(row.get("dry_run"), sort_keys=True),
    )


def row_key(row: ResultRow) -> tuple:
    """A row's key (see the module docstring).

    Parameters
    ----------
    row : dict
        a result row.

    Returns
    -------
    tuple
        `cell_key` plus (evaluation, seed, config hash).
    """
    return (*cell_key(row), row["evaluation"], row["seed"], row_config_sha256(row))


def row_job_key(row: ResultRow) -> tuple:
    """The key of the job that wrote a row: `row_key` less the evaluation.

    Parameters
    ----------
    row : ResultRow
        a result row.

    Returns
    -------
    tuple
        `cell_key` plus (seed, config hash): the `job_key` the job had before it ran.
    """
    return (*cell_key(row), row["seed"], row_config_sha256(row))


def job_key(
    experiment: str,
    scale: str,
    data_source: str,
    mapping: str,
    settings: dict,
    seed: int,
    dry_run: dict | None = None,
    sweep_params: dict | None = None,
) -> tuple:
    """The key of a job's rows, less the evaluation, before the job runs.

    Parameters
    ----------
    experiment, scale, data_source, mapping : str
        as in the rows.
    settings : dict
        the composed config's settings (`train.config_settings`).
    seed : int
        the seed.
    dry_run : dict, optional
        the rows' ``dry_run`` record (`dry_run.DryRun.record`; None for a real run).
    sweep_params : dict, optional
        a sweep job's swept overrides (`mapping_key`).

    Returns
    -------
    tuple
        that of its rows (`row_job_key`).
    """
    model = settings.get("model") or {}
    params = {k: model[k] for k in MAPPING_PARAMS if model.get(k) is not None}
    return (
        experiment,
        scale,
        data_source,
        mapping_key(mapping, sweep_params),
        json.dumps(params, sort_keys=True),
        json.dumps(dry_run, sort_keys=True),
        seed,
        config_sha256(settings),
    )


def finished_rows(rows: list[dict], key: tuple, evaluations: list[str]) -> list[dict]:
    """The newest row of each evaluation a finished job left, or [] if one is missing.

    Parameters
    ----------
    rows : list of dict
        the table's raw rows.
    key : tuple
        the job's `job_key`.
    evaluations : list of str
        the evaluation sets the job scores.

    Returns
    -------
    list of dict
        One row per evaluation when every evaluation has a row with the job's key, else [].
    """
    found = {}
    for row in rows:
        if row_job_key(row) == key and row["evaluation"] in evaluations:
            found[row["evaluation"]] = row
    return [found[e] for e in evaluations] if len(found) == len(evaluations) else []


def split_current(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The rows a table shows, and the superseded ones.

    Per cell (`cell_key`), the config of the newest row is current; per (evaluation, seed) of
    that config, the newest row is shown. Rows of another config are superseded.

    Parameters
    ----------
    rows : list of dict
        every raw row, oldest first.

    Returns
    -------
    tuple of (list of dict, list of dict)
        The shown rows and the superseded rows, each in file order.
    """
    current_config = {}
    for row in rows:
        current_config[cell_key(row)] = row_config_sha256(row)
    shown, superseded = {}, []
    for row in rows:
        if row_config_sha256(row) == current_config[cell_key(row)]:
            shown[row_key(row)] = row
        else:
            superseded.append(row)
    return list(shown.values()), superseded
