"""Where the data comes from (issue #16): the user's own full copies in their official layouts
(DATA_SOURCE=local), the hub in a no-script form (parquet, JSON lines through
`datasets.load_dataset`; text files in a zip archive through `huggingface_hub.hf_hub_download`)
(a local folder in the hub's layout stands in for the hub: $REGATTN_HUB_MIRROR, the same code),
and a fresh machine without the offline copies (the hub stands in for them). Nothing here
touches the network: HF_HUB_OFFLINE=1 throughout."""

import json
import os
import re
import subprocess
import sys
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import children
import pytest
from local_layouts import (
    CONLL2002_TAGS,
    GERMAN,
    SIGMORPHON_SIZES,
    SUMMARY_SIZES,
    TRANSLATION_SIZES,
    conll2002_hub_columns,
    gigaword_hub_pairs,
    gigaword_org_data,
    sentences,
    snli_hub_columns,
    translation_hub_columns,
    write_all,
    write_hub_archive,
    write_hub_dataset,
    write_iwslt14,
    write_sent_summary,
    write_sigmorphon,
    write_snli,
    write_wmt16,
)

from regattn_checkout.errors import ReproError
from regattn_checkout.files import sha256_file
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.config import group_options, load_config
from regattn_fairseq.experiments.core.paths import HUB_MIRROR_ENV, LOCAL_DATA_ENV
from regattn_fairseq.experiments.data.builders.snli import read_snli_jsonl
from regattn_fairseq.experiments.data.prepare import describe_sources, prepare
from regattn_fairseq.experiments.data.sources import (
    WHOLE_SPLITS,
    Inputs,
    hub_split_pattern,
    stand_in_sample,
)

