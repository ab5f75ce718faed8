"""Decoding and classifying an evaluation set with a trained model, and measuring its attention."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from regattn.analysis import attention_statistics as statistics_of
from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.paths import USER_DIR
from regattn_fairseq.experiments.core.tools import run_logged, tool_path
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.decode.attention_format import read_export, rows_of_export
from regattn_fairseq.experiments.train.fairseq_logs import last_record_with
from regattn_fairseq.experiments.train.train import TrainedModel, learned_alphas


def decode(
    model: TrainedModel,
    prepared: PreparedData,
    subset: str,
    out_dir: Path,
    decode_cfg: DictConfig,
    remove_bpe: bool,
) -> tuple[list[str], float]:
    """Beam-search the `subset` with fairseq-generate.

    Parameters
    ----------
    model : TrainedModel
        the trained model.
    prepared : PreparedData
        its data.
    subset : str
        the fairseq subset (test, test1, ...).
    out_dir : Path
        where the generate output and log go.
    decode_cfg : DictConfig
        beam and batch_size.
    remove_bpe : bool
        undo subword-nmt's segmentation in the output.

    Returns
    -------
    tuple[list[str], float]
        The hypotheses in corpus order, and the decoding wall time in seconds.

    Raises
    ------
    ReproError
        fairseq-generate is missing or failed, or gave a sentence no hypothesis.
    """
    cmd = [
        tool_path("fairseq-generate"),
        str(prepared.bin_dir),
        "--path",
        str(model.checkpoint),
        "--user-dir",
        str(USER_DIR),
        "--gen-subset",
        subset,
        "--cpu",
        "--beam",
        str(decode_cfg.beam),
        "--batch-size",
        str(decode_cfg.batch_size),
        "--results-path",
        str(out_dir),
        *_EVERY_EXAMPLE,
        *(["--remove-bpe"] if remove_bpe else []),
    ]
    start = time.time()
    run_logged(cmd, out_dir / f"generate-{subset}.log", echo=False)
    elapsed = time.time() - start
    sources, hypotheses = set(), {}
    for line in (out_dir / f"generate-{subset}.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("S-"):
            sources.add(int(line.split("\t", 1)[0][2:]))
        elif line.startswith("H-"):
            key, _score, *text = line.split("\t")
            hypotheses[int(key[2:])] = text[0] if text else ""
    missing = sorted(sources - hypotheses.keys())
    if missing:  # the outputs would no longer line up with the references
        raise ReproError(
            f"fairseq-generate gave no hypothesis for {len(missing)} of the {len(sources)} "
            f"sentences of {subset} (ids {missing[:10]}{' ...' if len(missing) > 10 else ''}): "
            f"see {out_dir / f'generate-{subset}.txt'}"
        )
    return [hypotheses[i] for i in sorted(hypotheses)], elapsed


def validate_accuracy(
    model: TrainedModel, prepared: PreparedData, subset: str, out_dir: Path
) -> tuple[float, float]:
    """Classification accuracy of the checkpoint on `subset` (the task's criterion reports it).

    Parameters
    ----------
    model : TrainedModel
        the trained classifier.
    prepared : PreparedData
        its data.
    subset : str
        the fairseq subset.
    out_dir : Path
        where the log goes.

    Returns
    -------
    tuple[float, float]
        The accuracy (percent) and the wall time in seconds.

    Raises
    ------
    ReproError
        fairseq-validate is missing, failed, or logged no accuracy.
    """
    cmd = [
        tool_path("fairseq-validate"),
        str(prepared.bin_dir),
        "--path",
        str(model.checkpoint),
        "--user-dir",
        str(USER_DIR),
        "--task",
        "regattn_snli",
        "--valid-subset",
        subset,
        "--cpu",
        "--log-format",
        "json",
        "--batch-size",
        "64",
        *_EVERY_EXAMPLE,
    ]
    start = time.time()
    output = run_logged(cmd, out_dir / f"validate-{subset}.log", echo=False)
    elapsed = time.time() - start
    record = last_record_with(output, f"{subset}_accuracy")  # JSON logs prefix the subset
    if record is not None:
        return float(record[f"{subset}_accuracy"]), elapsed
    raise ReproError(
        f"fairseq-validate reported no accuracy (log {out_dir / f'validate-{subset}.log'})"
    )


def export_and_measure_attention(
    model: TrainedModel,
    prepared: PreparedData,
    subset: str,
    out_dir: Path,
    decode_cfg: DictConfig,
    classifier: bool,
) -> dict:
    """Export the model's attention on every example of `subset` and measure it.

    The export is regattn_fairseq.experiments.decode.export_attention (the beam-search output's
    attention, or the SNLI hypothesis' attention over the premise); the measures are
    `regattn.analysis.attention_statistics` (sparsity and structure, exact zeros).

    Parameters
    ----------
    model : TrainedModel
        the trained model.
    prepared : PreparedData
        its data.
    subset : str
        the fairseq subset.
    out_dir : Path
        the export goes to out_dir/attention-<subset>.jsonl.
    decode_cfg : DictConfig
        beam and batch_size.
    classifier : bool
        the model is the SNLI classifier (no beam search).

    Returns
    -------
    dict
        The statistics, with ``"export"`` (the file) and ``"sentences"`` added.

    Raises
    ------
    ReproError
        the export failed (the message names its log).
    """

    export = out_dir / f"attention-{subset}.jsonl"
    task = ["--task", "regattn_snli"] if classifier else ["--beam", str(decode_cfg.beam)]
    cmd = [
        sys.executable,
        "-m",
        "regattn_fairseq.experiments.decode.export_attention",
        str(prepared.bin_dir),
        "--path",
        str(model.checkpoint),
        "--user-dir",
        str(USER_DIR),
        "--gen-subset",
        subset,
        "--cpu",
        "--batch-size",
        str(decode_cfg.batch_size),
        *task,
        "--attention-output",
        str(export),
    ]
    run_logged(cmd, out_dir / f"export-attention-{subset}.log", echo=False)
    records = read_export(export)
    stats = {
        "export": str(export),
        "sentences": len(records),
        **statistics_of(rows_of_export(records)),
        # a learned α per head (E2): what each head learned, for the α figure
        **(learned_alphas(model.checkpoint) or {}),
    }
    print(
        f"[attention] {subset}: {100 * stats['mean_zero_fraction']:.1f}% zeros, support "
        f"{stats['mean_support_size']:.2f}, {stats['mean_runs_per_row']:.2f} runs/row",
        flush=True,
    )
    return stats


# fairseq-fixed 0.12.3.1 silently drops a final batch whose size is not a multiple of
# --required-batch-size-multiple (default 8): 30 test items decode as 24. Evaluation must see
# every example.
_EVERY_EXAMPLE = ("--required-batch-size-multiple", "1")
