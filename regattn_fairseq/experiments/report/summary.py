"""The results summary: one generated table over every paper table, in results/summary.md and
in README between the ``<!-- results-summary:start -->`` and ``<!-- results-summary:end -->``
markers. Nothing in it is typed by hand: each line is a table's headline metric per mapping
(the cell `claims.representative_cells` picks: γ-tuned first, then most runs stopped early,
then most seeds, then newest), its trivial baseline, how many of the runs stopped on their
validation loss, and the verdicts of the claims the table tests (`claims.judge`). Run by
`make results-tables`.

    python -m regattn_fairseq.experiments.report.summary [--results-dir DIR] [--readme FILE]
"""

from __future__ import annotations

import argparse
import os
import posixpath
import statistics
from pathlib import Path

from regattn_checkout.files import write_file
from regattn_checkout.paths import REPO_ROOT, RESULTS_DIR
from regattn_fairseq.experiments.core.cli import run_main
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.result_row import ResultRow, gamma_selection
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.report.claims import (
    cell_mean,
    interval_text,
    judge_table,
    representative_cells,
    table_claims,
    verdicts_by_claim,
)
from regattn_fairseq.experiments.report.compute import TableCost, cost_lines, help_line, table_cost
from regattn_fairseq.experiments.report.convergence import converged, converged_values
from regattn_fairseq.experiments.report.learning_curves import stopped_early
from regattn_fairseq.experiments.report.specs import table_specs
from regattn_fairseq.experiments.report.tables import row_commits, seed_plan
from regattn_fairseq.experiments.rows.keys import is_baseline, row_config_sha256, row_label
from regattn_fairseq.experiments.rows.store import load_rows

START, END = "<!-- results-summary:start -->", "<!-- results-summary:end -->"
COMPUTE_START, COMPUTE_END = "<!-- cpu-hours:start -->", "<!-- cpu-hours:end -->"
# the pretrained-encoder table's headline in docs/huggingface.md ("What to expect")
PRETRAINED_TABLE = "table1_pretrained"
PRETRAINED_START, PRETRAINED_END = (
    "<!-- pretrained-table:start -->",
    "<!-- pretrained-table:end -->",
)
SCALE = "small"
PAPER_TABLES = (
    "table1",
    "table1_pretrained",
    "table2",
    "nmt",
    "e2_transformer",
    "inflection",
    "ner",
    "continuous",
)


def summary_columns() -> dict[str, str]:
    """The summary's mapping columns, attention config -> header, in their order
    (configs/report/summary.yaml)."""
    return dict(load_config("report", "summary").columns)


def _cell_text(rows: list[ResultRow], metric: str, pool: list[ResultRow]) -> str:
    """A cell's mean ± std as its table's headline shows it (`convergence.converged_values`:
    the converged seeds, "k of m converged" where the check leaves runs out; ``pool``: the
    evaluation's cells, as the headline's), with its γ when tuned; a baseline's over its rows."""
    scored = [row for row in rows if metric in row["metrics"]]
    if not scored:
        return "–"
    if is_baseline(scored[0]):
        values, count = [row["metrics"][metric] for row in scored], f"n={len(scored)}"
    else:
        kept, _ = converged(scored, pool)
        values, count = converged_values(scored, kept, metric)
    text = f"{statistics.mean(values):.2f}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values):.2f}"
    gamma = (gamma_selection(rows[0]) or {}).get("chosen")
    notes = [count] + ([f"γ={gamma:g}"] if gamma is not None else [])
    return f"{text} ({', '.join(notes)})"


def _provenance_line(table: str, evaluation: str, cell: list[dict]) -> str:
    """Where one summary figure comes from: its runs, seeds, config, data and code."""
    first = cell[0]
    return (
        f"| {table} {first['experiment']} | {evaluation} | {row_label(first)} | "
        f"{', '.join(str(s) for s in sorted({r['seed'] for r in cell}))} | "
        f"{', '.join(sorted({r['run_id'] for r in cell}))} | "
        f"{', '.join(sorted({row_config_sha256(r) or '–' for r in cell}))} | "
        f"{', '.join(sorted({(r['data'].get('fingerprint') or '–')[:12] for r in cell}))} | "
        f"{row_commits(cell)} |"
    )