CAPS = {"max_train": 24, "max_eval": 5}


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    """No hub access in these tests: offline mode, and no mirror or LOCAL_DATA from outside."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv(HUB_MIRROR_ENV, raising=False)
    monkeypatch.delenv(LOCAL_DATA_ENV, raising=False)


def lines(path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def prepare_local(dataset, tmp_path, **overrides):
    """`dataset` at SCALE=paper from its official layout, capped; no offline data at all."""
    local = tmp_path / "local"
    if not local.exists():
        write_all(local)
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    return prepare(
        dataset,
        "paper",
        data_dir=empty,
        source="local",
        local_dir=local,
        work_dir=tmp_path / "work",
        overrides={**CAPS, **overrides},
    )


def check_local_manifest(prepared, tmp_path):
    assert prepared.manifest["source"] == "local"
    assert prepared.root.name.startswith("paper-local")
    inputs = prepared.manifest["inputs"]
    assert inputs and all(name.startswith("local:") for name in inputs)
    stamp = json.loads((prepared.root / "stamp.json").read_text())
    assert stamp["local_dir"] == str((tmp_path / "local").resolve())


# --- DATA_SOURCE=local: every official layout, at SCALE=paper with capped sizes ---------------


@pytest.mark.slow  # three fairseq-preprocess runs: about a minute on 2 busy cores
def test_local_snli_1_0_jsonl(tmp_path):
    prepared = prepare_local("snli", tmp_path)
    check_local_manifest(prepared, tmp_path)
    assert set(prepared.manifest["inputs"]) == {
        f"local:snli_1.0/snli_1.0_{split}.jsonl" for split in ("train", "dev", "test")
    }
    labels = lines(prepared.root / "bin" / "label" / "train.label")
    # pairs with gold_label "-" are dropped before the cap: 24 labelled pairs remain
    assert len(labels) == CAPS["max_train"] and "-" not in labels
    assert set(labels) == {"entailment", "neutral", "contradiction"}
    assert len(lines(prepared.root / "bin" / "label" / "test.label")) == CAPS["max_eval"]
    # raw text is Moses-tokenized: the final period is a token of its own
    assert lines(prepared.root / "raw" / "train.premise")[0].endswith(" .")
    assert (prepared.root / "bin" / "input0" / "train.bin").is_file()


def test_local_sent_summary(tmp_path):
    prepared = prepare_local("gigaword_duc", tmp_path, n_valid=6)
    check_local_manifest(prepared, tmp_path)
    assert set(prepared.manifest["evaluations"]) == {"gigaword", "duc2004"}
    assert len(prepared.evaluation("duc2004")["refs"]) == 4
    assert prepared.evaluation("duc2004")["truncate_bytes"] == 75
    # validation: the first n_valid pairs of the distribution's own validation split
    local = tmp_path / "local" / "sumdata" / "train"
    assert (
        lines(prepared.root / "raw" / "valid.article")
        == lines(local / "valid.article.filter.txt")[:5]
    )
    assert lines(prepared.root / "raw" / "train.article") == lines(local / "train.article.txt")[:24]
    # DUC inputs get Gigaword's digit convention; the articles as distributed are kept beside
    # them for DUC's own lead baseline, Gigaword's (read as distributed) need no copy
    masked = lines(prepared.root / "raw" / "duc2004.article")
    assert all("####" in line for line in masked)
    kept = prepared.root / "raw" / prepared.evaluation("duc2004")["digits_kept_articles"]
    assert ["".join("#" if c.isdigit() else c for c in line) for line in lines(kept)] == masked
    assert any(c.isdigit() for c in "".join(lines(kept)))
    assert "digits_kept_articles" not in prepared.evaluation("gigaword")
    assert (prepared.root / "bin" / "test1.article-title.article.bin").is_file()


def test_local_fairseq_iwslt14(tmp_path):
    prepared = prepare_local("iwslt14", tmp_path)
    check_local_manifest(prepared, tmp_path)
    # the distribution's BPE is undone before the suite's own: no word is split as it was
    raw_train = (tmp_path / "local" / "iwslt14.tokenized.de-en" / "train.en").read_text()
    assert "@@ " in raw_train
    [refs] = prepared.evaluation("test")["refs"]
    references = lines(refs)
    assert len(references) == CAPS["max_eval"]
    assert not any("@@" in line for line in references)
    expected = [
        line.replace("@@ ", "")
        for line in lines(tmp_path / "local" / "iwslt14.tokenized.de-en" / "test.en")
    ][: CAPS["max_eval"]]
    # references are detokenized (sacrebleu tokenizes itself): "word ." -> "word."
    assert references == [line[:-2] + "." for line in expected]
    assert (prepared.root / "bin" / "train.de-en.de.bin").is_file()


def test_local_wmt16_plain_text(tmp_path):
    prepared = prepare_local("wmt16_roen", tmp_path)
    check_local_manifest(prepared, tmp_path)
    assert set(prepared.manifest["evaluations"]) == {"newstest2016"}
    [refs] = prepared.evaluation("newstest2016")["refs"]
    assert lines(refs) == lines(tmp_path / "local" / "wmt16_en_ro" / "test.en")[:5]
    assert len(lines(prepared.root / "raw" / "train.ro")) == CAPS["max_train"]


def test_local_sigmorphon_release(tmp_path):
    prepared = prepare_local("sigmorphon", tmp_path)
    check_local_manifest(prepared, tmp_path)
    # languages: those with training data for the setting (medium); lowonly has none
    tests = SIGMORPHON_SIZES["test"]
    assert lines(prepared.root / "refs" / "test.languages") == ["other"] * tests + ["toy"] * tests
    assert len(lines(prepared.root / "raw" / "train.src")) == 2 * SIGMORPHON_SIZES["train"]
    high = prepare_local("sigmorphon", tmp_path, setting="high")
    assert lines(high.root / "refs" / "test.languages") == ["toy"] * tests
    (tmp_path / "local" / "conll2018" / "task1" / "all" / "toy-train-high").unlink()
    with pytest.raises(ReproError, match="sigmorphon: no language has train-high data"):
        prepare_local("sigmorphon", tmp_path, setting="high")


def test_local_layout_file_is_reread_into_the_stamp(tmp_path, capsys):
    first = prepare_local("wmt16_roen", tmp_path)
    capsys.readouterr()
    again = prepare_local("wmt16_roen", tmp_path)
    assert "is up to date" in capsys.readouterr().out and again.manifest == first.manifest
    test_en = tmp_path / "local" / "wmt16_en_ro" / "test.en"
    test_en.write_text("A changed first line.\n" + test_en.read_text().split("\n", 1)[1])
    prepare_local("wmt16_roen", tmp_path)
    assert "input changed: local:wmt16_en_ro/test.en" in capsys.readouterr().out


# --- local layouts: missing files and malformed lines name the file and the line ------------


def test_local_needs_a_folder(tmp_path):
    with pytest.raises(ReproError, match="LOCAL_DATA=<dir>"):
        prepare("snli", "paper", data_dir=tmp_path, source="local", work_dir=tmp_path)


def test_local_missing_file_is_named(tmp_path):
    local = tmp_path / "local"
    write_snli(local)
    (local / "snli_1.0" / "snli_1.0_dev.jsonl").unlink()
    with pytest.raises(ReproError, match=r"missing .*snli_1\.0/snli_1\.0_dev\.jsonl"):
        prepare_local("snli", tmp_path)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not a JSON object"),
        ('["a list"]', "not a JSON object"),
        ('{"sentence1": "A dog.", "gold_label": "neutral"}', "no string field .'sentence2'."),
        ('{"sentence1": "A.", "sentence2": "B.", "gold_label": "maybe"}', "gold_label 'maybe'"),
    ],
)
def test_snli_malformed_line_names_file_and_line(tmp_path, line, problem):
    folder = write_snli(tmp_path)
    path = folder / "snli_1.0_dev.jsonl"
    rows = lines(path)
    path.write_text("\n".join([*rows[:3], line, *rows[3:]]) + "\n")
    with pytest.raises(ReproError, match=rf"snli_1\.0_dev\.jsonl, line 4: {problem}"):
        read_snli_jsonl(path)


def test_parallel_files_of_unequal_length_name_the_line(tmp_path):
    local = tmp_path / "local"
    write_wmt16(local)
    valid_ro = local / "wmt16_en_ro" / "valid.ro"
    valid_ro.write_text("".join(line + "\n" for line in lines(valid_ro)[:-1]))
    count = TRANSLATION_SIZES["valid"]
    with pytest.raises(
        ReproError,
        match=rf"valid\.ro ends at line {count - 1} but .*valid\.en has {count} lines "
        rf"\(line {count} has no counterpart\)",
    ):
        prepare_local("wmt16_roen", tmp_path)


def test_sent_summary_reference_of_unequal_length(tmp_path):
    local = tmp_path / "local"
    write_sent_summary(local)
    ref = local / "sumdata" / "DUC2004" / "task1_ref2.txt"
    ref.write_text(ref.read_text() + "one more line\n")
    with pytest.raises(ReproError, match=rf"input\.txt ends at line {SUMMARY_SIZES['duc']}"):
        prepare_local("gigaword_duc", tmp_path, n_valid=6)


def test_sigmorphon_malformed_line_names_file_and_line(tmp_path):
    local = tmp_path / "local"
    write_sigmorphon(local)
    dev = local / "conll2018" / "task1" / "all" / "toy-dev"
    rows = lines(dev)
    dev.write_text("\n".join([*rows[:1], "walk\twalked", *rows[1:]]) + "\n")
    with pytest.raises(ReproError, match=r"toy-dev, line 2: expected lemma<TAB>form<TAB>tags"):
        prepare_local("sigmorphon", tmp_path)


def test_text_that_is_not_utf8_names_file_and_line(tmp_path):
    local = tmp_path / "local"
    write_iwslt14(local)
    train_de = local / "iwslt14.tokenized.de-en" / "train.de"
    train_de.write_bytes(train_de.read_bytes().replace(b"\n", b"\n\xff\xfe\n", 1))
    with pytest.raises(ReproError, match=r"train\.de, line 2: not UTF-8 text"):
        prepare_local("iwslt14", tmp_path)


# --- the hub in a no-script form (a local folder in the hub's layout stands in for it) -------


# The data files of each configured hub source (configs/prepare/*.yaml, `online:`) read
# through `datasets.load_dataset`, at its pinned revision, by hub split, as confirmed on the hub
# (the yaml comments say where and when).
HUB_FILES = {
    "snli": {
        "plain_text/train-00000-of-00001.parquet": "train",
        "plain_text/validation-00000-of-00001.parquet": "validation",
        "plain_text/test-00000-of-00001.parquet": "test",
    },
    "multi30k": {"train.jsonl": "train", "val.jsonl": "validation", "test.jsonl": "test"},
    "iwslt14": {
        f"iwslt2017-de-en/{split}/0000.parquet": split for split in ("train", "validation", "test")
    },
    "wmt16_roen": {
        f"ro-en/{split}-00000-of-00001.parquet": split for split in ("train", "validation", "test")
    },
    "conll2002": {
        f"{config}/{split}/0000.parquet": split
        for config in ("es", "nl")
        for split in ("train", "validation", "test")
    },
}
# the keys of the hub's `translation` column (iwslt2017-de-en, wmt16 ro-en)
HUB_TRANSLATION_LANGUAGES = {"iwslt14": ("de", "en"), "wmt16_roen": ("ro", "en")}
# The hub sources read as text files in a zip archive of the repository: the archive's path
# and its members, as confirmed on the hub (gigaword_duc.yaml says where and when).
HUB_ARCHIVES = {"gigaword_duc": "data/ggw_data.zip"}
GIGAWORD_MEMBERS = {
    split: {side: f"org_data/{name}.{side}.txt" for side in ("src", "tgt")}
    for split, name in (("train", "train"), ("validation", "dev"), ("test", "test"))
}
HUB_SOURCES = sorted({*HUB_FILES, *HUB_ARCHIVES})
# rows per hub split: a pattern that picks another split's file reads another number of rows
HUB_SPLIT_ROWS = {"train": 12, "validation": 5, "test": 7}


def hub_rows(dataset: str, split: str, path: str = "") -> dict[str, list]:
    """Rows of `dataset`'s hub split (its file `path`) in the hub's schema."""
    count, seed = HUB_SPLIT_ROWS[split], 10 * list(HUB_SPLIT_ROWS).index(split)
    if dataset == "conll2002":  # other sentences for each config, so that es and nl differ
        return conll2002_hub_columns(count, seed + 5 * path.startswith("nl/"))
    if dataset == "snli":
        return snli_hub_columns(count, seed)
    if dataset == "multi30k":
        return {"en": sentences(count, seed), "de": sentences(count, seed + 1, GERMAN)}
    return translation_hub_columns(count, seed, HUB_TRANSLATION_LANGUAGES[dataset])


def expected_fields(spec, rows: dict[str, list]) -> dict[str, list]:
    """The builder's fields from hub rows, stated apart from `online.columns`: translation
    src/tgt in the spec's languages, summarization article/title = document/summary, SNLI
    pairs with a gold label."""
    if spec.kind == "translation":
        pairs = rows.get("translation") or [
            dict(zip(rows, v, strict=True)) for v in zip(*rows.values(), strict=True)
        ]
        return {"src": [p[spec.src] for p in pairs], "tgt": [p[spec.tgt] for p in pairs]}
    if spec.kind == "summarization":
        return {"article": rows["document"], "title": rows["summary"]}
    if spec.kind == "ner":
        tags = [[CONLL2002_TAGS[i] for i in sentence] for sentence in rows["ner_tags"]]
        return {"words": rows["tokens"], "tags": tags}
    gold = [i for i, label in enumerate(rows["label"]) if label != -1]
    return {name: [rows[name][i] for i in gold] for name in ("premise", "hypothesis", "label")}


def test_every_hub_source_has_a_layout_here():
    configured = {
        name for name in group_options("prepare") if load_config("prepare", name).get("online")
    }
    assert configured == set(HUB_SOURCES)
    for dataset in HUB_SOURCES:
        assert load_config("prepare", dataset).online.get("archive") == HUB_ARCHIVES.get(dataset)


@pytest.mark.parametrize("dataset", HUB_SOURCES)
def test_hub_sources_are_pinned_to_a_commit(dataset):
    revision = load_config("prepare", dataset).online.revision
    assert re.fullmatch(r"[0-9a-f]{40}", revision), (dataset, revision)


@pytest.mark.parametrize("dataset", sorted(HUB_FILES))
def test_hub_source_loads_from_a_copy_of_its_layout(dataset, tmp_path, monkeypatch):
    """Every split pattern of the spec (DATA_SOURCE=online and the stand-in) picks the one file
    of its split in the hub's layout, read through `datasets.load_dataset` and mapped to the
    builder's fields."""
    spec = load_config("prepare", dataset)
    files = {path: hub_rows(dataset, split, path) for path, split in HUB_FILES[dataset].items()}
    write_hub_dataset(tmp_path / "mirror", spec.online.hf_id, files)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(tmp_path / "mirror"))
    inputs = Inputs(tmp_path, "online", spec)
    splits = {**(spec.online.get("splits") or {}), **(spec.online.get("stand_in") or {})}
    assert splits
    for split, pattern in splits.items():
        [rows] = [rows for path, rows in files.items() if fnmatch(path, pattern)]
        assert inputs.hub_columns(split) == expected_fields(spec, rows), split
        assert f"online:{spec.online.hf_id}@{spec.online.revision}/{pattern}" in inputs.files


