"""Score a system's output file on one of the suite's test sets (``scripts/score.py``).

    python scripts/score.py duc2004 HYP.txt
    python scripts/score.py multi30k-test2016 HYP.txt --json scores.json

The output has one line per test item, UTF-8. The metrics are those of the result tables
(`scoring`), printed with their signature. Exit status 2, with a message naming the file and
the line, when the output does not fit the test set.
"""

from __future__ import annotations

import argparse
import codecs
import json
import sys
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_file
from regattn_fairseq.experiments.core.config import resolve_data_dir
from regattn_fairseq.experiments.core.paths import DATA_DIR_ENV, DEFAULT_DATA_DIR
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.test_sets import TEST_SETS, find_test_set, load_gold
from regattn_fairseq.experiments.score import rouge
from regattn_fairseq.experiments.score.metrics import metric as find_metric
from regattn_fairseq.experiments.score.rouge_perl import (
    ROUGE_PERL_ENV,
    RougePerlError,
    find_rouge_perl,
    perl_rouge,
)


class OutputError(ValueError):
    """The system output does not fit the test set (the message names the file and line)."""


def read_output(path: Path, expected: int) -> list[str]:
    """The lines of a system output file, checked against the test set's size.

    Lines end at ``\\n`` only (a trailing ``\\r`` is dropped): other Unicode line breaks inside
    a line must not shift the items. A UTF-8 byte-order mark at the start of the file (as some
    Windows editors write) is dropped: kept, it would be part of the first item and cost it.

    Parameters
    ----------
    path : Path
        the output file.
    expected : int
        the number of items of the test set.

    Returns
    -------
    list of str
        One decoded line per item.

    Raises
    ------
    OutputError
        the file is missing, a line is not valid UTF-8 (the first such line is named) or the
        line count differs from `expected`.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise OutputError(f"{path}: cannot read: {error.strerror}") from None
    raw_lines = data.removeprefix(codecs.BOM_UTF8).split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            lines.append(raw.removesuffix(b"\r").decode("utf-8"))
        except UnicodeDecodeError as error:
            raise OutputError(
                f"{path}:{number}: not valid UTF-8 (byte {error.start + 1} of the line)"
            ) from None
    if len(lines) != expected:
        where = (
            f"line {expected + 1} is one too many"
            if len(lines) > expected
            else f"it ends after line {len(lines)}"
        )
        raise OutputError(
            f"{path}: {len(lines)} lines but the test set has {expected} items ({where})"
        )
    return lines


def score_output(
    name: str,
    outputs: list[str],
    gold: Gold,
    tokenized: bool = False,
    rouge_perl_dir: Path | None = None,
) -> dict:
    """Score aligned outputs against a test set's references.

    Parameters
    ----------
    name : str
        the test set.
    outputs : list of str
        one output per item.
    gold : Gold
        its references (`test_sets.load_gold`).
    tokenized : bool
        the outputs are Moses-tokenised (as fairseq-generate writes them): detokenise them
        before BLEU, as the tables do.
    rouge_perl_dir : Path, optional
        a ROUGE-1.5.5 folder: also score with the official script (cross-check).

    Returns
    -------
    dict
        ``{"metrics", "signature"}``, plus ``"rouge_perl"`` (its scores in the same measure)
        when a Perl folder is given.

    Raises
    ------
    RougePerlError
        the official script failed.
    """
    metric = find_metric(find_test_set(name).metric)
    if metric.name == "bleu" and tokenized:
        outputs = metric.from_decoder(outputs, gold)
    elif metric.name == "exact_match":
        # SIGMORPHON-format rows (lemma, form, tags) are accepted: the form is the prediction.
        outputs = [line.split("\t")[1] if "\t" in line else line for line in outputs]
    elif metric.name == "accuracy":
        outputs = [line.strip() for line in outputs]
    scored = metric.score(outputs, gold)
    result = {"metrics": scored.metrics, "signature": scored.signature}
    if metric.rouge_measure and rouge_perl_dir is not None:
        official = perl_rouge(rouge_perl_dir, outputs, gold.references, gold.truncate_bytes)
        result["rouge_perl"] = {k: round(v[metric.rouge_measure], 2) for k, v in official.items()}
    return result


def _parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {t.name:<20} {t.description}" for t in TEST_SETS.values())
    parser = argparse.ArgumentParser(
        prog="score.py",
        description="Score a system's output (one line per test item, UTF-8) on a test set of the "
        "reproduction suite, with the result tables' metrics and signatures.",
        epilog=f"test sets:\n{listing}\n\nROUGE is ROUGE-1.5.5-compatible (regattn scorer "
        f"v{rouge.SCORER_VERSION}); give --rouge-perl or ${ROUGE_PERL_ENV} to cross-check "
        f"with the official Perl script.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "test_set", choices=list(TEST_SETS), metavar="TEST_SET", help="see the list below"
    )
    parser.add_argument("output", type=Path, help="the system output file")
    parser.add_argument(
        "--data-dir",
        default=None,
        help=f"offline data root (default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--json",
        dest="json_path",
        default=None,
        metavar="PATH",
        help="also write the scores as JSON to PATH ('-': stdout, the text goes to stderr)",
    )
    parser.add_argument(
        "--tokenized",
        action="store_true",
        help="BLEU sets: the output is Moses-tokenised (fairseq-generate); detokenise it first",
    )
    parser.add_argument(
        "--rouge-perl",
        default=None,
        metavar="DIR",
        help=f"ROUGE-1.5.5 folder (ROUGE-1.5.5.pl and data/) for a cross-check "
        f"(default: ${ROUGE_PERL_ENV}; skipped when neither is set)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line entry point.

    Parameters
    ----------
    argv : list of str, optional
        the arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 2 when the output, the data or the Perl cross-check is unusable (the
        message is printed without a traceback).
    """
    args = _parser().parse_args(argv)
    text = sys.stderr if args.json_path == "-" else sys.stdout
    try:
        data_dir = resolve_data_dir(args.data_dir)
        gold = load_gold(find_test_set(args.test_set), data_dir)
        outputs = read_output(args.output, len(gold.references))
        perl_dir = (
            find_rouge_perl(args.rouge_perl)
            if find_metric(find_test_set(args.test_set).metric).rouge_measure
            else None
        )
        result = score_output(args.test_set, outputs, gold, args.tokenized, perl_dir)
    except (OutputError, ReproError, RougePerlError) as error:
        print(f"score.py: error: {error}", file=sys.stderr)
        return 2
    metrics = "  ".join(f"{key} {value}" for key, value in result["metrics"].items())
    print(f"{args.test_set} ({len(outputs)} items, {args.output}): {metrics}", file=text)
    print(f"signature: {result['signature']}", file=text)
    if "rouge_perl" in result:
        official = "  ".join(f"{key} {value}" for key, value in result["rouge_perl"].items())
        print(f"ROUGE-1.5.5.pl ({perl_dir}): {official}", file=text)
    if args.json_path:
        payload = {
            "test_set": args.test_set,
            "output": str(args.output),
            "items": len(outputs),
            "data_dir": str(data_dir),
            "reference_files": gold.files,
            **result,
        }
        serialized = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
        if args.json_path == "-":
            sys.stdout.write(serialized)
        else:
            write_file(Path(args.json_path), serialized)
    return 0
