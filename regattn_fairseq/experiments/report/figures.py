"""Attention figures of result rows: the sentences a figure may draw, kept beside the rows, one
sentence under every mapping of an experiment, and which rows a table run's figure shows
(`figure_panels`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from regattn_checkout.files import replacing, write_file
from regattn_fairseq.experiments.core.result_row import (
    ResultRow,
    attention_stats,
    gamma_selection,
    model_settings,
    training_commit,
)
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.decode.attention_format import read_export, write_compressed_export
from regattn_fairseq.experiments.report.attention_plots import (
    is_tag_marginals,
    panel_label,
    plot_sentence,
)
from regattn_fairseq.experiments.rows.keys import (
    is_baseline,
    row_config_sha256,
    row_label,
    split_current,
)

# How many of a run's readable sentences (`_readable`) its figure sidecar keeps.
FIGURE_SENTENCES = 25


def _readable(record: dict, source_tokens: tuple[int, int] = (8, 20)) -> bool:
    """Whether a figure can show a sentence: a source of 8-20 tokens, or, for NER's tag
    marginals (whose columns are the tag set, the rows the words), 8-20 words with at least
    one gold entity (a tag other than O), so that entropy and l2 differ somewhere worth seeing.
    """

    if is_tag_marginals(record):
        words, tags = record["tgt_tokens"], record.get("gold_tags", [])
        has_entity = any(tag != "O" for tag in tags)
        return source_tokens[0] <= len(words) <= source_tokens[1] and has_entity
    return source_tokens[0] <= len(record["src_tokens"]) <= source_tokens[1]


def figure_sidecar_name(run_id: str, evaluation: str) -> Path:
    """A run's figure sidecar, relative to the results folder.

    Parameters
    ----------
    run_id, evaluation : str
        the row's run id and evaluation set.

    Returns
    -------
    Path
        ``raw/attention/<run_id>-<evaluation>.jsonl.gz``.
    """
    return Path("raw") / "attention" / f"{run_id}-{evaluation}.jsonl.gz"


def keep_figure_sentences(export: Path, sidecar: Path, count: int = FIGURE_SENTENCES) -> Path:
    """Keep the sentences of an attention export that a figure may draw, in a small committed
    file, so that the figure can be drawn again once the export is gone.

    An export (every sentence of an evaluation set, megabytes) stays with the checkpoints on
    the machine that decoded; `plot_attention_figure` draws the first readable sentence that
    every panel's export holds, and exports of one test set list their sentences in the same
    order (batches by length), so the first `count` readable sentences of each run suffice.
    An existing sidecar is left as it is (a row's model, hence its attention, does not change).

    Parameters
    ----------
    export : Path
        the export (`attention_format.read_export`).
    sidecar : Path
        where to write it (gzip'd JSON lines, `figure_sidecar_name`).
    count : int
        how many readable sentences to keep.

    Returns
    -------
    Path
        the sidecar.
    """

    if sidecar.is_file():
        return sidecar
    kept = [record for record in read_export(export) if _readable(record)][:count]
    # under a name of its own: two runs of one table may keep the same sidecar at once (#26)
    with replacing(sidecar) as partial:
        write_compressed_export(partial, kept)
    return sidecar


def plot_attention_figure(
    figures_dir: Path,
    name: str,
    exports: list[Path],
    source_tokens: tuple[int, int] = (8, 20),
    runs: list[dict] | None = None,
) -> list[Path]:
    """One sentence's attention under every mapping of an experiment, side by side
    (regattn_fairseq.experiments.report.attention_plots): the first sentence of the first export, in
    its order, that every export holds and that is readable (`_readable`); without one, the
    first id every export holds.

    A figure is never replaced by one with fewer panels: the panels drawn (and the runs they
    show, with their commits) are recorded in ``<name>.json`` beside it, and when a later
    drawing lacks some of them (their exports and sidecars are gone, e.g. rows decoded on a
    machine that was lost), the existing figure is kept and the new one is written as
    ``<name>_<its mappings>``, with a message saying so.
    A figure drawn before manifests existed is kept in the same way (its panels are unknown).

    Parameters
    ----------
    figures_dir : Path
        the figures folder.
    name : str
        the figure's name (the sentence id is appended).
    exports : list of Path
        one export or figure sidecar per panel.
    source_tokens : tuple of int
        the readable source lengths.
    runs : list of dict, optional
        per panel, the run it shows (run id, seed, config hash, commits), recorded in the
        manifest as the figure's provenance; where the panels' seeds differ, each panel's
        title says its seed.

    Returns
    -------
    list of Path
        the figure's files (PNG, PDF).
    """

    records = [read_export(path) for path in exports]
    shared = set.intersection(*({str(r["id"]) for r in export} for export in records))
    candidates = [
        str(r["id"]) for r in records[0] if str(r["id"]) in shared and _readable(r, source_tokens)
    ]
    sentence = (candidates or sorted(shared))[0]
    # the panel titles' labels, as attention_plots titles the panels
    panels = [panel_label(export[0]) for export in records]
    name = _name_beside_kept(figures_dir, name, panels, records)
    # panels of runs of different seeds (a cell whose first seed's attention is gone) say whose
    seeds = [run.get("seed") for run in runs or []]
    notes = [f"seed {seed}" for seed in seeds] if len(set(seeds)) > 1 else None
    paths = plot_sentence(records, sentence, figures_dir, name=name, notes=notes)
    record = {
        "sentence": sentence,
        "panels": panels,
        "runs": runs,
        "files": [path.name for path in paths],
    }
    write_file(figures_dir / f"{name}.json", json.dumps(record, indent=1) + "\n")
    return paths


def _name_beside_kept(figures_dir: Path, name: str, panels: list[str], records) -> str:
    """The name a drawing of `panels` goes to: `name`, unless the figure there shows panels
    this drawing lacks (its manifest says so, or, drawn before manifests, which it shows is
    unknown); then ``<name>_<its mappings>``, saying so, and the figure there is kept."""
    manifest = figures_dir / f"{name}.json"
    if manifest.is_file():
        missing = [p for p in json.loads(manifest.read_text())["panels"] if p not in panels]
        shows = ", ".join(missing)
    else:  # a figure drawn before manifests: which panels it shows is unknown
        missing = [
            path.name
            for path in sorted(figures_dir.glob(f"{name}_*.png"))
            if re.fullmatch(re.escape(name) + r"_\d+\.png", path.name)
        ]
        shows = f"panels not recorded (drawn before figures had a manifest: {missing})"
    if not missing:
        return name
    beside = f"{name}_{'-'.join(sorted({_panel_slug(export[0]) for export in records}))}"
    print(
        f"[figure] {name} kept: it shows {shows}, and this drawing has only "
        f"{', '.join(panels)} (the others' exports and sidecars are not on disk); it goes "
        f"to {beside} (remove the kept figure to draw over it)",
        flush=True,
    )
    return beside


def _panel_slug(record: dict) -> str:
    """A panel's mapping in a file name: its name, or a continuous density's
    (``truncated_parabola``, ``gaussian_sum`` where summed with the discrete context)."""
    options = record.get("continuous")
    if options is None:
        return record["mapping"]["name"]
    return options["density"] + ("_sum" if options["combine"] == "sum" else "")


def gamma_suffix(gamma: str | None) -> str:
    """The figure name's mark of how γ was set: none (each config's own), auto, or fixed."""
    if gamma is None:
        return ""
    return "_gamma-auto" if gamma == "auto" else f"_gamma{float(gamma)}"


class FigureSetup(NamedTuple):
    """Which runs a table run's attention figure shows: those of its experiment, scale and
    dry-run kind, on the first evaluation set, set up for γ as the run sets it.

    Attributes
    ----------
    experiment : DictConfig
        the table's experiment.
    scale : str
        the run's scale.
    seed : int
        the run's first seed: the seed each panel shows where its attention is on disk.
    gamma : str or None
        how the run sets γ (--gamma: None, ``"auto"`` or a number).
    dry_run : dict or None
        the run's dry-run record (`DryRun.record`).
    gamma_mappings : tuple of str
        the mappings whose γ the experiment's trainer sets or tunes; a run of any other
        mapping (the attention-free control, learned α, a pretrained model's own softmax) is
        the same run whatever the γ mode, and its panel joins every figure of the experiment.
    """

    experiment: Any
    scale: str
    seed: int
    gamma: str | None
    dry_run: dict | None
    gamma_mappings: tuple[str, ...]

    def shows(self, row: ResultRow, evaluation: str) -> bool:
        """Whether a row is of this figure's setup, whatever its seed."""
        fixed = None if self.gamma in (None, "auto") else float(self.gamma)
        same_gamma = row["mapping"] not in self.gamma_mappings or (
            bool(gamma_selection(row)) == (self.gamma == "auto")
            and (fixed is None or model_settings(row).get("attention_gamma") == fixed)
        )
        return (
            same_gamma
            and row["experiment"] == self.experiment.name
            and row["scale"] == self.scale
            and row.get("dry_run") == self.dry_run
            and row["evaluation"] == evaluation
        )


def figure_panels(exports, rows, setup: FigureSetup, results_dir: Path) -> list[tuple[Path, dict]]:
    """The attention of one figure's panels: this invocation's exports, then those of the
    table's other cells set up the same way (γ auto, the same fixed γ, or neither), so that a
    table run one mapping per process gets one figure with every mapping, not a figure per
    process each replacing the last.

    A cell's panel shows its run of the first seed; where that run's attention is on disk
    neither as an export nor as a sidecar (decoded on a machine that is gone), it shows the
    cell's lowest seed whose attention is, so that the figure keeps every mapping (the panel's
    title says which seed, `plot_attention_figure`). Every row drawn whose export is on disk
    gets its figure sidecar (`keep_figure_sentences`, committed with the results); a row whose
    export is gone is drawn from its sidecar.

    Parameters
    ----------
    exports : list of Path
        this invocation's exports (first evaluation set, first seed), one per mapping.
    rows : list of dict
        the table's raw rows.
    setup : FigureSetup
        which of them the figure shows.
    results_dir : Path
        the results folder (its figure sidecars).

    Returns
    -------
    list of (Path, dict)
        per panel, this invocation's first, each cell once: the export or sidecar to draw and
        the run it shows (`figure_run`).
    """
    panels = {}  # the row's export path (its sidecar where it has none) -> (what to draw, run)
    for cell in _figure_cells(rows, setup):
        for row in sorted(cell, key=lambda r: (r["seed"] != setup.seed, r["seed"])):
            drawn = _attention_on_disk(row, results_dir)
            if drawn is not None:
                key, path = drawn
                panels[key] = (path, figure_run(row))
                break
    # this invocation's exports first (their rows are among the shown ones); sorted is stable
    first = {export: index for index, export in enumerate(exports)}
    ordered = sorted(panels.items(), key=lambda item: first.get(item[0], len(first)))
    return [panel for _, panel in ordered]


def cells_without_attention(rows, setup: FigureSetup, results_dir: Path) -> list[str]:
    """The cells of a figure's setup that it cannot show: no run of theirs, of any seed, has
    its attention on disk, as an export or as a figure sidecar (decoded on a machine that is
    gone, or before exports were kept). `figure_panels` leaves them out; the caller says so.

    Returns
    -------
    list of str
        Their labels (`rows.keys.row_label`), in the rows' order.
    """
    return [
        row_label(cell[0])
        for cell in _figure_cells(rows, setup)
        if all(_attention_on_disk(row, results_dir, keep=False) is None for row in cell)
    ]


def _figure_cells(rows, setup: FigureSetup) -> list[list[ResultRow]]:
    """The current rows a figure of `setup` shows (on the experiment's first evaluation set),
    grouped by cell (config hash), every seed; a baseline has no attention to show."""
    first_evaluation = next(iter(experiment_test_sets(setup.experiment)))
    shown, _ = split_current(rows)
    cells: dict[str, list[ResultRow]] = {}
    for row in shown:
        if setup.shows(row, first_evaluation) and not is_baseline(row):
            cells.setdefault(row_config_sha256(row), []).append(row)
    return list(cells.values())


def _attention_on_disk(
    row: ResultRow, results_dir: Path, keep: bool = True
) -> tuple[Path, Path] | None:
    """A row's attention to draw, as (the row's export path, or its sidecar where it records
    none; the file to draw): its export, whose sentences are kept in its sidecar on the way
    (unless `keep` is False: a check that writes nothing), else its sidecar; None when neither
    is on disk."""
    export = Path(attention_stats(row).get("export") or "")
    sidecar = results_dir / figure_sidecar_name(row["run_id"], row["evaluation"])
    if export.name and export.is_file():
        if keep:
            keep_figure_sentences(export, sidecar)
        return export, export
    if sidecar.is_file():
        return (export if export.name else sidecar), sidecar
    return None


def figure_run(row: ResultRow) -> dict:
    """What a figure's manifest records of the run a panel shows."""
    return {
        "run_id": row["run_id"],
        "attention": row_label(row),
        "seed": row["seed"],
        "config_sha256": row_config_sha256(row),
        "git_commit": row["git_commit"],
        "trained_at": training_commit(row),
    }