def test_a_revision_with_a_loading_script_is_refused_by_name(tmp_path, monkeypatch):
    """A copy that holds a loading script (as the main branches of IWSLT/iwslt2017 and
    Harvard/gigaword do) is refused with one error naming the dataset and DATA_SOURCE=local,
    not a traceback."""
    spec = load_config("prepare", "wmt16_roen")
    repo = write_hub_dataset(
        tmp_path / "mirror",
        "wmt/wmt16",
        {"ro-en/train-00000-of-00001.parquet": hub_rows("wmt16_roen", "train")},
    )
    (repo / "wmt16.py").write_text("import datasets\n")
    monkeypatch.setenv(HUB_MIRROR_ENV, str(tmp_path / "mirror"))
    with pytest.raises(
        ReproError,
        match=r"wmt16_roen: could not load ro-en/train-\*\.parquet of the hub dataset .*"
        r"\(RuntimeError: Dataset scripts are no longer supported, but found wmt16\.py\)\. "
        r"Without the hub: DATA_SOURCE=local",
    ):
        Inputs(tmp_path, "online", spec).hub_columns("train")


def snli_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    write_hub_dataset(
        mirror,
        "stanfordnlp/snli",
        {
            "plain_text/train-00000-of-00001.parquet": snli_hub_columns(80, 1),
            "plain_text/validation-00000-of-00001.parquet": snli_hub_columns(16, 3),
            "plain_text/test-00000-of-00001.parquet": snli_hub_columns(16, 5),
        },
    )
    return mirror


