"""Result rows and the generated tables.

results/raw/<table>.jsonl is the append-only record: one JSON row per (run, evaluation set)
with its config, seed, data, git commit, package versions, hardware and date. Nothing ever
rewrites it. results/raw/<table>.csv (flattened) and results/<table>.md are regenerated from
it after every run: the markdown shows, per scale, the latest result of each (mapping, seed)
as mean ± std over seeds next to the paper's numbers, followed by the full run history."""

from __future__ import annotations

import csv
import fcntl
import gzip
import json
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from .claims import claims_section
from .common import ReproError
from .dry_run import describe as describe_dry_run
from .learning_curves import convergence_lines, plot_learning_curves
from .paths import RESULTS_DIR
from .rowkeys import cell_key, mapping_label, row_config_sha256, split_current
from .significance import p_against

SCALE_ORDER = ("paper", "small", "smoke")


@contextmanager
def table_lock(results_dir: Path, table: str) -> Iterator[None]:
    """An exclusive lock on one table's record, held while its rows are appended and its views
    rewritten.

    Several processes may write one table at once (e.g. one `scripts/reproduce.py --mappings M`
    per mapping on a machine's cores). Unlocked, a row longer than one buffered write could be
    interleaved with another process's row, and two processes could rewrite the markdown at
    once. The lock is a file beside the raw rows (`raw/.<table>.lock`, git-ignored).
    """
    raw_dir = results_dir / "raw"
    raw_dir.mkdir(parents=True, exist_ok=True)
    with open(raw_dir / f".{table}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def append_rows(results_dir: Path, table: str, rows: list[dict]) -> Path:
    raw = results_dir / "raw" / f"{table}.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    with open(raw, "a", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    return raw


def load_rows(results_dir: Path, table: str) -> list[dict]:
    raw = results_dir / "raw" / f"{table}.jsonl"
    if not raw.is_file():
        return []
    return [
        json.loads(line) for line in raw.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def _flatten(row: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, list) else value
    return flat


def write_csv(results_dir: Path, table: str, rows: list[dict]) -> Path:
    path = results_dir / "raw" / f"{table}.csv"
    flat = [_flatten(row) for row in rows]
    columns = sorted({key for row in flat for key in row})
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
    return path


def _mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _mean(values) -> str:
    values = [v for v in values if v is not None]
    return f"{statistics.mean(values):.0f}" if values else "–"


def latest_per_run(rows: list[dict], key_fields: tuple[str, ...]) -> list[dict]:
    """Re-running a configuration appends a new row; tables show the most recent one."""
    latest = {}
    for row in rows:
        latest[tuple(json.dumps(row.get(k), sort_keys=True) for k in key_fields)] = row
    return list(latest.values())


def baseline_of(spec) -> str:
    """The mapping a table's p-values test against: its spec's `baseline:`, softmax when
    absent (NER has no softmax: its baseline is the entropy, the CRF)."""
    return str(spec.get("baseline") or "softmax")


def p_value_note(baseline: str) -> str:
    """The table notes' explanation of the "p vs <baseline>" column."""
    return (
        f"p vs {baseline}: paired bootstrap (1,000 resamples of the test items, seed 12345; "
        "sacrebleu's paired_bs for BLEU; corpus-level entity F1 recomputed from the resampled "
        f"sentences' entity counts) of the difference between the mapping and {baseline} on "
        "the column's metric, two-sided, seeds paired and concatenated (items x seeds). A cell "
        f"with γ chosen on validation (γ auto) is tested against {baseline} tuned on the same "
        f"grid, at its own chosen γ; any other cell against {baseline} at the same γ. n/a: a "
        f"row without per-item data (older than the sidecars) or no such {baseline} row of the "
        "same seeds."
    )


DIRTY_LEGEND = (
    "†: scored or trained from a work tree that differed from its commit (the row records "
    "the diff's SHA-256, `git_diff_sha256`)."
)


def _is_dirty(row: dict) -> bool:
    return bool(row.get("git_dirty") or (row["train"].get("started") or {}).get("git_dirty"))


def render_table(spec, rows: list[dict], results_dir: Path | None = None) -> str:
    """Markdown for one paper table: per scale, our mean ± std next to the paper's numbers.

    Parameters
    ----------
    spec : DictConfig
        the table's spec (configs/reproduce/<table>.yaml, or a sweep's table view).
    rows : list of dict
        every raw row of the table, oldest first.
    results_dir : Path, optional
        the results folder, where the per-item sidecars are (p-values are n/a without it).

    Returns
    -------
    str
        The markdown.
    """
    command = spec.get("generated_by") or f"scripts/reproduce.py {spec.table}"
    lines = [
        f"# {spec.title}",
        "",
        f"Generated by `{command}` from "
        f"`results/raw/{spec.table}.jsonl` (append-only; every row there carries its config, "
        f"seed, git commit, package versions, hardware and date).",
        "",
        f"Paper numbers: {spec.paper_source}.",
        "",
    ]
    for note in spec.get("notes") or []:
        lines += [f"- {note}"]
    lines += [
        "- Cells: mean ± std over the n seeds of one training config (key: experiment, "
        "evaluation, scale, mapping with γ/λ/p/α, seed, config hash); rows of an older config "
        "of the same cell are listed as superseded under the table.",
        f"- {p_value_note(baseline_of(spec))}",
        f"- {DIRTY_LEGEND}",
        "",
    ]
    current, superseded = split_current(rows)
    # one section per scale, and apart from its real rows, one per dry run (`dry_run.DryRun`)
    sections = sorted(
        {_section(r) for r in current},
        key=lambda s: (SCALE_ORDER.index(s[0]), s[1] != "null", s[1]),
    )
    for section in sections:
        scale = section[0]
        scale_rows = [r for r in current if _section(r) == section]
        dry_words = describe_dry_run(json.loads(section[1]))
        lines += [f"## Scale `{scale}`" + (f", {dry_words}" if dry_words else ""), ""]
        if dry_words:
            lines += [
                f"Dry run: the {scale}-scale model, optimizer and schedule on capped data for a "
                "few updates, a check that the configs run end to end; the numbers mean "
                "nothing.",
                "",
            ]
        elif scale == "smoke":
            lines += [
                "Smoke scale: a pipeline test on a few hundred examples; the numbers mean nothing.",
                "",
            ]
        for experiment in dict.fromkeys(r["experiment"] for r in scale_rows):
            exp_rows = [r for r in scale_rows if r["experiment"] == experiment]
            old = [
                r for r in superseded if _section(r) == section and r["experiment"] == experiment
            ]
            lines += _experiment_table(spec, experiment, exp_rows, old, results_dir)
    lines += [
        "## History (every run, oldest first)",
        "",
        "| date | scale | experiment | eval | mapping | seed | config | metrics | commit | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        metrics = ", ".join(
            f"{k} {v}" for k, v in row["metrics"].items() if not k.startswith("acc_")
        )
        scale = row["scale"] + (" (dry run)" if row.get("dry_run") else "")
        lines.append(
            f"| {row['date']} | {scale} | {row['experiment']} | {row['evaluation']} | "
            f"{mapping_label(row)} | {row['seed']} | {row_config_sha256(row) or '–'} | "
            f"{metrics} | {row['git_commit'][:10]}"
            f"{'+dirty' if row.get('git_dirty') else ''} | {row['run_id']} |"
        )
    return "\n".join(lines) + "\n"


def _section(row: dict) -> tuple[str, str]:
    """The table section a row is shown in: its scale and its dry-run caps (as JSON)."""
    return row["scale"], json.dumps(row.get("dry_run"), sort_keys=True)


def _gamma_tuning(row: dict) -> tuple | None:
    """How a row's γ was chosen (GAMMA=auto: grid, criterion, selection seeds), or None."""
    selection = row.get("gamma_selection")
    if not selection:
        return None
    return (tuple(selection["grid"]), selection["criterion"], tuple(selection["seeds"]))


def _baseline(cells: dict, key: tuple, baseline: str) -> list[dict] | None:
    """The baseline's rows for a cell.

    A cell whose γ was chosen on validation (GAMMA=auto) is compared with the baseline tuned
    the same way (grid, criterion, selection seeds), at whatever γ each chose: the fair
    comparison GAMMA=auto is for. Any other cell is compared with an untuned baseline cell of
    the same parameters, else of the same γ (a surrogate backward, λ, p or α are the
    mapping's own), else of its default parameters.
    """
    tuning = _gamma_tuning(cells[key][0])
    candidates = {
        other: rows
        for other, rows in cells.items()
        if other[3].split(" ")[0] == baseline and _gamma_tuning(rows[0]) == tuning
    }
    if tuning is not None:
        return next(iter(candidates.values()), None)
    gamma = json.loads(key[4]).get("attention_gamma")
    same_gamma = json.dumps({} if gamma is None else {"attention_gamma": gamma})
    for params in (key[4], same_gamma, "{}"):
        for other, rows in candidates.items():
            if other[4] == params:
                return rows
    return None


def _p_cell(results_dir, key, rows, baseline_rows, metric, baseline: str) -> str:
    if key[3].split(" ")[0] == baseline:
        return "–"
    if results_dir is None or baseline_rows is None:
        return "n/a"
    try:
        p_value = p_against(results_dir, rows, baseline_rows, metric)
    except ValueError as error:
        print(f"[results] no p-value for {key[3]}: {error}")
        p_value = None
    return "n/a" if p_value is None else f"{p_value:.3f}"


def _experiment_table(
    spec, experiment: str, rows: list[dict], superseded: list[dict], results_dir: Path | None
) -> list[str]:
    evaluations = list(dict.fromkeys(r["evaluation"] for r in rows))
    metric_names = {e: spec.metrics[e] for e in evaluations}
    paper = spec.get("paper") or {}
    kind = statistics_view(spec)
    baseline_name = baseline_of(spec)
    header = [kind.mapping_header]
    for evaluation in evaluations:
        for metric in metric_names[evaluation]:
            header += [f"{evaluation} {metric}", "paper"]
        header += [f"p vs {baseline_name} ({metric_names[evaluation][0]})"]
    # The sparsity statistics (attention, or NER's tag marginals) on the first evaluation set;
    # the other sets follow in their own table below.
    header += [f"{evaluations[0]} {column}" for column in kind.columns]
    header += ["n", "seeds", "config", "epochs", "train wall s", "tokens/s", "data", "commit"]
    lines = [f"### {experiment}", ""]
    lines += claims_section(spec, rows, experiment, rows[0]["scale"], results_dir)
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    cells = defaultdict(list)
    for row in rows:
        cells[cell_key(row)].append(row)
    for key, mapping_rows in cells.items():
        baseline = _baseline(cells, key, baseline_name)
        cells_out = [mapping_label(mapping_rows[0])]
        for evaluation in evaluations:
            eval_rows = [r for r in mapping_rows if r["evaluation"] == evaluation]
            dirty = "†" if any(_is_dirty(r) for r in eval_rows) else ""
            for metric in metric_names[evaluation]:
                cells_out.append(
                    _mean_std([r["metrics"][metric] for r in eval_rows if metric in r["metrics"]])
                    + dirty
                )
                value = (paper.get(evaluation) or {}).get(mapping_rows[0]["mapping"], {})
                value = value.get(metric)
                cells_out.append("n/a" if value is None else f"{value:.2f}")
            base_rows = None
            if baseline is not None:
                base_rows = [r for r in baseline if r["evaluation"] == evaluation]
            cells_out.append(
                _p_cell(
                    results_dir,
                    key,
                    eval_rows,
                    base_rows,
                    metric_names[evaluation][0],
                    baseline_name,
                )
            )
        cells_out += kind.cells([r for r in mapping_rows if r["evaluation"] == evaluations[0]])
        seeds = sorted({r["seed"] for r in mapping_rows})
        first = mapping_rows[0]
        gamma = first.get("gamma_selection")
        cells_out += [
            str(len(seeds)),
            ",".join(map(str, seeds)),
            (row_config_sha256(first) or "–") + (f" (γ auto: {gamma['chosen']})" if gamma else ""),
            _mean(r["train"]["epochs"] for r in mapping_rows),
            _mean(r["train"]["wall_s"] for r in mapping_rows),
            _mean(r["train"]["tokens_per_s"] for r in mapping_rows),
            first["data"]["description"],
            _commits(mapping_rows),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells_out) + " |")
    signatures = sorted({r["signature"] for r in rows if r.get("signature")})
    lines += [""] + [f"Scoring: `{s}`" for s in signatures] + [""]
    convergence = convergence_lines(rows)
    if convergence and not rows[0].get("dry_run"):
        figure = learning_curve_figure(spec.table, experiment, rows[0]["scale"])
        lines += convergence + [f"![learning curves](figures/{figure})", ""]
    gamma_rows = [r for r in rows if r.get("gamma_selection")]
    if gamma_rows:
        lines += ["γ chosen on validation (GAMMA=auto; validation score of each γ):", ""]
        for row in {cell_key(r): r for r in gamma_rows}.values():
            selection = row["gamma_selection"]
            scores = ", ".join(f"γ={g}: {v}" for g, v in selection["validation"].items())
            edge = ""
            if len(selection["grid"]) > 1 and selection["chosen"] in (
                min(selection["grid"]),
                max(selection["grid"]),
            ):
                edge = " (at the grid's edge: the best γ may lie beyond it)"
            lines.append(
                f"- {row['mapping']}: γ = {selection['chosen']}{edge} ({selection['criterion']}: "
                f"{scores})"
            )
        lines.append("")
    if superseded:
        lines += ["Superseded (an older config of a cell above; kept in the raw history):", ""]
        seen = set()
        for row in superseded:
            entry = (
                f"- superseded: {experiment} {mapping_label(row)} seed {row['seed']}, config "
                f"{row_config_sha256(row) or 'unrecorded'} ({row['train'].get('epochs')} "
                f"epochs), {row['date'][:10]}, run {row['run_id']}"
            )
            if entry not in seen:
                seen.add(entry)
                lines.append(entry)
        lines.append("")
    if len(evaluations) > 1:
        lines += [
            f"{kind.title} on every evaluation set:",
            "",
            f"| {kind.mapping_header} | evaluation | " + " | ".join(kind.columns) + " |",
            "|" + "---|" * (2 + len(kind.columns)),
        ]
        for mapping_rows in cells.values():
            for evaluation in evaluations:
                stats = kind.cells([r for r in mapping_rows if r["evaluation"] == evaluation])
                lines.append(
                    f"| {mapping_label(mapping_rows[0])} | {evaluation} | "
                    + " | ".join(stats)
                    + " |"
                )
        lines.append("")
    lines += [kind.legend, ""]
    return lines


ATTENTION_COLUMNS = ("% zeros", "support", "runs/row (size)", "clusters/row (size)")
ATTENTION_LEGEND = (
    "Attention columns: mean over every attention row of the evaluation set (one row per output "
    "token of the beam-search output, or per SNLI hypothesis) of the % of exact zeros and the "
    "support size, and the mean number per row of equal-weight *runs* (>= 2 adjacent positions, "
    "fusedmax's groups) and *clusters* (>= 2 positions anywhere, oscarmax's groups) with their "
    "mean size; see `regattn/analysis.py`. – : not measured (rows older than the "
    "statistics)."
)


def _commits(rows: list[dict]) -> str:
    """The commit(s) that scored the rows, and the one that trained them where it differs;
    rows with no training record say "training commit unknown" (none is invented)."""
    scored = sorted({r["git_commit"][:10] for r in rows})
    trained = sorted(
        {r["train"]["started"]["git_commit"][:10] for r in rows if r["train"].get("started")}
        - set(scored)
    )
    text = ",".join(scored) + (f" (trained {','.join(trained)})" if trained else "")
    if any(not r["train"].get("started") for r in rows):
        text += " (training commit unknown)"
    return text


def _attention_cells(rows: list[dict]) -> list[str]:
    """Attention statistics averaged over seeds; '–' when no row carries them."""
    stats = [r["attention"] for r in rows if r.get("attention")]
    if not stats:
        return ["–"] * len(ATTENTION_COLUMNS)

    def mean(key, scale=1.0):
        values = [s[key] for s in stats if s.get(key) is not None]
        return statistics.mean(values) * scale if values else None

    def group(count_key, size_key):
        size = mean(size_key)
        return f"{mean(count_key):.2f} ({'–' if size is None else f'{size:.2f}'})"

    return [
        f"{mean('mean_zero_fraction', 100):.1f}",
        f"{mean('mean_support_size'):.2f}",
        group("mean_runs_per_row", "mean_run_size"),
        group("mean_clusters_per_row", "mean_cluster_size"),
    ]


TAG_MARGINAL_COLUMNS = (
    "% zeros (tag marginals)",
    "% zeros (transitions)",
    "tag sequences with mass (mean / median)",
    "mean log10 tag sequences",
    "% sentences with one sequence",
)
TAG_MARGINAL_LEGEND = (
    "Marginal columns (`experiments/tagging.py`), on the evaluation set, averaged over seeds: "
    "the expected marginals of the smoothed Viterbi (the gradient of DP_Ω). % zeros (tag "
    "marginals): mean over words of the % of tags whose marginal is exactly 0; % zeros "
    "(transitions): % of exact zeros among the transition marginals the model allows (finite "
    "potential), pooled over words; tag sequences with mass: the number of tag sequences of a "
    "sentence with nonzero probability under the path distribution whose expectation is the "
    "gradient (a sequence has mass iff each of its transitions has a nonzero marginal; counted "
    "exactly by a dynamic program), mean / median over sentences: all K^n sequences of an "
    "n-word sentence for the entropy (a CRF), few for ℓ2; mean log10 tag sequences: the mean "
    "over sentences of the count's log10 (n log10 K for the entropy); % sentences with one "
    "sequence: those whose whole mass is on a single tag sequence. > 1e308: beyond float64 "
    "(the entropy's count on long sentences). – : not measured (rows older than the "
    "statistics)."
)


def _tag_marginal_cells(rows: list[dict]) -> list[str]:
    """Tag-marginal statistics (`tagging.evaluate`) averaged over seeds; '–' when no row
    carries them."""
    from .tagging import format_count

    stats = [
        r["attention"]
        for r in rows
        if (r.get("attention") or {}).get("mean_log10_tag_sequences") is not None
    ]
    if not stats:
        return ["–"] * len(TAG_MARGINAL_COLUMNS)

    def mean(key, scale=1.0):
        return statistics.mean(s[key] for s in stats) * scale

    def count(key):
        # None: a seed's count is beyond float64, and so is the mean over seeds
        values = [s[key] for s in stats]
        return format_count(None if None in values else statistics.mean(values))

    return [
        f"{mean('mean_zero_fraction', 100):.1f}",
        f"{mean('transition_zero_fraction', 100):.1f}",
        f"{count('mean_tag_sequences')} / {count('median_tag_sequences')}",
        f"{mean('mean_log10_tag_sequences'):.2f}",
        f"{mean('single_sequence_fraction', 100):.1f}",
    ]


class StatisticsView(NamedTuple):
    """What a table shows of its models' sparsity: the mapping column's header, the title of
    the per-evaluation-set table, the columns, their cells from a cell's rows, the legend."""

    mapping_header: str
    title: str
    columns: tuple[str, ...]
    cells: Callable[[list[dict]], list[str]]
    legend: str


# a table spec's `statistics:` (default attention)
STATISTICS_VIEWS = {
    "attention": StatisticsView(
        "attention", "Attention", ATTENTION_COLUMNS, _attention_cells, ATTENTION_LEGEND
    ),
    "tag_marginals": StatisticsView(
        "Ω (DP regulariser)",
        "Tag marginals",
        TAG_MARGINAL_COLUMNS,
        _tag_marginal_cells,
        TAG_MARGINAL_LEGEND,
    ),
}


def statistics_view(spec) -> StatisticsView:
    """The sparsity statistics a table shows: its spec's `statistics:` (attention when absent;
    tag_marginals for NER, whose models have no attention).

    Raises
    ------
    ReproError
        an unknown `statistics:` value.
    """
    name = str(spec.get("statistics") or "attention")
    if name not in STATISTICS_VIEWS:
        raise ReproError(
            f"table {spec.table}: statistics {name!r} is none of {', '.join(STATISTICS_VIEWS)}"
        )
    return STATISTICS_VIEWS[name]


# How many of a run's readable sentences (`_readable`) its figure sidecar keeps.
FIGURE_SENTENCES = 25


def _readable(record: dict, source_tokens: tuple[int, int] = (8, 20)) -> bool:
    """Whether a figure can show a sentence: a source of 8-20 tokens, or, for NER's tag
    marginals (whose columns are the tag set, the rows the words), 8-20 words with at least
    one gold entity (a tag other than O), so that entropy and l2 differ somewhere worth seeing.
    """
    from .attention_plots import is_tag_marginals

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
        the export (`regattn.analysis.read_export`).
    sidecar : Path
        where to write it (gzip'd JSON lines, `figure_sidecar_name`).
    count : int
        how many readable sentences to keep.

    Returns
    -------
    Path
        the sidecar.
    """
    from regattn.analysis import read_export

    if sidecar.is_file():
        return sidecar
    kept = [record for record in read_export(export) if _readable(record)][:count]
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    # per process: two runs of one table may keep the same sidecar at once (issue #26)
    partial = sidecar.with_name(f"{sidecar.name}.{os.getpid()}.partial")
    # mtime=0: the same sentences give the same bytes, so a re-run leaves git clean
    with gzip.GzipFile(partial, "wb", mtime=0) as handle:
        for record in kept:
            handle.write((json.dumps(record, sort_keys=True) + "\n").encode("utf-8"))
    partial.replace(sidecar)
    return sidecar


def plot_attention_figure(
    figures_dir: Path,
    name: str,
    exports: list[Path],
    source_tokens: tuple[int, int] = (8, 20),
    runs: list[dict] | None = None,
) -> list[Path]:
    """One sentence's attention under every mapping of an experiment, side by side
    (regattn_fairseq.experiments.attention_plots): the first sentence of the first export, in
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
        manifest as the figure's provenance.

    Returns
    -------
    list of Path
        the figure's files (PNG, PDF).
    """
    from regattn.analysis import describe_mapping, read_export

    from .attention_plots import plot_sentence

    records = [read_export(path) for path in exports]
    shared = set.intersection(*({str(r["id"]) for r in export} for export in records))
    candidates = [
        str(r["id"]) for r in records[0] if str(r["id"]) in shared and _readable(r, source_tokens)
    ]
    sentence = (candidates or sorted(shared))[0]
    # the panel titles' labels (attention_plots titles each panel with describe_mapping)
    panels = [
        describe_mapping(export[0]["mapping"]["name"], export[0]["mapping"].get("params", {}))
        for export in records
    ]
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
    if missing:
        kept = name
        name = f"{name}_{'-'.join(sorted({export[0]['mapping']['name'] for export in records}))}"
        manifest = figures_dir / f"{name}.json"
        print(
            f"[figure] {kept} kept: it shows {shows}, and this drawing has only "
            f"{', '.join(panels)} (the others' exports and sidecars are not on disk); it goes "
            f"to {name} (remove the kept figure to draw over it)",
            flush=True,
        )
    paths = plot_sentence(records, sentence, figures_dir, name=name)
    record = {
        "sentence": sentence,
        "panels": panels,
        "runs": runs,
        "files": [path.name for path in paths],
    }
    manifest.write_text(json.dumps(record, indent=1) + "\n")
    return paths


def check_row_kinds(results_dir: Path, table: str, dry_run: bool) -> None:
    """Refuse to put a dry run's rows where real rows are, or real rows where dry ones are.

    A dry run (`dry_run.DryRun`) writes to a results folder of its own: never to the
    committed results/ (`paths.RESULTS_DIR`), never to a raw file that holds real rows; and
    real rows never go to a raw file of dry-run rows.

    Parameters
    ----------
    results_dir : Path
        the results folder.
    table : str
        the table (its raw file is results_dir/raw/<table>.jsonl).
    dry_run : bool
        whether the rows to be written are a dry run's.

    Raises
    ------
    ReproError
        the rows would be mixed (the message names the folder or file).
    """
    if dry_run and Path(results_dir).resolve() == RESULTS_DIR.resolve():
        raise ReproError(
            f"a dry run's rows never go to {RESULTS_DIR} (the committed results): give them a "
            f"folder of their own, RESULTS_DIR=... (make) / --results-dir"
        )
    kinds = {bool(row.get("dry_run")) for row in load_rows(results_dir, table)}
    if kinds - {dry_run}:
        raw = Path(results_dir) / "raw" / f"{table}.jsonl"
        held, new = ("real", "dry-run") if dry_run else ("dry-run", "real")
        raise ReproError(
            f"{raw} holds {held} rows: {new} rows are never mixed with them; use another "
            f"RESULTS_DIR (make) / --results-dir"
        )


def learning_curve_figure(table: str, experiment: str, scale: str) -> str:
    """The file name (under figures/) of an experiment's learning curves at one scale."""
    return f"{table}_{experiment}_{scale}_learning_curves.png"


def draw_learning_curves(results_dir: Path, spec, rows: list[dict]) -> list[Path]:
    """One learning-curve figure per experiment and scale of the table's current real rows
    (dry runs left out), in results_dir/figures/.

    Returns
    -------
    list of Path
        The figures drawn (none for rows that record no curve).
    """
    current, _ = split_current(rows)
    groups = defaultdict(list)
    for row in current:
        if not row.get("dry_run"):
            groups[(row["experiment"], row["scale"])].append(row)
    drawn = []
    for (experiment, scale), group in groups.items():
        path = results_dir / "figures" / learning_curve_figure(spec.table, experiment, scale)
        title = f"{spec.table} {experiment}, scale {scale}: validation loss per epoch"
        if plot_learning_curves(group, path, title) is not None:
            drawn.append(path)
    return drawn


def write_outputs(results_dir: Path, spec, new_rows: list[dict], again: bool = False) -> Path:
    """Append the new rows, then regenerate the CSV and markdown views of the whole record.

    Parameters
    ----------
    again : bool
        RESCORE / --retrain asked for new rows of finished jobs; otherwise a row whose key
        has one already is refused (`run_lock.refuse_finished`).

    Raises
    ------
    ReproError
        the new rows would mix dry-run and real rows (`check_row_kinds`), or duplicate
        finished ones.
    """
    from .run_lock import refuse_finished

    with table_lock(results_dir, spec.table):
        for dry_run in {bool(row.get("dry_run")) for row in new_rows}:
            check_row_kinds(results_dir, spec.table, dry_run)
        if not again:  # one row per job (issue #26)
            refuse_finished(load_rows(results_dir, spec.table), new_rows)
        append_rows(results_dir, spec.table, new_rows)
        rows = load_rows(results_dir, spec.table)
        write_csv(results_dir, spec.table, rows)
        markdown = results_dir / f"{spec.table}.md"
        markdown.write_text(render_table(spec, rows, results_dir), encoding="utf-8")
        draw_learning_curves(results_dir, spec, rows)
    return markdown


def table_specs() -> dict:
    """Every result table's spec: the paper tables and the sweeps' table views.

    Returns
    -------
    dict
        table name -> spec.
    """
    from .common import load_config
    from .paths import CONFIG_DIR
    from .sweep import table_spec

    specs = {}
    for path in sorted((CONFIG_DIR / "reproduce").glob("*.yaml")):
        specs[path.stem] = load_config("reproduce", path.stem)
    for path in sorted((CONFIG_DIR / "sweep").glob("*.yaml")):
        spec = table_spec(load_config("sweep", path.stem))
        specs[spec.table] = spec
    return specs


def regenerate(results_dir: Path, tables: list[str] | None = None) -> list[Path]:
    """Rewrite the markdown and CSV views of raw tables from their rows (rows untouched), and,
    for every table, the re-runs' view (`rerun.draw_reruns`).

    Parameters
    ----------
    results_dir : Path
        the results folder.
    tables : list of str, optional
        the tables (default: every table with a raw file).

    Returns
    -------
    list of Path
        The markdown files written.
    """
    written = []
    for table, spec in table_specs().items():
        if tables and table not in tables:
            continue
        if not (results_dir / "raw" / f"{table}.jsonl").is_file():
            continue
        with table_lock(results_dir, table):
            rows = load_rows(results_dir, table)
            if not rows:
                continue
            write_csv(results_dir, table, rows)
            markdown = results_dir / f"{table}.md"
            markdown.write_text(render_table(spec, rows, results_dir), encoding="utf-8")
            draw_learning_curves(results_dir, spec, rows)
        written.append(markdown)
    if not tables and (results_dir / "reruns.jsonl").is_file():
        from .rerun import draw_reruns

        written.append(draw_reruns(results_dir))
    return written


def main() -> None:
    """``python -m regattn_fairseq.experiments.results [TABLE ...]``: regenerate the views."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("tables", nargs="*")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    for path in regenerate(args.results_dir.resolve(), args.tables):
        print(f"[results] {path}")


if __name__ == "__main__":
    main()