def _paper_words(spec, verdict) -> str:
    """What the paper reports for a claim: the claim's ``paper:`` in its table's config."""
    for claim in spec.get("claims") or []:
        if claim["id"] == verdict.claim and claim["text"] == verdict.text:
            return str(claim.get("paper") or "–")
    return "–"


def summary_lines(
    results_dir: Path, link_prefix: str, scale: str = SCALE, provenance: bool = True
) -> list[str]:
    """The summary table's markdown lines over every paper table with rows at `scale`; links
    to the tables are `link_prefix` + ``<table>.md``. With `provenance`, a second table names,
    for every figure of the first, the runs, seeds, config hash, data fingerprint and commits
    it comes from."""
    specs = table_specs()
    headers = summary_columns()
    lines = _summary_header(scale, headers)
    sources, claim_lines = [], []
    for table in PAPER_TABLES:
        raw = results_dir / "raw" / f"{table}.jsonl"
        if table not in specs or not raw.is_file():
            continue
        spec = specs[table]
        rows = load_rows(results_dir, table)
        headline = spec.get("headline") or {}
        link = f"[{table}]({link_prefix}{table}.md) "
        for experiment in spec.experiments:
            for evaluation in experiment_test_sets(experiment):
                metric = headline.get(evaluation) or spec.metrics[evaluation][0]
                cells = representative_cells(rows, experiment.name, scale, evaluation)
                if not cells:
                    continue
                verdicts = _verdicts_on(spec, rows, experiment.name, scale, results_dir, evaluation)
                plan = seed_plan(spec, experiment.name, scale, {evaluation: cells})
                interim = (
                    f" (interim: {plan.done} of {plan.total} runs in)"
                    if plan and plan.interim and verdicts
                    else ""
                )
                claim_lines += [
                    f"| {link}{experiment.name} | {v.claim} | {v.text} | "
                    f"{_paper_words(spec, v)} | {interval_text(v)} | {v.seeds or '–'} | "
                    f"**{v.verdict}**{interim} |"
                    for v in verdicts
                ]
                sources += [_provenance_line(table, evaluation, cell) for cell in cells.values()]
                lines.append(
                    f"| {link}{experiment.name} | {evaluation} | {metric} | "
                    + _cells_columns(cells, metric, headers)
                    + ((verdicts_by_claim(verdicts) + interim) if verdicts else "–")
                    + " |"
                )
    return (
        lines
        + _claims_section(claim_lines, link_prefix)
        + _sources_section(sources, link_prefix, provenance)
    )


def _summary_header(scale: str, headers: dict[str, str]) -> list[str]:
    """What the summary table shows, and its head (`headers`: `summary_columns`)."""
    return [
        f"Generated by `make results-tables` from `results/raw/*.jsonl` (scale `{scale}`): per "
        "table, the headline metric of each mapping's cell as its table's headline shows it "
        "(mean ± std over its converged seeds, n, or 'k of m converged' where the convergence "
        "check leaves runs out; γ when tuned on validation), "
        "the trivial baselines scored the same way (strongest first), how "
        "many of the cell's runs stopped on their validation loss (early stopping) rather than "
        "at a fixed epoch budget, and each claim's verdict (the table's 'Claims at this "
        "scale').",
        "",
        "| table | test set | metric | baseline | "
        + " | ".join(headers.values())
        + " | other mappings | early-stopped runs | claims |",
        "|---" * (7 + len(headers)) + "|",
    ]


def _verdicts_on(spec, rows, experiment: str, scale: str, results_dir: Path, evaluation: str):
    """The verdicts of the experiment's claims on one evaluation set (`claims.judge_table`)."""
    return [
        verdict
        for claim, verdict in zip(
            table_claims(spec, experiment),
            judge_table(spec, rows, experiment, scale, results_dir),
            strict=True,
        )
        if claim["test"]["evaluation"] == evaluation
    ]