GIGAWORD_SIZES = {"train": 60, "dev": 8, "test": 9}


def gigaword_mirror(tmp_path, members=None):
    """A copy of Harvard/gigaword at its pinned commit in the confirmed layout: gigaword.py
    (which must never run) and data/ggw_data.zip holding org_data/{train,dev,test}.{src,tgt}.txt
    (`GIGAWORD_SIZES` pairs)."""
    mirror = tmp_path / "mirror"
    write_hub_archive(
        mirror,
        "Harvard/gigaword",
        HUB_ARCHIVES["gigaword_duc"],
        gigaword_org_data(GIGAWORD_SIZES) if members is None else members,
    )
    return mirror


def test_hub_archive_source_reads_each_split_of_a_copy_of_its_layout(tmp_path, monkeypatch):
    """Gigaword's no-script form: every hub split of the archive (train, validation, test),
    through the same code as the hub, the lines stripped and <unk> made UNK in train and
    validation only, as gigaword.py does; gigaword.py itself is never run (it raises)."""
    members = gigaword_org_data(GIGAWORD_SIZES)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(gigaword_mirror(tmp_path, members)))
    spec = load_config("prepare", "gigaword_duc")
    assert {
        split: dict(zip(("src", "tgt"), files.values(), strict=True))
        for split, files in spec.online.members.items()
    } == GIGAWORD_MEMBERS
    # every hub split, read as a builder split would be (validation has no builder split)
    spec.online.splits = {"train": "train", "valid": "validation"}
    inputs = Inputs(tmp_path, "online", spec)
    archive = tmp_path / "mirror" / "Harvard" / "gigaword" / "data" / "ggw_data.zip"
    for split, hub_split in (("train", "train"), ("valid", "validation"), ("gigaword", "test")):
        rows = gigaword_hub_pairs(members, hub_split)
        assert inputs.hub_columns(split) == {
            "article": rows["document"],
            "title": rows["summary"],
        }, split
        assert inputs.files[
            f"online:Harvard/gigaword@{spec.online.revision}/data/ggw_data.zip:{hub_split}"
        ] == sha256_file(archive)
    # the first line of each member ends in "<unk> . \r" (`gigaword_org_data`)
    assert members["org_data/train.src.txt"][0].endswith(" <unk> . \r")
    assert inputs.hub_columns("train")["article"][0].endswith(" UNK .")
    assert inputs.hub_columns("valid")["title"][0].endswith(" UNK .")
    assert inputs.hub_columns("gigaword")["article"][0].endswith(" <unk> .")


