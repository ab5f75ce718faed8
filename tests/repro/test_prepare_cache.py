"""Prepared data is cached behind a stamp: not rebuilt when inputs and options are unchanged,
rebuilt when an input file changes."""

from regattn_fairseq.experiments.prepare import prepare

HEADER = "language\tdir\ttrain-low\ttrain-medium\ttrain-high\tdev\ttest(gold)\tcovered-test\n"


def make_sigmorphon(data_dir):
    folder = data_dir / "sigmorphon2018_task1" / "all"
    folder.mkdir(parents=True)
    (data_dir / "sigmorphon2018_task1" / "LANGUAGES.tsv").write_text(HEADER + "toy\tall\t3\t3\t-\t2\t2\t2\n")
    (folder / "toy-train-medium").write_text("walk\twalked\tV;PST\nsing song\tsang song\tV;PST\ntalk\ttalks\tV;3;SG\n")
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
    assert (first.root / "raw" / "train.src").read_text().splitlines()[1] == "<toy> s i n g \u2581 s o n g <V> <PST>"
    assert (first.root / "refs" / "test.forms").read_text() == "played\nsits\n"
    capsys.readouterr()

    again = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    assert "is up to date" in capsys.readouterr().out
    assert again.manifest == first.manifest

    (folder / "toy-test").write_text("play\tplayed\tV;PST\n")
    rebuilt = prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=options)
    assert "building" in capsys.readouterr().out
    assert (rebuilt.root / "refs" / "test.forms").read_text() == "played\n"
