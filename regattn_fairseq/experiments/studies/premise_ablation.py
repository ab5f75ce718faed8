"""Does Table 1's classifier read the premise? (issue #24: Table 1's models score below a
classifier that reads only the hypothesis.)

Each trained model of Table 1's current cells is scored on the SNLI test set twice more: as
it is, through the same `fairseq-validate` call that scored its row (a check that this is the
row's model and data), and with the premises permuted across the test pairs, hypotheses and
labels kept, for each of `--permutations` seeded permutations. A model that uses the premise
loses accuracy when it is paired with another pair's premise; one that decides from the
hypothesis alone does not. SNLI writes several hypotheses per premise, so a permutation can
give a pair a premise with the same words: the share of such pairs is reported beside it.

    python -m regattn_fairseq.experiments.studies.premise_ablation [--permutations 2] \\
        [--seeds 1] [--out results/studies/premise_ablation]

appends to premise_ablation.json (every measurement, with the rows' run ids, the
permutations' seeds, the commit and package versions) and writes premise_ablation.md from the
latest run. It needs the checkpoints and
prepared data the rows name (`train.checkpoint`, `task.data=` in `train.overrides`): it runs on
the machine that trained them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from fairseq.data import indexed_dataset

from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_file
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.result_row import ResultRow, train_record
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.decode.decode import validate_accuracy
from regattn_fairseq.experiments.report.claims import cell_mean, representative_cells
from regattn_fairseq.experiments.rows.keys import is_baseline, row_label
from regattn_fairseq.experiments.rows.store import load_rows
from regattn_fairseq.experiments.train.train import TrainedModel

TABLE, EXPERIMENT, EVALUATION, SUBSET, SCALE = "table1", "snli", "test", "test", "small"
PREMISE = "input0"  # the regattn_snli task's first input is the premise


def permute_premises(bin_dir: Path, out_dir: Path, seed: int) -> float:
    """A copy of a prepared SNLI folder whose test premises are permuted across the pairs.

    Parameters
    ----------
    bin_dir : Path
        the prepared data's bin/ (input0 premises, input1 hypotheses, label).
    out_dir : Path
        the copy (created; the other files are copied unchanged).
    seed : int
        the permutation's seed.

    Returns
    -------
    float
        The share of test pairs whose new premise has the same tokens as their own.
    """
    shutil.copytree(bin_dir, out_dir)
    prefix = str(bin_dir / PREMISE / SUBSET)
    premises = indexed_dataset.MMapIndexedDataset(prefix)
    order = np.random.default_rng(seed).permutation(len(premises))
    target = str(out_dir / PREMISE / SUBSET)
    builder = indexed_dataset.MMapIndexedDatasetBuilder(
        indexed_dataset.data_file_path(target), dtype=premises._index.dtype
    )
    same = 0
    for i, j in enumerate(order):
        builder.add_item(premises[int(j)])
        same += bool(torch.equal(premises[i], premises[int(j)]))
    builder.finalize(indexed_dataset.index_file_path(target))
    return same / len(premises)


def _data_root(row: ResultRow) -> Path:
    """The prepared data a row's model was trained on (its `task.data=` override's parent)."""
    for override in train_record(row).get("overrides") or []:
        if override.startswith("task.data="):
            return Path(override.split("=", 1)[1]).parent
    raise ReproError(f"row {row['run_id']}: its training overrides name no task.data")


def measure(rows: list[ResultRow], permutations: int, work: Path) -> list[dict]:
    """Accuracy of each row's model on the test set as it is and with permuted premises.

    Parameters
    ----------
    rows : list of dict
        Table 1 rows (test evaluation) whose checkpoints are on this machine.
    permutations : int
        permutations of the premises (seeds 0 .. permutations - 1).
    work : Path
        a scratch folder (the permuted copies, fairseq-validate's logs).

    Returns
    -------
    list of dict
        One record per row: run_id, mapping (label), seed, row_accuracy (the row's metric),
        accuracy (scored again here), permuted (one accuracy per permutation) and
        same_premise (the share of pairs that kept their premise's words, per permutation).
    """
    records, copies = [], {}
    for row in rows:
        checkpoint = Path(train_record(row)["checkpoint"])
        if not checkpoint.is_file():
            raise ReproError(f"row {row['run_id']}: checkpoint {checkpoint} is not on this machine")
        model = TrainedModel(checkpoint, {}, None, None, None, Path())
        root = _data_root(row)
        logs = work / row["run_id"]
        accuracy, _ = validate_accuracy(model, PreparedData(root, {}), SUBSET, logs)
        permuted, same = [], []
        for seed in range(permutations):
            if (root, seed) not in copies:
                copy = work / f"data-{len(copies)}"
                copies[root, seed] = (copy, permute_premises(root / "bin", copy / "bin", seed))
            copy, share = copies[root, seed]
            value, _ = validate_accuracy(model, PreparedData(copy, {}), SUBSET, logs / str(seed))
            permuted.append(value)
            same.append(share)
        records.append(
            {
                "run_id": row["run_id"],
                "mapping": row_label(row),
                "seed": row["seed"],
                "row_accuracy": row["metrics"]["accuracy"],
                "accuracy": accuracy,
                "permuted": permuted,
                "same_premise": same,
            }
        )
        print(
            f"[premise ablation] {row_label(row)} seed {row['seed']}: {accuracy:.2f} -> "
            f"{', '.join(f'{v:.2f}' for v in permuted)} with permuted premises",
            flush=True,
        )
    return records


def markdown(record: dict) -> str:
    lines = [
        "# Does Table 1's classifier read the premise?",
        "",
        f"Each model of Table 1's current cells (scale `{SCALE}`, SNLI test) scored as it is and "
        f"with the test premises permuted across the pairs (hypotheses and labels kept; "
        f"{len(record['permutation_seeds'])} permutation(s), seeds "
        f"{', '.join(map(str, record['permutation_seeds']))}). Commit "
        f"`{record['provenance']['git_commit'][:12]}`"
        f"{' (dirty)' if record['provenance']['git_dirty'] else ''}, "
        f"{record['provenance']['date'][:10]}; written by "
        "`python -m regattn_fairseq.experiments.studies.premise_ablation`.",
        "",
        "| model | seed | test accuracy | with permuted premises | drop |",
        "|---|---|---|---|---|",
    ]
    for r in record["measurements"]:
        mean = statistics.mean(r["permuted"])
        lines.append(
            f"| {r['mapping']} | {r['seed']} | {r['accuracy']:.2f} | "
            f"{', '.join(f'{v:.2f}' for v in r['permuted'])} | {r['accuracy'] - mean:.2f} |"
        )
    shares = sorted({s for r in record["measurements"] for s in r["same_premise"]})
    lines += [
        "",
        "Baselines on the same test set (results/table1.md): "
        + "; ".join(f"{name} {value:.2f}" for name, value in record["baselines"].items())
        + ".",
        "",
        f"Pairs whose permuted premise has the same words as their own: "
        f"{', '.join(f'{100 * s:.1f}%' for s in shares)} (SNLI has several hypotheses per "
        "premise).",
    ]
    mismatched = [
        r for r in record["measurements"] if abs(r["accuracy"] - r["row_accuracy"]) > 0.01
    ]
    lines += [
        "",
        "Scored again here, every model reproduces its row's test accuracy."
        if not mismatched
        else "**Scored again here, these models do not reproduce their rows' accuracy:** "
        + ", ".join(
            f"{r['mapping']} seed {r['seed']} ({r['row_accuracy']} in its row)" for r in mismatched
        ),
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--permutations", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: every seed")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "studies" / "premise_ablation")
    args = parser.parse_args()
    if args.permutations < 1:
        parser.error("--permutations must be at least 1")
    rows = [dict(r) for r in load_rows(args.results_dir, TABLE)]
    cells = representative_cells(rows, EXPERIMENT, SCALE, EVALUATION)
    baselines = {
        cell[0]["mapping"].removeprefix("baseline: "): cell_mean(cell, "accuracy")
        for cell in cells.values()
        if is_baseline(cell[0])
    }
    models = [
        row
        for cell in cells.values()
        if not is_baseline(cell[0])
        for row in sorted(cell, key=lambda r: r["seed"])
        if args.seeds is None or row["seed"] in args.seeds
    ]
    if not models:
        parser.error(f"no trained Table 1 rows at scale {SCALE} in {args.results_dir}")
    with tempfile.TemporaryDirectory() as tmp:
        measurements = measure(models, args.permutations, Path(tmp))
    record = {
        "provenance": provenance(),
        "permutation_seeds": list(range(args.permutations)),
        "baselines": baselines,
        "measurements": measurements,
    }
    # every run is kept (a later one, after more seeds have landed, is appended); the report
    # shows the latest
    json_path = args.out.with_suffix(".json")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(json_path.read_text()) if json_path.is_file() else {"runs": []}
    history["runs"].append(record)
    write_file(json_path, json.dumps(history, indent=1) + "\n")
    write_file(args.out.with_suffix(".md"), markdown(record))
    print(args.out.with_suffix(".md"))


if __name__ == "__main__":
    main()