def test_hub_archive_stand_in_sample_is_the_data_file_forms_sample(tmp_path, monkeypatch):
    """A stand-in train split (a fresh machine) is sampled as the data-file forms sample it
    (`datasets`' shuffle with the seed, first rows): the same rows from the archive as from
    a parquet copy of the same pairs."""
    import datasets

    assert (
        stand_in_sample(60, 7)
        == datasets.Dataset.from_dict({"row": range(60)}).shuffle(seed=0)["row"][:7]
    )
    members = gigaword_org_data(GIGAWORD_SIZES)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(gigaword_mirror(tmp_path, members)))
    spec = load_config("prepare", "gigaword_duc")
    from_archive = Inputs(tmp_path, "online", spec, stand_in_train=7).hub_columns("train")
    hub = gigaword_hub_pairs(members, "train")
    assert from_archive["article"] == [hub["document"][row] for row in stand_in_sample(60, 7)]
    # the same pairs as a parquet file (in a copy without gigaword.py, which `datasets` refuses)
    write_hub_dataset(tmp_path / "parquet", "Harvard/gigaword", {"train/0.parquet": hub})
    monkeypatch.setenv(HUB_MIRROR_ENV, str(tmp_path / "parquet"))
    del spec.online.archive
    spec.online.splits = {"train": "train/*.parquet"}
    from_files = Inputs(tmp_path, "online", spec, stand_in_train=7).hub_columns("train")
    assert from_files == from_archive
    monkeypatch.setenv(HUB_MIRROR_ENV, str(tmp_path / "mirror"))
    spec = load_config("prepare", "gigaword_duc")
    with pytest.raises(ReproError, match=r"\) train has 60 rows, fewer than the 61 to sample$"):
        Inputs(tmp_path, "online", spec, stand_in_train=61).hub_columns("train")


def damaged(archive: Path, member: str) -> None:
    """Flip bytes of a member's compressed data."""
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as handle:
        info = handle.getinfo(member)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for offset in range(start + 4, start + 4 + min(16, info.compress_size - 8)):
        data[offset] ^= 0xFF
    archive.write_bytes(bytes(data))


# a malformed copy of Harvard/gigaword's archive -> the error: the dataset's name first, or, for
# a malformed line, the archive's member and the line (as for a file: `read_text_lines`)
MALFORMED_ARCHIVES = {
    "missing member": r"gigaword_duc: the archive data/ggw_data\.zip of .* has no member "
    r"org_data/test\.tgt\.txt \(online\.members\.test in configs/prepare/gigaword_duc\.yaml\); "
    r"it holds \['org_data/dev\.src\.txt'",
    "not a zip": r"gigaword_duc: the archive data/ggw_data\.zip of .* is not a readable zip "
    r"\(BadZipFile: File is not a zip file\)\. Without the hub: DATA_SOURCE=local",
    "damaged member": r"gigaword_duc: the archive data/ggw_data\.zip of .* is not a readable zip "
    r"\((BadZipFile|error): .*\)\. Without the hub: DATA_SOURCE=local",
    "members differ in length": r".*/ggw_data\.zip:org_data/test\.tgt\.txt ends at line 8 but "
    r"its parallel members \(org_data/test\.src\.txt, org_data/test\.tgt\.txt\) go on "
    r"\(line 9 has no counterpart\)",
    "not UTF-8": r".*/ggw_data\.zip:org_data/test\.src\.txt, line 2: not UTF-8 text",
    "missing archive": r"gigaword_duc: could not load test \(org_data/test\.src\.txt, "
    r"org_data/test\.tgt\.txt in data/ggw_data\.zip\) of the hub dataset .*"
    r"ggw_data\.zip does not exist\)\. Without the hub: DATA_SOURCE=local",
}


@pytest.mark.parametrize("case", sorted(MALFORMED_ARCHIVES))
def test_a_malformed_hub_archive_is_named(case, tmp_path, monkeypatch):
    members = gigaword_org_data(GIGAWORD_SIZES)
    if case == "missing member":
        del members["org_data/test.tgt.txt"]
    if case == "members differ in length":
        members["org_data/test.tgt.txt"] = members["org_data/test.tgt.txt"][:-1]
    if case == "not UTF-8":
        members["org_data/test.src.txt"] = b"fine\n\xff\xfe latin-1\n"
    archive = tmp_path / "mirror" / "Harvard" / "gigaword" / "data" / "ggw_data.zip"
    gigaword_mirror(tmp_path, members)
    if case == "not a zip":
        archive.write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    if case == "damaged member":
        damaged(archive, "org_data/test.src.txt")
    if case == "missing archive":
        archive.unlink()
    monkeypatch.setenv(HUB_MIRROR_ENV, str(tmp_path / "mirror"))
    spec = load_config("prepare", "gigaword_duc")
    with pytest.raises(ReproError, match=f"^{MALFORMED_ARCHIVES[case]}"):
        Inputs(tmp_path, "online", spec).hub_columns("gigaword")


