"""Small copies of the official distribution layouts that DATA_SOURCE=local reads (README,
"Data sources"), and of the hub's layouts, for tests.

Each `write_*` puts one dataset's files, in its exact official layout and file format, under
a LOCAL_DATA folder (`write_all`: every one). The text is synthetic, deterministic and tiny:
enough for every preparation step (BPE, dictionaries, fairseq-preprocess) at any scale once
max_train / max_eval cap it. `write_hub_dataset` writes a hub repository's parquet (or JSON
lines) files and `write_hub_archive` a zip of text files under a $REGATTN_HUB_MIRROR folder,
read through the same code as the hub.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "the a man woman child dog cat ball park street house red blue green small big old young "
    "walks runs sits plays holds sees eats reads near under with on in at and"
).split()
GERMAN = "der die das mann frau kind hund katze ball park haus rot blau klein groß alt".split()
ROMANIAN = "un o om femeie copil câine pisică minge parc casă roșu albastru mic mare".split()


def sentences(count: int, seed: int, words=WORDS, length=(4, 9)) -> list[str]:
    """`count` space-separated pseudo-sentences (deterministic for a seed)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(*length))) for _ in range(count)]


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


SNLI_SIZES = {"train": 40, "dev": 12, "test": 12}
SNLI_GOLD = ("entailment", "neutral", "contradiction", "-")


def snli_record(premise: str, hypothesis: str, gold: str, pair_id: str) -> dict:
    """One line of snli_1.0_*.jsonl, with the release's fields."""
    return {
        "annotator_labels": [gold if gold != "-" else "neutral"],
        "captionID": pair_id.split("#")[0],
        "gold_label": gold,
        "pairID": pair_id,
        "sentence1": premise,
        "sentence1_binary_parse": "( " + premise + " )",
        "sentence1_parse": "(ROOT " + premise + ")",
        "sentence2": hypothesis,
        "sentence2_binary_parse": "( " + hypothesis + " )",
        "sentence2_parse": "(ROOT " + hypothesis + ")",
    }


def write_snli(local: Path) -> Path:
    """SNLI 1.0 as snli_1.0.zip unpacks: snli_1.0/snli_1.0_{train,dev,test}.jsonl. Every
    fourth pair has gold_label "-" (no majority label). Capitalised raw text, as released."""
    folder = local / "snli_1.0"
    for index, (split, count) in enumerate(SNLI_SIZES.items()):
        premises = sentences(count, 10 + index)
        hypotheses = sentences(count, 20 + index)
        records = [
            snli_record(
                p.capitalize() + ".", h.capitalize() + ".", SNLI_GOLD[k % 4], f"{k}.jpg#{k}r1e"
            )
            for k, (p, h) in enumerate(zip(premises, hypotheses, strict=True))
        ]
        _write(folder / f"snli_1.0_{split}.jsonl", [json.dumps(r) for r in records])
    return folder


SUMMARY_SIZES = {"train": 60, "valid": 20, "giga": 10, "duc": 8}


def write_sent_summary(local: Path) -> Path:
    """harvardnlp/sent-summary as summary.tar.gz unpacks: sumdata/train/train.{article,title}.txt,
    sumdata/train/valid.{article,title}.filter.txt, sumdata/Giga/input.txt + task1_ref0.txt,
    sumdata/DUC2004/input.txt + task1_ref{0..3}.txt. Lowercased; digits as '#' in Gigaword,
    kept in DUC inputs, as released."""
    folder = local / "sumdata"
    for name, count, seed in (
        ("train", SUMMARY_SIZES["train"], 30),
        ("valid", SUMMARY_SIZES["valid"], 31),
    ):
        suffix = ".filter.txt" if name == "valid" else ".txt"
        articles = [s + " # ##" for s in sentences(count, seed, length=(8, 14))]
        _write(folder / "train" / f"{name}.article{suffix}", articles)
        _write(
            folder / "train" / f"{name}.title{suffix}", sentences(count, seed + 100, length=(3, 6))
        )
    _write(folder / "Giga" / "input.txt", sentences(SUMMARY_SIZES["giga"], 32, length=(8, 14)))
    _write(folder / "Giga" / "task1_ref0.txt", sentences(SUMMARY_SIZES["giga"], 33, length=(3, 6)))
    _write(
        folder / "DUC2004" / "input.txt",
        [s + " in 2004" for s in sentences(SUMMARY_SIZES["duc"], 34, length=(8, 14))],
    )
    for ref in range(4):
        _write(
            folder / "DUC2004" / f"task1_ref{ref}.txt",
            [s.capitalize() for s in sentences(SUMMARY_SIZES["duc"], 40 + ref, length=(4, 8))],
        )
    return folder