def _cells_columns(cells: dict, metric: str, headers: dict[str, str]) -> str:
    """A summary line's columns from the baselines to the early-stopped runs, each followed by
    its separator: the baselines (strongest first), the mappings of the summary's columns
    (configs/report/summary.yaml), the others, and how many of the mappings' runs stopped
    early."""
    baseline = [c for c in cells.values() if is_baseline(c[0])]
    systems = {m: c for m, c in cells.items() if not is_baseline(c[0])}
    runs = [r for cell in systems.values() for r in cell]
    pool = [r for cell in cells.values() for r in cell]  # the headline's pool
    stopped = sum(stopped_early(r) for r in runs)
    columns = [_cell_text(systems[m], metric, pool) if m in systems else "–" for m in headers]
    # mappings outside the columns (NER's entropy and l2, continuous attention)
    others = "; ".join(
        f"{m} {_cell_text(c, metric, pool)}" for m, c in systems.items() if m not in headers
    )
    # every baseline, strongest first: the one a model must beat (claims.py judges against the
    # best) is the first a reader sees
    baselines = "; ".join(
        f"{cell[0]['mapping'].removeprefix('baseline: ')} {_cell_text(cell, metric, pool)}"
        for cell in sorted(baseline, key=lambda cell: -cell_mean(cell, metric))
    )
    return (
        (baselines or "–")
        + " | "
        + " | ".join(columns)
        + f" | {others or '–'} | {stopped}/{len(runs)} | "
    )


def _claims_section(claim_lines: list[str], link_prefix: str) -> list[str]:
    """The second table: every claim a table tests, with its verdict; the docs' link from
    the page whose links to results/ start with `link_prefix`."""
    guide = posixpath.normpath(f"{link_prefix}../docs/reproduction.md")
    return [
        "",
        "Every claim of `../shared/docs/claims.md` that a table tests, with the paper's words or "
        "numbers, the measured Δ and its 95% interval over seeds (of the comparison that "
        "decides), the converged seeds per arm, and the verdict by the declared rules "
        f"([How to read these tables]({guide}#how-to-read-these-tables)); "
        "'interim' while some cell of the experiment lacks seeds of its table's declared plan:",
        "",
        "| table | claim | what it says | paper | Δ [95% over seeds] | seeds | verdict |",
        "|---|---|---|---|---|---|---|",
        *claim_lines,
    ]


def _sources_section(sources: list[str], link_prefix: str, provenance: bool) -> list[str]:
    """Where each figure comes from (with `provenance`), else a link to where it is said."""
    if not provenance:
        return [
            "",
            "Each figure's runs, seeds, config, data and code: [summary.md]"
            f"({link_prefix}summary.md).",
        ]
    return [
        "",
        "Where each figure comes from (the rows in `results/raw/<table>.jsonl` with these run "
        "ids also record package versions, hardware and date):",
        "",
        "| table | test set | mapping | seeds | runs | config | data fingerprint | commit |",
        "|---|---|---|---|---|---|---|---|",
        *sources,
    ]


def _replace_block(path: Path, start_marker: str, end_marker: str, body: str) -> None:
    """Put `body` between the markers of `path` (the rest untouched); nothing without them.

    Raises
    ------
    ValueError
        one marker without the other, or in the wrong order.
    """
    text = path.read_text(encoding="utf-8")
    if start_marker not in text and end_marker not in text:
        return
    before, start, rest = text.partition(start_marker)
    _, end, after = rest.partition(end_marker)
    if not start or not end:
        raise ValueError(f"{path}: needs both {start_marker} and {end_marker}, in that order")
    write_file(path, f"{before}{start_marker}\n{body}\n{end_marker}{after}")


def compute_costs(results_dir: Path) -> list[TableCost]:
    """The measured CPU-hours of every paper table with rows (`compute.table_cost`)."""
    return [
        table_cost(table, load_rows(results_dir, table), SCALE)
        for table in PAPER_TABLES
        if (results_dir / "raw" / f"{table}.jsonl").is_file()
    ]