def test_online_gigaword_reads_the_hub_archive(shared_data, tmp_path, monkeypatch):
    """DATA_SOURCE=online: train from the hub's archive (validation held out from the end of
    its train split, then max_train applied, as for every train pool), the evaluation sets
    offline."""
    members = gigaword_org_data(GIGAWORD_SIZES)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(gigaword_mirror(tmp_path, members)))
    prepared = prepare(
        "gigaword_duc",
        "smoke",
        data_dir=shared_data,
        source="online",
        work_dir=tmp_path / "work",
        overrides={"n_valid": 10, "max_train": 20},
    )
    assert prepared.manifest["source"] == "online"
    online = [name for name in prepared.manifest["inputs"] if name.startswith("online:")]
    revision = load_config("prepare", "gigaword_duc").online.revision
    assert online == [f"online:Harvard/gigaword@{revision}/data/ggw_data.zip:train"]
    hub = gigaword_hub_pairs(members, "train")
    assert lines(prepared.root / "raw" / "train.article") == hub["document"][:20]
    assert lines(prepared.root / "raw" / "valid.article") == hub["document"][50:60]
    assert lines(prepared.root / "raw" / "train.title") == [
        title.lower() for title in hub["summary"][:20]
    ]
    assert set(prepared.manifest["evaluations"]) == {"gigaword", "duc2004"}
    assert "duc2004/input.txt" in prepared.manifest["inputs"]


def test_a_missing_hub_column_is_named(shared_data, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    columns = snli_hub_columns(20, 1)
    columns["sentence1"] = columns.pop("premise")
    write_hub_dataset(mirror, "stanfordnlp/snli", {"plain_text/train-0.parquet": columns})
    monkeypatch.setenv(HUB_MIRROR_ENV, str(mirror))
    with pytest.raises(ReproError, match=r"has no column \['premise'\]; it has"):
        prepare("snli", "smoke", data_dir=shared_data, source="online", work_dir=tmp_path / "work")


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return children.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env},
        timeout=300,
    )


def test_unreachable_hub_names_each_dataset_and_the_local_alternative(tmp_path):
    """The hub cannot be reached (offline mode stands in for a network failure): for every hub
    source, one error naming the dataset, its hub id and revision, and DATA_SOURCE=local. In a
    subprocess: `datasets` reads the offline switch when it is imported."""
    code = (
        "import json\n"
        "from pathlib import Path\n"
        "from regattn_fairseq.experiments.core.config import load_config\n"
        "from regattn_checkout.errors import ReproError\n"
        "from regattn_fairseq.experiments.data.sources import Inputs\n"
        "messages = {}\n"
        f"for name in {HUB_SOURCES!r}:\n"
        "    spec = load_config('prepare', name)\n"
        "    split = next(iter(spec.online.get('splits') or spec.online.stand_in))\n"
        "    try:\n"
        f"        Inputs(Path({str(tmp_path)!r}), 'online', spec).hub_columns(split)\n"
        "    except ReproError as error:\n"
        "        messages[name] = str(error)\n"
        "print(json.dumps(messages))\n"
    )
    result = _run(code, {"HF_HOME": str(tmp_path / "hf")})
    assert result.returncode == 0, result.stderr[-2000:]
    messages = json.loads(result.stdout.splitlines()[-1])
    assert set(messages) == set(HUB_SOURCES)
    for dataset, message in messages.items():
        spec = load_config("prepare", dataset)
        split = next(iter(spec.online.get("splits") or spec.online.stand_in))
        assert message.startswith(f"{dataset}: could not load {hub_split_pattern(spec, split)} ")
        assert f"{spec.online.hf_id}@{spec.online.revision}" in message
        # DATA_SOURCE=local only where the dataset has a local layout (CoNLL-2002 has none)
        if spec.get("local") is not None:
            assert "Without the hub: DATA_SOURCE=local LOCAL_DATA=" in message
        else:
            assert "Without the hub: point DATA_DIR (make) / --data-dir at the off" in message


# --- a fresh machine: no offline copies, the hub stands in at the default scale --------------


@pytest.mark.slow  # three fairseq-preprocess runs: about a minute on 2 busy cores
def test_fresh_machine_snli_small_from_the_hub(tmp_path, monkeypatch):
    monkeypatch.setenv(HUB_MIRROR_ENV, str(snli_mirror(tmp_path)))
    empty = tmp_path / "empty"
    empty.mkdir()
    prepared = prepare(
        "snli",
        "small",
        data_dir=empty,
        work_dir=tmp_path / "work",
        overrides={"stand_in_train": 30, "vocab_size": 200},
    )
    assert prepared.manifest["source"] == "online-stand-in"
    assert prepared.root.name == "small-online-stand-in"
    assert (
        "30 pairs sampled from the hub's train split (seed 0)" in prepared.manifest["description"]
    )
    revision = load_config("prepare", "snli").online.revision
    assert sorted(prepared.manifest["inputs"]) == [
        f"online:stanfordnlp/snli@{revision}/plain_text/{split}-*.parquet"
        for split in ("test", "train", "validation")
    ]
    labels = lines(prepared.root / "bin" / "label" / "train.label")
    # 30 sampled among the 60 pairs with a gold label
    assert len(labels) == 30 and "-" not in labels
    assert len(lines(prepared.root / "bin" / "label" / "test.label")) == 12