TRANSLATION_SIZES = {"train": 60, "valid": 10, "test": 10}


def _bpe_marked(line: str) -> str:
    """Split every word of more than 4 letters with subword-nmt's "@@ " continuation marker, as
    prepare-iwslt14.sh's BPE leaves its output."""
    return " ".join(w[:3] + "@@ " + w[3:] if len(w) > 4 else w for w in line.split())


def write_iwslt14(local: Path) -> Path:
    """IWSLT14 de-en as fairseq's examples/translation/prepare-iwslt14.sh writes it:
    iwslt14.tokenized.de-en/{train,valid,test}.{de,en}, tokenized, lowercased, BPE-segmented."""
    folder = local / "iwslt14.tokenized.de-en"
    for index, (split, count) in enumerate(TRANSLATION_SIZES.items()):
        _write(
            folder / f"{split}.de",
            [_bpe_marked(s + " .") for s in sentences(count, 50 + index, GERMAN)],
        )
        _write(
            folder / f"{split}.en", [_bpe_marked(s + " .") for s in sentences(count, 60 + index)]
        )
    return folder


def write_wmt16(local: Path) -> Path:
    """WMT16 en-ro as plain parallel text: wmt16_en_ro/{train,valid,test}.{en,ro}, raw text."""
    folder = local / "wmt16_en_ro"
    for index, (split, count) in enumerate(TRANSLATION_SIZES.items()):
        _write(
            folder / f"{split}.ro",
            [s.capitalize() + "." for s in sentences(count, 70 + index, ROMANIAN)],
        )
        _write(folder / f"{split}.en", [s.capitalize() + "." for s in sentences(count, 80 + index)])
    return folder


SIGMORPHON_LANGUAGES = {"toy": ("medium", "high"), "other": ("medium",), "lowonly": ("low",)}
# words per language and file: below the tests' caps, so that every word is read
SIGMORPHON_SIZES = {"train": 20, "dev": 4, "test": 4}


def write_sigmorphon(local: Path) -> Path:
    """CoNLL-SIGMORPHON 2018 task 1 as released (github.com/sigmorphon/conll2018):
    conll2018/task1/all/<lang>-train-<setting>, <lang>-dev, <lang>-test (lemma TAB form TAB
    tags). `toy` has medium and high training sets, `other` medium, `lowonly` low only."""
    folder = local / "conll2018" / "task1" / "all"
    for index, (lang, settings) in enumerate(SIGMORPHON_LANGUAGES.items()):
        files = [(f"train-{setting}", SIGMORPHON_SIZES["train"]) for setting in settings]
        files += [(split, SIGMORPHON_SIZES[split]) for split in ("dev", "test")]
        for suffix, count in files:
            lemmas = [w for w in sentences(count, 90 + index, length=(1, 1))]
            lines = [
                f"{lemma}\t{lemma}ed\tV;PST" if k % 2 else f"{lemma}\t{lemma}s\tV;3;SG"
                for k, lemma in enumerate(lemmas)
            ]
            _write(folder / f"{lang}-{suffix}", lines)
    return folder


LAYOUTS = {
    "snli": write_snli,
    "gigaword_duc": write_sent_summary,
    "iwslt14": write_iwslt14,
    "wmt16_roen": write_wmt16,
    "sigmorphon": write_sigmorphon,
}


def write_all(local: Path) -> Path:
    """Every official layout under `local` (a LOCAL_DATA folder)."""
    for write in LAYOUTS.values():
        write(local)
    return local


def write_hub_dataset(mirror: Path, hf_id: str, files: dict[str, dict[str, list]]) -> Path:
    """A hub dataset repository's data files under a $REGATTN_HUB_MIRROR folder: parquet, or
    JSON lines for a path ending in ``.jsonl``.

    Parameters
    ----------
    mirror : Path
        the mirror folder.
    hf_id : str
        the repository (``owner/name``): its files go to mirror/owner/name/.
    files : dict
        path in the repository (e.g. ``"plain_text/train-00000-of-00001.parquet"``) -> the
        table's columns (name -> values).

    Returns
    -------
    Path
        The repository's folder.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = mirror / hf_id
    for relative, columns in files.items():
        path = repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".jsonl":
            rows = (
                dict(zip(columns, values, strict=True))
                for values in zip(*columns.values(), strict=True)
            )
            path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        else:
            pq.write_table(pa.table(columns), path)
    return repo


def snli_hub_columns(count: int, seed: int) -> dict[str, list]:
    """stanfordnlp/snli's columns (premise, hypothesis, label 0/1/2, -1 for no gold label)."""
    return {
        "premise": [s.capitalize() + "." for s in sentences(count, seed)],
        "hypothesis": [s.capitalize() + "." for s in sentences(count, seed + 1)],
        "label": [(k % 4) - 1 for k in range(count)],
    }


