"""The generated results summary: built from the rows, written to results/summary.md and
between README's markers, nothing else in README touched."""

import json

import pytest

from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.report import summary


def _row(mapping, seed, value, evaluation="test2016", curve=None):
    return {
        "run_id": f"{mapping}{seed}",
        "table": "nmt",
        "experiment": "multi30k_en_de",
        "evaluation": evaluation,
        "scale": "small",
        "data_source": "offline",
        "mapping": mapping,
        "seed": seed,
        "date": f"2026-11-25T00:00:0{seed}",
        "config_sha256": "c",
        "metrics": {"bleu": value},
        "git_commit": "abcdef0123456789",
        "data": {"fingerprint": "f" * 64},
        "train": {
            "config": {"model": {}},
            "learning_curve": curve,
            # a baseline trains nothing: its rows record no training start (rows.baselines)
            "started": {} if mapping.startswith("baseline") else {"git_commit": "0123456789abcdef"},
        },
        **({"baseline": {"name": "copy_source"}} if mapping.startswith("baseline") else {}),
    }


def _results(tmp_path):
    results_dir = tmp_path / "results"
    rows = [
        _row("softmax", 1, 30.0, curve={"stop": "patience"}),
        _row("softmax", 2, 32.0, curve={"stop": "max_epoch"}),
        _row("sparsemax", 1, 29.0),
        _row("baseline: copy source", 0, 0.5),
        _row("baseline: copy target", 0, 0.9),
    ]
    raw = results_dir / "raw" / "nmt.jsonl"
    raw.parent.mkdir(parents=True)
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return results_dir


def test_summary_line_comes_from_the_rows(tmp_path):
    lines = summary.summary_lines(_results(tmp_path), "results/")
    nmt = next(line for line in lines if line.startswith("| [nmt](results/nmt.md)"))
    cells = [c.strip() for c in nmt.split("|")[1:-1]]
    # every baseline, the strongest (the one claims.py judges against) first
    assert cells[3] == "copy target 0.90 (n=1); copy source 0.50 (n=1)"
    # the cells as the table's headline shows them: softmax over its one converged seed (seed 2
    # hit the epoch cap), sparsemax (a fixed budget, none converged) over all its runs, each
    # saying how many converged (before: mean ± std over every seed, 31.00 ± 1.41)
    assert cells[4] == "30.00 (1 of 2 converged)"
    assert cells[5] == "29.00 (0 of 1 converged)"
    assert cells[-2] == "1/3"  # one run of three stopped early
    # a converged cell says only its seeds
    converged = [_row("softmax", 1, 30.0, curve={"stop": "patience"})]
    assert summary._cell_text(converged, "bleu", converged) == "30.00 (n=1)"
    # too few seeds (of mappings with no converged run, or none at all) to judge
    assert cells[-1].startswith("P5: provisional; E1 (2 tests): provisional")
    # 3 of nmt's declared 7 mappings x 5 seeds are in: every verdict of the line is interim
    assert cells[-1].endswith(" (interim: 3 of 35 runs in)")
    p5 = next(
        line for line in lines if line.startswith("| [nmt](results/nmt.md) multi30k_en_de | P5")
    )
    assert p5.endswith("| **provisional** (interim: 3 of 35 runs in) |")


def test_readme_block_is_replaced_and_nothing_else(tmp_path):
    results_dir = _results(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(
        "# t\n\nbefore\n<!-- results-summary:start -->\nold\n<!-- results-summary:end -->\nafter\n"
    )
    summary.write_summary(results_dir, readme)
    text = readme.read_text()
    assert text.startswith("# t\n\nbefore\n<!-- results-summary:start -->\n")
    assert text.endswith("<!-- results-summary:end -->\nafter\n")
    assert "old" not in text and "[nmt](results/nmt.md)" in text
    assert "[nmt](nmt.md)" in (results_dir / "summary.md").read_text()
    # the reading guide's link, from each page's own folder
    guide = "(docs/reproduction.md#how-to-read-these-tables)"
    assert guide in text and f"(../{guide[1:]}" in (results_dir / "summary.md").read_text()
    summary.write_summary(results_dir, readme)  # idempotent
    assert readme.read_text() == text


def test_a_lone_marker_is_an_error(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results-summary:end -->\n<!-- results-summary:start -->\n")
    with pytest.raises(ValueError, match="needs both"):
        summary.write_summary(_results(tmp_path), readme)


def test_every_figure_names_its_runs_config_data_and_code(tmp_path):
    results_dir = _results(tmp_path)
    summary.write_summary(results_dir, None)
    text = (results_dir / "summary.md").read_text()
    line = next(
        x for x in text.splitlines() if x.startswith("| nmt multi30k_en_de | test2016 | softmax")
    )
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[3:] == [
        "1, 2",
        "softmax1, softmax2",
        "c",
        "f" * 12,
        "abcdef0123 (trained 0123456789)",
    ]
    baseline = next(x for x in text.splitlines() if "| baseline: copy source | 0 |" in x)
    assert baseline.endswith("abcdef0123 (a baseline: nothing trained) |")


def test_a_claim_tested_twice_is_one_entry_in_a_rows_verdicts():
    from regattn_fairseq.experiments.report.claims import Verdict, verdicts_by_claim

    verdicts = [
        Verdict("P5", "every mapping within 1 BLEU", "inconclusive", ""),
        Verdict("P8", "fusedmax runs", "reproduced", ""),
        Verdict("P8", "oscarmax clusters", "reproduced", ""),
        Verdict("P9", "a", "reproduced", ""),
        Verdict("P9", "b", "inconclusive", ""),
    ]
    assert verdicts_by_claim(verdicts) == (
        "P5: inconclusive; P8 (2 tests): reproduced; P9 (2 tests): reproduced, inconclusive"
    )
    assert verdicts_by_claim([]) == ""
    # a table's headline shows them in bold
    assert verdicts_by_claim(verdicts[1:3], "**") == "P8 (2 tests): **reproduced**"


def test_the_pretrained_tables_lines_name_a_tuned_gamma_once():
    """docs/huggingface.md's table (`pretrained_lines`) labels each cell by its mapping, and the
    cell's text adds its γ when tuned: sparsemax's γ = 16 row read "sparsemax (γ=16) | 79.93
    (n=1, γ=16)"."""
    lines = summary.pretrained_lines(REPO_ROOT / "results", "../results/")
    cells = [line for line in lines if line.startswith("| ") and "(n=" in line]
    assert any("γ=" in line for line in cells)
    assert all(line.count("γ=") <= 1 for line in cells), cells