def test_fresh_machine_gigaword_leaves_out_what_the_hub_lacks(tmp_path, monkeypatch):
    members = gigaword_org_data(GIGAWORD_SIZES)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(gigaword_mirror(tmp_path, members)))
    prepared = prepare(
        "gigaword_duc",
        "small",
        data_dir=tmp_path / "does-not-exist",
        work_dir=tmp_path / "work",
        overrides={"stand_in_train": 40, "n_valid": 10, "vocab_size": 300},
    )
    # the held-out rule of the offline pool applies to the sample: 30 train, 10 valid
    hub = gigaword_hub_pairs(members, "train")
    sample = [hub["document"][row] for row in stand_in_sample(GIGAWORD_SIZES["train"], 40)]
    assert lines(prepared.root / "raw" / "train.article") == sample[:30]
    assert lines(prepared.root / "raw" / "valid.article") == sample[30:]
    assert set(prepared.manifest["evaluations"]) == {"gigaword"}
    # the hub's test split, <unk> kept (gigaword.py replaces it in train and validation only)
    test = gigaword_hub_pairs(members, "test")
    assert lines(prepared.root / "refs" / "gigaword.ref0") == test["summary"]
    assert lines(prepared.root / "raw" / "gigaword.article") == test["document"]
    assert "['duc2004'] not on the hub (left out)" in prepared.manifest["description"]


def conll2002_mirror(tmp_path) -> tuple[Path, dict]:
    """A copy of tomaarsen/conll2002's parquet conversion at its pinned commit in the confirmed
    layout, {es,nl}/{train,validation,test}/0000.parquet, each split ending in the loading
    script's empty sentence: (the mirror, path -> columns)."""
    files = {
        f"{config}/{split}/0000.parquet": conll2002_hub_columns(count, seed + count, True)
        for config, seed in (("es", 0), ("nl", 50))
        for split, count in (("train", 12), ("validation", 5), ("test", 7))
    }
    mirror = tmp_path / "mirror"
    write_hub_dataset(mirror, "tomaarsen/conll2002", files)
    return mirror, files


def test_fresh_machine_ner_says_first_that_the_hubs_whole_splits_stand_in(tmp_path):
    revision = load_config("prepare", "conll2002").online.revision
    line = describe_sources(
        "ner", [("conll2002", {"setting": "dutch"})], "small", data_dir=tmp_path / "empty"
    )
    assert line == (
        f"[data] ner at scale small: conll2002: hub tomaarsen/conll2002@{revision} standing in "
        f"for the offline copies missing under {(tmp_path / 'empty').resolve()}: the hub's whole "
        "splits ['dutch_train', 'dutch_valid', 'dutch_test']: full train / testb (the small "
        "scale cuts epochs, not data)"
    )


@pytest.mark.parametrize("setting, config", [("spanish", "es"), ("dutch", "nl")])
def test_fresh_machine_ner_small_is_the_hubs_whole_splits(setting, config, tmp_path, monkeypatch):
    """With no offline copies, the hub's splits of the scale's language, whole and in order,
    stand in for CoNLL-2002's train / testa / testb: tag names from the ClassLabel ints, the
    trailing empty sentence dropped."""
    mirror, files = conll2002_mirror(tmp_path)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(mirror))
    prepared = prepare(
        "conll2002",
        "small",
        data_dir=tmp_path / "empty",
        work_dir=tmp_path / "work",
        overrides={"setting": setting},
    )
    assert prepared.manifest["source"] == "online-stand-in"
    assert set(prepared.manifest["evaluations"]) == {f"{setting}_test"}
    revision = load_config("prepare", "conll2002").online.revision
    assert sorted(prepared.manifest["inputs"]) == [
        f"online:tomaarsen/conll2002@{revision}/{config}/{split}/*.parquet"
        for split in ("test", "train", "validation")
    ]
    for split, hub in (("train", "train"), ("valid", "validation"), ("test", "test")):
        columns = files[f"{config}/{hub}/0000.parquet"]
        assert columns["tokens"][-1] == []
        words = [" ".join(sentence) for sentence in columns["tokens"][:-1]]
        assert lines(prepared.root / "bin" / f"{split}.word") == words
    test = files[f"{config}/test/0000.parquet"]
    tags = [[CONLL2002_TAGS[i] for i in sentence] for sentence in test["ner_tags"]]
    assert lines(prepared.root / "refs" / "test.iob2") == [" ".join(t) for t in tags[:-1]]
    assert lines(prepared.root / "bin" / "test.tag")[0].split()[1:3] == ["B-PER", "E-PER"]


def test_a_whole_splits_stand_in_reads_the_hubs_train_split_unsampled(tmp_path, monkeypatch):
    monkeypatch.setenv(HUB_MIRROR_ENV, str(snli_mirror(tmp_path)))
    spec = load_config("prepare", "snli")
    whole = Inputs(tmp_path, "online", spec, stand_in_train=WHOLE_SPLITS).hub_columns("train")
    assert whole == Inputs(tmp_path, "online", spec).hub_columns("train")


def test_explicit_offline_source_does_not_fall_back(tmp_path):
    with pytest.raises(ReproError, match="DATA_SOURCE=offline reads the offline copies, but"):
        prepare("snli", "small", data_dir=tmp_path, source="offline", work_dir=tmp_path)


