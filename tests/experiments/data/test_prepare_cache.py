"""Prepared data is cached behind a stamp: not rebuilt when inputs and options are unchanged,
rebuilt when an input file or the code changes (aside, keeping the folder in use when the
output is the same)."""

import json
import shutil

import pytest
from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.data import prepare as prepare_module
from regattn_fairseq.experiments.data.builders import builder_for, inflection, translation
from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.report import tables as results_module

HEADER = "language\tdir\ttrain-low\ttrain-medium\ttrain-high\tdev\ttest(gold)\tcovered-test\n"


def make_sigmorphon(data_dir):
    folder = data_dir / "sigmorphon2018_task1" / "all"
    folder.mkdir(parents=True)
    (data_dir / "sigmorphon2018_task1" / "LANGUAGES.tsv").write_text(
        HEADER + "toy\tall\t3\t3\t-\t2\t2\t2\n"
    )
    (folder / "toy-train-medium").write_text(
        "walk\twalked\tV;PST\nsing song\tsang song\tV;PST\ntalk\ttalks\tV;3;SG\n"
    )
    (folder / "toy-dev").write_text("jump\tjumped\tV;PST\nrun\truns\tV;3;SG\n")
    (folder / "toy-test").write_text("play\tplayed\tV;PST\nsit\tsits\tV;3;SG\n")
    return folder


def test_stamp_skips_rebuild_until_an_input_changes(tmp_path, capsys):
    data_dir = tmp_path / "shared"
    folder = make_sigmorphon(data_dir)
    options = {"languages": ["toy"]}
    first = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    assert (first.bin_dir / "test.src-tgt.src.bin").is_file()
    # the language tag leads, spaces become a symbol, tags are single tokens
    assert (first.root / "raw" / "train.src").read_text().splitlines()[
        1
    ] == "<toy> s i n g \u2581 s o n g <V> <PST>"
    assert (first.root / "refs" / "test.forms").read_text() == "played\nsits\n"
    capsys.readouterr()

    again = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    assert "is up to date" in capsys.readouterr().out
    assert again.manifest == first.manifest

    (folder / "toy-test").write_text("play\tplayed\tV;PST\n")
    rebuilt = prepare(
        "sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options
    )
    assert "building" in capsys.readouterr().out
    assert (rebuilt.root / "refs" / "test.forms").read_text() == "played\n"


# --- the cache key: code, options and tool versions ------------------------------------------


def spec_and_options(dataset="multi30k", scale="smoke", **overrides):
    spec = load_config("prepare", dataset)
    return spec, OmegaConf.merge(spec.scales[scale], overrides)


def key(spec, opts, source="offline"):
    return prepare_module.cache_key(spec, opts, source)


def edited_copy(module, tmp_path):
    """A copy of a module's file with one more line, to stand in for an edit of its code."""
    copy = tmp_path / f"{module.__name__}.py"
    shutil.copy(module.__file__, copy)
    with open(copy, "a") as handle:
        handle.write("# an edit\n")
    return str(copy)


def test_key_is_stable_and_covers_code_config_and_tools():
    spec, opts = spec_and_options()
    inputs = prepare_module.cache_key_inputs(spec, opts, "offline")
    assert key(spec, opts) == key(*spec_and_options())
    assert set(inputs) == {"spec", "options", "source", "code", "tools"}
    assert set(inputs["code"]) == {
        "regattn_fairseq.experiments.data.prepare",
        "regattn_fairseq.experiments.core.config",
        "regattn_fairseq.experiments.core.tools",
        "regattn_checkout.files",
        "regattn_fairseq.experiments.data.sources",
        "regattn_fairseq.experiments.data.text_processing",
        "regattn_fairseq.experiments.data.builders",
        "regattn_fairseq.experiments.data.builders.translation",
    }
    assert set(inputs["tools"]) == {"sacremoses", "subword-nmt", "fairseq-fixed"}
    assert set(prepare_module.tool_versions("snli", "online")) == {
        "sacremoses",
        "fairseq-fixed",
        "datasets",
    }


def test_key_changes_with_the_builders_code(tmp_path, monkeypatch):
    spec, opts = spec_and_options()
    before = key(spec, opts)
    monkeypatch.setattr(translation, "__file__", edited_copy(translation, tmp_path))
    assert key(spec, opts) != before


@pytest.mark.parametrize(
    "module",
    [
        "regattn_fairseq.experiments.core.config",
        "regattn_fairseq.experiments.core.tools",
        "regattn_checkout.files",
        "regattn_fairseq.experiments.data.text_processing",
        "regattn_fairseq.experiments.data.sources",
    ],
)
def test_key_changes_with_shared_preparation_code(module, tmp_path, monkeypatch):
    import importlib

    target = importlib.import_module(module)
    spec, opts = spec_and_options()
    before = key(spec, opts)
    monkeypatch.setattr(target, "__file__", edited_copy(target, tmp_path))
    assert key(spec, opts) != before


def test_key_ignores_code_that_does_not_prepare_this_kind(tmp_path, monkeypatch):
    spec, opts = spec_and_options()
    before = key(spec, opts)
    monkeypatch.setattr(inflection, "__file__", edited_copy(inflection, tmp_path))  # another kind
    monkeypatch.setattr(results_module, "__file__", edited_copy(results_module, tmp_path))  # tables
    assert key(spec, opts) == before