def write_hub_archive(
    mirror: Path, hf_id: str, archive: str, members: dict[str, list[str] | bytes]
) -> Path:
    """A zip archive of text files in a hub dataset repository under a $REGATTN_HUB_MIRROR
    folder (as Harvard/gigaword's data/ggw_data.zip), beside a loading script that must never
    run (importing it raises).

    Parameters
    ----------
    mirror : Path
        the mirror folder.
    hf_id : str
        the repository (``owner/name``).
    archive : str
        the archive's path in the repository.
    members : dict
        member name in the archive -> its lines (written with ``\\n`` ends), or its bytes.

    Returns
    -------
    Path
        The archive.
    """
    import zipfile

    repo = mirror / hf_id
    path = repo / archive
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        for name, lines in members.items():
            text = lines if isinstance(lines, bytes) else "".join(line + "\n" for line in lines)
            handle.writestr(name, text)
    script = repo / f"{hf_id.split('/')[1]}.py"
    script.write_text('raise RuntimeError("the loading script was run")\n', encoding="utf-8")
    return path


def gigaword_org_data(sizes: dict[str, int]) -> dict[str, list[str]]:
    """Harvard/gigaword's org_data/{train,dev,test}.{src,tgt}.txt (the members of
    data/ggw_data.zip that its gigaword.py reads), `sizes` pairs per split (train, dev, test).
    Every third line holds ``<unk>`` (the script turns it into UNK in train and dev only), and
    every fifth ends in a space and a carriage return (the script strips each line)."""

    def mark(lines: list[str]) -> list[str]:
        lines = [f"{s} <unk> ." if i % 3 == 0 else s for i, s in enumerate(lines)]
        return [f"{s} \r" if i % 5 == 0 else s for i, s in enumerate(lines)]

    members = {}
    for index, (split, count) in enumerate(sizes.items()):
        members[f"org_data/{split}.src.txt"] = mark(sentences(count, 60 + index, length=(8, 14)))
        members[f"org_data/{split}.tgt.txt"] = mark(sentences(count, 70 + index, length=(3, 6)))
    return members


def gigaword_hub_pairs(members: dict[str, list[str]], split: str) -> dict[str, list[str]]:
    """The hub dataset's rows (document, summary) of `split` (train, validation, test) of
    `gigaword_org_data` members, stated as gigaword.py states them: lines stripped, ``<unk>``
    replaced by UNK in train and validation."""
    name = {"validation": "dev"}.get(split, split)
    rows = {}
    for column, side in (("document", "src"), ("summary", "tgt")):
        lines = [line.strip() for line in members[f"org_data/{name}.{side}.txt"]]
        rows[column] = (
            [line.replace("<unk>", "UNK") for line in lines] if split != "test" else lines
        )
    return rows


def translation_hub_columns(count: int, seed: int, languages: tuple[str, str]) -> dict[str, list]:
    """The column `translation` ({language: sentence}) of wmt/wmt16 and IWSLT/iwslt2017; each
    language has words of its own (en, de, ro)."""
    words = {"en": WORDS, "de": GERMAN, "ro": ROMANIAN}
    sides = [sentences(count, seed + k, words[language]) for k, language in enumerate(languages)]
    return {
        "translation": [
            dict(zip(languages, pair, strict=True)) for pair in zip(*sides, strict=True)
        ]
    }


# tomaarsen/conll2002's ner_tags ClassLabel: index -> name (its card's dataset_info)
CONLL2002_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")


def conll2002_hub_columns(count: int, seed: int, empty_last: bool = False) -> dict[str, list]:
    """tomaarsen/conll2002's columns (id, tokens, ner_tags as ClassLabel ints, pos_tags):
    sentences whose words alternate O and two-word entities of each type, in IOB2;
    `empty_last` adds the loading script's trailing empty sentence."""
    words = [s.split() for s in sentences(count, seed)]
    tags = []
    for k, sentence in enumerate(words):
        begin = 1 + 2 * (k % 4)  # B-PER, B-ORG, B-LOC, B-MISC in turn
        tags.append([begin if j == 1 else begin + 1 if j == 2 else 0 for j in range(len(sentence))])
    if empty_last:
        words.append([])
        tags.append([])
    return {
        "id": [str(k) for k in range(len(words))],
        "tokens": words,
        "pos_tags": [[0] * len(sentence) for sentence in words],
        "ner_tags": tags,
    }