def test_no_stand_in_where_the_hub_has_none(tmp_path):
    """SIGMORPHON 2018 has no hub copy (sigmorphon.yaml says what was searched): one error
    that says so and names both ways to the data, DATA_DIR and DATA_SOURCE=local."""
    with pytest.raises(
        ReproError,
        match=r"none does not exist, and no hub source can stand in for the offline copies "
        r"\(no hub source is configured in configs/prepare/sigmorphon\.yaml\); point DATA_DIR "
        r"\(make\) / --data-dir at the offline data or DATA_SOURCE=local LOCAL_DATA=",
    ):
        prepare("sigmorphon", "small", data_dir=tmp_path / "none", work_dir=tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(ReproError, match=r"LANGUAGES\.tsv is missing \(2 files missing\), and"):
        prepare("sigmorphon", "small", data_dir=tmp_path / "data", work_dir=tmp_path)


def test_first_line_names_each_source(shared_data, tmp_path):
    line = describe_sources(
        "nmt",
        [("multi30k", None), ("iwslt14", None)],
        "small",
        data_dir=shared_data,
        source="online",
    )
    assert line.startswith("[data] nmt at scale small: multi30k: offline (nothing to take from")
    revision = load_config("prepare", "iwslt14").online.revision
    assert f"; iwslt14: online (train from IWSLT/iwslt2017@{revision}, the rest " in line
    assert "first 20k IWSLT train pairs (online)" in line


def test_fresh_machine_multi30k_from_the_hubs_json_lines(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    files = {
        f"{name}.jsonl": {"en": sentences(count, count), "de": sentences(count, count + 1, GERMAN)}
        for name, count in (("train", 50), ("val", 8), ("test", 6))
    }
    write_hub_dataset(mirror, "bentrevett/multi30k", files)
    monkeypatch.setenv(HUB_MIRROR_ENV, str(mirror))
    prepared = prepare(
        "multi30k",
        "small",
        data_dir=tmp_path / "empty",
        work_dir=tmp_path / "work",
        overrides={"stand_in_train": 40, "bpe_merges": 50},
    )
    assert prepared.manifest["source"] == "online-stand-in"
    assert set(prepared.manifest["evaluations"]) == {"test2016"}
    [refs] = prepared.evaluation("test2016")["refs"]
    assert lines(refs) == sentences(6, 7, GERMAN)
    assert len(lines(prepared.root / "raw" / "train.en")) == 40


def run_reproduce_table2(tmp_path, env: dict) -> subprocess.CompletedProcess:
    """`make reproduce-table2` at the default scale with an empty DATA_DIR, the hub offline."""
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in (HUB_MIRROR_ENV, LOCAL_DATA_ENV, "SCALE", "DATA_SOURCE")
    }
    return children.run(
        [
            "make",
            "--no-print-directory",
            "reproduce-table2",
            f"DATA_DIR={empty}",
            f"WORK_DIR={tmp_path / 'work'}",
            f"RESULTS_DIR={tmp_path / 'results'}",
            "ALLOW_DIRTY=1",
        ],
        cwd=REPO_ROOT,
        env={**environment, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env},
        timeout=600,
    )


def test_fresh_machine_says_its_source_first_and_fails_once_without_the_hub(tmp_path):
    result = run_reproduce_table2(tmp_path, {"HF_HOME": str(tmp_path / "hf")})
    assert result.returncode != 0
    program = [line for line in result.stdout.splitlines() if not line.startswith(".venv")]
    first = program[0]
    assert first.startswith(
        "[data] table2 at scale small: gigaword_duc: hub "
        f"Harvard/gigaword@{load_config('prepare', 'gigaword_duc').online.revision} "
        f"standing in for the offline copies missing under {(tmp_path / 'empty').resolve()}: "
        "train 26,498 pairs sampled from the hub's train split (seed 0), evaluation sets "
        "['gigaword'] from the hub, ['duc2004'] not on the hub (left out)"
    ), result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "the offline copies are missing under" in errors[0]
    assert "cannot be reached" in errors[0] and "DATA_SOURCE=local" in errors[0]
    assert "Traceback" not in result.stderr


# --- SCALE=paper DATA_SOURCE=local end to end (a dry run: capped data, a few updates) ------


def reproduce_local_dry_run(table: str, mapping: str, tmp_path) -> list[dict]:
    """`scripts/reproduce.py <table> --scale paper --source local` on the layouts of
    tests/experiments/local_layouts.py, one mapping, capped at 24 train / 5 eval, 2 updates."""
    from regattn_fairseq.experiments.pipelines import reproduce

    local = write_all(tmp_path / "local")
    results_dir = tmp_path / "results"
    reproduce.run(
        [
            table,
            "--scale",
            "paper",
            "--source",
            "local",
            "--local-data",
            str(local),
            "--mappings",
            mapping,
            "--seeds",
            "1",
            "--max-train",
            "24",
            "--max-eval",
            "5",
            "--max-update",
            "2",
            "--data-dir",
            str(tmp_path / "empty"),
            "--work-dir",
            str(tmp_path / "work"),
            "--results-dir",
            str(results_dir),
        ]  # fmt: skip
    )
    rows = [json.loads(line) for line in lines(results_dir / "raw" / f"{table}.jsonl")]
    assert {row["data_source"] for row in rows} == {"local"}
    assert {row["mapping"] for row in rows} == {mapping}
    return rows


@pytest.mark.slow
def test_table1_paper_from_snli_1_0(tmp_path, capsys):
    [row] = reproduce_local_dry_run("table1", "sparsemax", tmp_path)
    assert 0.0 <= row["metrics"]["accuracy"] <= 100.0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("[data] table1 at scale paper [dry run, capped: ")
    assert "snli: local, official layout under" in first


@pytest.mark.slow
def test_table2_paper_from_sent_summary(tmp_path):
    rows = reproduce_local_dry_run("table2", "softmax", tmp_path)
    assert {row["evaluation"] for row in rows} == {"duc2004", "gigaword"}
    for row in rows:
        assert 0.0 <= row["metrics"]["rougeL"] <= 100.0