def test_key_changes_with_a_tool_version(monkeypatch):
    spec, opts = spec_and_options()
    before = key(spec, opts)
    real = prepare_module.package_version
    monkeypatch.setattr(
        prepare_module,
        "package_version",
        lambda name: "99.0" if name == "sacremoses" else real(name),
    )
    assert key(spec, opts) != before
    # a tool this kind does not use changes nothing
    monkeypatch.setattr(
        prepare_module,
        "package_version",
        lambda name: "99.0" if name == "sentencepiece" else real(name),
    )
    assert key(spec, opts) == before


def test_key_changes_with_options_and_source():
    spec, opts = spec_and_options()
    assert key(spec, opts) != key(*spec_and_options(bpe_merges=301))
    assert key(spec, opts) != key(*spec_and_options(scale="small"))
    assert key(spec, opts, "offline") != key(spec, opts, "online")


def test_stamp_rebuilds_when_the_code_changes(tmp_path, monkeypatch, capsys):
    data_dir = tmp_path / "shared"
    make_sigmorphon(data_dir)
    options = {"languages": ["toy"]}
    prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    capsys.readouterr()
    monkeypatch.setattr(inflection, "__file__", edited_copy(inflection, tmp_path))
    prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    out = capsys.readouterr().out
    assert "building" in out and "changed: code" in out


def test_unknown_kind_is_named(tmp_path, monkeypatch):
    with pytest.raises(
        ReproError,
        match="unknown dataset kind 'parsing'.*inflection, ner, snli, summarization, translation",
    ):
        builder_for("parsing")
    spec = load_config("prepare", "sigmorphon")
    spec.kind = "parsing"
    monkeypatch.setattr(prepare_module, "load_config", lambda *parts: spec)
    with pytest.raises(ReproError, match="unknown dataset kind 'parsing'"):
        prepare("sigmorphon", "smoke", data_dir=tmp_path, work_dir=tmp_path)


def _prepare_toy_capturing(data_dir, work_dir):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        prepare(
            "sigmorphon",
            "smoke",
            data_dir=data_dir,
            work_dir=work_dir,
            overrides={"languages": ["toy"]},
        )
    return out.getvalue()


def test_two_processes_preparing_the_same_data_build_it_once(tmp_path):
    """Two runs started side by side (two mappings of one table) need the same prepared data:
    one builds it, the other waits for the lock and reuses it (without the lock both built
    into the same folder at once)."""
    import multiprocessing

    data_dir = tmp_path / "shared"
    make_sigmorphon(data_dir)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        outputs = pool.starmap(_prepare_toy_capturing, [(data_dir, tmp_path)] * 2)
    assert sum("[prepare] building" in out for out in outputs) == 1, outputs
    assert sum("is up to date" in out for out in outputs) == 1, outputs


def test_a_code_change_with_the_same_output_keeps_the_folder_in_use(tmp_path, monkeypatch, capsys):
    """A stale stamp (the code changed) is rebuilt aside: the same files keep the folder that
    runs may be reading (same inode, restamped, then up to date); no aside folder is left."""
    data_dir = tmp_path / "shared"
    make_sigmorphon(data_dir)
    options = {"languages": ["toy"]}
    first = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    data_file = first.bin_dir / "test.src-tgt.src.bin"
    inode = data_file.stat().st_ino
    capsys.readouterr()
    monkeypatch.setattr(inflection, "__file__", edited_copy(inflection, tmp_path))
    kept = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    out = capsys.readouterr().out
    assert "changed: code" in out and "kept as it is" in out
    assert kept.root == first.root and kept.manifest == first.manifest
    assert data_file.stat().st_ino == inode
    assert sorted(p.name for p in first.root.parent.iterdir() if p.is_dir()) == [first.root.name]
    prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    assert "is up to date" in capsys.readouterr().out


def test_a_code_change_that_changes_the_output_replaces_the_folder(tmp_path, monkeypatch, capsys):
    """Other output replaces the folder in one rename; the manifest names the folder's files,
    not the aside build's."""
    data_dir = tmp_path / "shared"
    make_sigmorphon(data_dir)
    options = {"languages": ["toy"]}
    first = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    capsys.readouterr()
    build = inflection.build

    def build_with_other_references(inputs, opts, root):
        evaluations = build(inputs, opts, root)
        (root / "refs" / "test.forms").write_text("PLAYED\nSITS\n")
        return evaluations

    monkeypatch.setattr(inflection, "__file__", edited_copy(inflection, tmp_path))
    monkeypatch.setattr(inflection, "build", build_with_other_references)
    new = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    out = capsys.readouterr().out
    assert "changed 1 file(s) (refs/test.forms)" in out and "it replaces" in out
    assert new.root == first.root
    assert (new.root / "refs" / "test.forms").read_text() == "PLAYED\nSITS\n"
    assert ".rebuild" not in json.dumps(new.manifest)
    # the evaluation sets name the same files, in the folder
    assert new.manifest["evaluations"] == first.manifest["evaluations"]
    assert sorted(p.name for p in first.root.parent.iterdir() if p.is_dir()) == [first.root.name]
