"""scripts/score.py: every test set resolves, perfect outputs score 100 where that is the
definition, bad outputs are rejected with the file and line named (exit 2, no traceback)."""

import json
import sys

import children
import pytest

from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR
from regattn_fairseq.experiments.data.test_sets import TEST_SETS, find_test_set, load_gold
from regattn_fairseq.experiments.pipelines import score_file as score

pytestmark = pytest.mark.skipif(
    not DEFAULT_DATA_DIR.is_dir(), reason=f"no offline data at {DEFAULT_DATA_DIR}"
)
SIZES = {
    "duc2004": 500,
    "gigaword": 1951,
    "snli": 9824,
    "multi30k-test2016": 1000,
    "iwslt14-test": 6750,
    "wmt16-newstest2016": 1999,
    "conll2002-spanish": 1517,
    "conll2002-dutch": 5195,
}


@pytest.fixture(scope="module")
def golds():
    return {}


def _gold(golds, name):
    if name not in golds:
        golds[name] = load_gold(find_test_set(name), DEFAULT_DATA_DIR)
    return golds[name]


@pytest.mark.parametrize("name", list(TEST_SETS))
def test_each_test_set_resolves(golds, name):
    gold = _gold(golds, name)
    assert len(gold.references) == SIZES.get(name, len(gold.references)) > 0
    assert gold.files and all((DEFAULT_DATA_DIR / f).is_file() for f in gold.files)
    if name.startswith("inflection"):
        assert len(gold.languages) == len(gold.references)


@pytest.mark.parametrize(
    "name, metric",
    [
        ("multi30k-test2016", "bleu"),
        ("snli", "accuracy"),
        ("inflection-medium", "accuracy"),
        ("gigaword", "rouge1"),
        ("gigaword", "rougeL"),
        ("conll2002-spanish", "f1"),
    ],
)
def test_perfect_output_scores_100(golds, tmp_path, capsys, name, metric):
    gold = _gold(golds, name)
    output = tmp_path / "perfect.txt"
    output.write_text("\n".join(refs[0] for refs in gold.references) + "\n", encoding="utf-8")
    assert score.main([name, str(output), "--json", str(tmp_path / "s.json")]) == 0
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["metrics"][metric] == 100.0
    assert result["items"] == len(gold.references) and result["signature"]
    assert f"{name} ({len(gold.references)} items" in capsys.readouterr().out


def test_duc_signature_and_json_on_stdout(golds, tmp_path, capsys):
    output = tmp_path / "hyp.txt"
    output.write_text("\n".join(refs[0] for refs in _gold(golds, "duc2004").references) + "\n")
    assert score.main(["duc2004", str(output), "--json", "-"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["signature"].startswith(
        "ROUGE-1.5.5-compatible -m -n 2 -w 1.2 -b 75 -a, recall, 4 refs"
    )
    assert 0 < result["metrics"]["rouge1"] < 100  # 3 of the 4 references differ from the output
    assert "signature: ROUGE-1.5.5-compatible" in captured.err


def test_sigmorphon_rows_are_read_as_forms(golds, tmp_path):
    gold = _gold(golds, "inflection-medium")
    output = tmp_path / "hyp.tsv"
    output.write_text(
        "".join(f"lemma\t{refs[0]}\tV;PST\n" for refs in gold.references), encoding="utf-8"
    )
    assert score.main(["inflection-medium", str(output), "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["metrics"]["accuracy"] == 100.0


def test_a_byte_order_mark_costs_no_item(golds, tmp_path):
    """A UTF-8 BOM before the first label is dropped, not read as part of it (it cost SNLI's
    first item: 99.99)."""
    gold = _gold(golds, "snli")
    output = tmp_path / "bom.txt"
    output.write_text("\n".join(refs[0] for refs in gold.references) + "\n", encoding="utf-8-sig")
    assert output.read_bytes().startswith(b"\xef\xbb\xbf")
    assert score.main(["snli", str(output), "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["metrics"]["accuracy"] == 100.0


def test_wrong_line_count_is_rejected(tmp_path, capsys):
    output = tmp_path / "short.txt"
    output.write_text("entailment\n" * 10)
    assert score.main(["snli", str(output)]) == 2
    message = capsys.readouterr().err
    assert str(output) in message and "10 lines but the test set has 9824 items" in message
    assert "ends after line 10" in message


def test_bad_encoding_is_rejected_in_a_subprocess(tmp_path):
    output = tmp_path / "latin1.txt"
    output.write_bytes(b"entailment\n" * 4 + "caf\u00e9\n".encode("latin-1") + b"neutral\n")
    done = children.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "score.py"), "snli", str(output)],
        check=False,
    )
    assert done.returncode == 2
    assert f"{output}:5: not valid UTF-8" in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_output_and_unknown_test_set(tmp_path, capsys):
    assert score.main(["gigaword", str(tmp_path / "absent.txt")]) == 2
    assert "absent.txt: cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        score.main(["cnn-dailymail", str(tmp_path / "absent.txt")])
    assert exit_info.value.code == 2