def pretrained_lines(results_dir: Path, link_prefix: str) -> list[str]:
    """The pretrained-encoder table's test accuracy per mapping at SCALE (its cells as the
    summary picks them) and its claims' verdicts, for docs/huggingface.md."""
    specs = table_specs()
    raw = results_dir / "raw" / f"{PRETRAINED_TABLE}.jsonl"
    if PRETRAINED_TABLE not in specs or not raw.is_file():
        return [f"No rows yet: `make reproduce-table1-pretrained SCALE={SCALE}` makes them."]
    spec, rows = specs[PRETRAINED_TABLE], load_rows(results_dir, PRETRAINED_TABLE)
    lines = [
        f"Generated by `make results-tables` from [{PRETRAINED_TABLE}.md]"
        f"({link_prefix}{PRETRAINED_TABLE}.md) (scale `{SCALE}`, SNLI test accuracy, mean ± sd "
        "over the converged seeds, as the table's headline):",
        "",
        "| mapping | test accuracy |",
        "|---|---|",
    ]
    for experiment in spec.experiments:
        cells = representative_cells(rows, experiment.name, SCALE, "test")
        pool = [row for cell in cells.values() for row in cell]
        # named as the summary's other mappings: the cell's text carries its tuned γ
        lines += [
            f"| {mapping} | {_cell_text(cell, 'accuracy', pool)} |"
            for mapping, cell in cells.items()
        ]
        verdicts = zip(
            table_claims(spec, experiment.name),
            judge_table(spec, rows, experiment.name, SCALE, results_dir),
            strict=True,
        )
        lines += [
            "",
            "| claim | what it says | Δ [95% over seeds] | verdict |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {v.claim} | {v.text} | {interval_text(v)} | **{v.verdict}** |" for _, v in verdicts
        ]
    return lines


def write_summary(
    results_dir: Path, readme: Path | None, docs: Path | None = None, hf_docs: Path | None = None
) -> Path:
    """Write results_dir/summary.md, and results_dir/compute.md with each table's measured
    CPU-hours (and its one-line form, compute.txt, for `make help`); when `readme` and `docs`
    have their markers, the summary and the CPU-hours go between them (the rest untouched).

    Raises
    ------
    ValueError
        a file has one marker without the other, or in the wrong order.
    """
    path = results_dir / "summary.md"
    lines = summary_lines(results_dir, "")
    write_file(path, "# Results summary\n\n" + "\n".join(lines) + "\n")
    costs = compute_costs(results_dir)
    cost_table = "\n".join(
        [
            "CPU-hours each table took at `SCALE=small`, generated by `make results-tables` "
            "from its rows' wall times (`report/compute.py`: the runs in its current cells, "
            "training and decoding measured, γ grids estimated at the cells' seconds per "
            "epoch; one process on one core of this 2-core machine):",
            "",
            *cost_lines(costs),
        ]
    )
    write_file(results_dir / "compute.md", "# Compute per table\n\n" + cost_table + "\n")
    write_file(results_dir / "compute.txt", help_line(costs) + "\n")
    if readme is not None and readme.is_file():
        prefix = f"{results_dir.resolve().relative_to(readme.parent.resolve()).as_posix()}/"
        body = "\n".join(summary_lines(results_dir, prefix, provenance=False))
        _replace_block(readme, START, END, body)
    if docs is not None and docs.is_file():
        _replace_block(docs, COMPUTE_START, COMPUTE_END, cost_table)
    if hf_docs is not None and hf_docs.is_file():
        prefix = f"{os.path.relpath(results_dir.resolve(), hf_docs.parent.resolve())}/"
        body = "\n".join(pretrained_lines(results_dir, prefix))
        _replace_block(hf_docs, PRETRAINED_START, PRETRAINED_END, body)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--readme",
        type=Path,
        default=REPO_ROOT / "README.md",
        help="the file whose marked block gets the table (default README.md)",
    )
    parser.add_argument(
        "--docs",
        type=Path,
        default=REPO_ROOT / "docs" / "reproduction.md",
        help="the file whose marked block gets the CPU-hours per table",
    )
    parser.add_argument(
        "--hf-docs",
        type=Path,
        default=REPO_ROOT / "docs" / "huggingface.md",
        help="the file whose marked block gets the pretrained-encoder table",
    )
    args = parser.parse_args()
    # a raw file with a bad line ends in one message naming it, never a traceback
    run_main(
        lambda: print(
            f"[summary] {write_summary(args.results_dir, args.readme, args.docs, args.hf_docs)}"
        )
    )


if __name__ == "__main__":
    main()
