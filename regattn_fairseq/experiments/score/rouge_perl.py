"""Optional cross-check: run the official ROUGE-1.5.5 Perl script on the same summaries.

The project never needs the script (`rouge` reproduces it); a user who has a copy can compare
with it (``scripts/score.py --rouge-perl DIR`` or ``$REGATTN_ROUGE_PERL``). DIR is the folder
holding ``ROUGE-1.5.5.pl`` and its ``data/`` folder. The script needs Perl with XML::DOM
(Debian: libxml-dom-perl) and DB_File. Its shipped ``WordNet-2.0.exc.db`` is a Berkeley DB 1.85
file that current DB_File cannot open, so a fresh one is built in a temporary folder from the
copy's own ``data/WordNet-2.0-Exceptions/*.exc``, merged in alphabetical order as the shipped
database was (best -> well).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

ROUGE_PERL_ENV = "REGATTN_ROUGE_PERL"
_TYPES = {"ROUGE-1": "rouge1", "ROUGE-2": "rouge2", "ROUGE-L": "rougeL"}
_AVERAGE = re.compile(r"^\S+ (ROUGE-[12L]) Average_([RPF]): ([0-9.]+)", re.MULTILINE)
_MEASURE = {"R": "recall", "P": "precision", "F": "fmeasure"}
# Builds the exception DB from .exc files given in order (later entries replace earlier ones).
_BUILD_DB = (
    "use DB_File; my $db = shift @ARGV; tie my %h, 'DB_File', $db, O_CREAT|O_RDWR, 0640, $DB_HASH"
    " or die qq(cannot create $db); while (<>) { my @f = split; $h{$f[0]} = $f[1] if @f >= 2 }"
    " untie %h;"
)


class RougePerlError(RuntimeError):
    """The Perl script is absent, incomplete or failed (the message says which)."""


def find_rouge_perl(path: str | os.PathLike | None = None) -> Path | None:
    """The ROUGE-1.5.5 folder to cross-check with, if the user named one.

    Parameters
    ----------
    path : str or PathLike, optional
        the folder (or the ``ROUGE-1.5.5.pl`` file in it); else ``$REGATTN_ROUGE_PERL``.

    Returns
    -------
    Path or None
        The folder, or None when neither names one.

    Raises
    ------
    RougePerlError
        the named place has no ``ROUGE-1.5.5.pl`` or no ``data/WordNet-2.0-Exceptions``.
    """
    chosen = path or os.environ.get(ROUGE_PERL_ENV)
    if not chosen:
        return None
    folder = Path(chosen).expanduser().resolve()
    if folder.is_file():
        folder = folder.parent
    for needed in ("ROUGE-1.5.5.pl", "data/WordNet-2.0-Exceptions", "data/smart_common_words.txt"):
        if not (folder / needed).exists():
            raise RougePerlError(
                f"{folder} has no {needed}: point --rouge-perl / ${ROUGE_PERL_ENV} "
                f"at the ROUGE-1.5.5 folder"
            )
    return folder


def _run(command: list[str], what: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError as error:
        raise RougePerlError(f"{what}: {error}") from None
    if done.returncode != 0:
        raise RougePerlError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def perl_rouge(
    folder: Path, hypotheses: list[str], references: list[list[str]], truncate: int | None = None
) -> dict[str, dict[str, float]]:
    """Score with the official script: ``-m -n 2 -w 1.2 [-b N] -a``, one SPL file per summary.

    Parameters
    ----------
    folder : Path
        the ROUGE-1.5.5 folder (`find_rouge_perl`).
    hypotheses : list of str
        one system summary per item.
    references : list of list of str
        every reference of each item.
    truncate : int, optional
        the byte limit (``-b``).

    Returns
    -------
    dict
        ``rouge1``, ``rouge2``, ``rougeL`` -> {"recall", "precision", "fmeasure"}: the script's
        Average_R/P/F, in percent.

    Raises
    ------
    RougePerlError
        Perl or one of its modules is missing, or the script failed.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} outputs but {len(references)} references")
    with tempfile.TemporaryDirectory(prefix="regattn-rouge-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        shutil.copy(folder / "data" / "smart_common_words.txt", data)
        exception_files = sorted(
            str(p) for p in (folder / "data" / "WordNet-2.0-Exceptions").glob("*.exc")
        )
        _run(
            ["perl", "-e", _BUILD_DB, str(data / "WordNet-2.0.exc.db"), *exception_files],
            "building the WordNet exception DB",
        )
        lines = []
        for index, (hypothesis, item_refs) in enumerate(zip(hypotheses, references, strict=True)):
            paths = [work / f"{index}.sys"] + [
                work / f"{index}.ref{k}" for k in range(len(item_refs))
            ]
            for path, text in zip(paths, [hypothesis, *item_refs], strict=True):
                path.write_text(text + "\n", encoding="utf-8")
            lines.append(" ".join(str(p) for p in paths))
        file_list = work / "files.txt"
        file_list.write_text("\n".join(lines) + "\n", encoding="utf-8")
        limit = ["-b", str(truncate)] if truncate else []
        output = _run(
            [
                "perl",
                str(folder / "ROUGE-1.5.5.pl"),
                "-e",
                str(data),
                "-m",
                "-n",
                "2",
                "-w",
                "1.2",
                *limit,
                "-a",
                "-z",
                "SPL",
                str(file_list),
                "system",
            ],
            "ROUGE-1.5.5.pl",
        )
    scores: dict[str, dict[str, float]] = {}
    for name, letter, value in _AVERAGE.findall(output):
        scores.setdefault(_TYPES[name], {})[_MEASURE[letter]] = 100 * float(value)
    if set(scores) != set(_TYPES.values()):
        raise RougePerlError(f"ROUGE-1.5.5.pl printed no ROUGE-1/2/L averages:\n{output[-2000:]}")
    return scores
