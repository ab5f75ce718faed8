"""Fixtures of the plugin tests: tiny generated translation and SNLI data (session-wide).
Helpers shared by the test modules live in `plugin_helpers`, imported by name."""

import random

import pytest
from plugin_helpers import VOCAB, preprocess, write_lines


@pytest.fixture(scope="session")
def translation_data(tmp_path_factory):
    """Binarized src->tgt data where the target is the source with each word renamed:
    learnable in a few updates, and it needs attention."""
    root = tmp_path_factory.mktemp("translation")
    raw, rng = root / "raw", random.Random(0)
    raw.mkdir()
    for split, n in (("train", 64), ("valid", 8), ("test", 6)):
        src = [[rng.choice(VOCAB) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        write_lines(raw / f"{split}.src", [" ".join(s) for s in src])
        write_lines(raw / f"{split}.tgt", [" ".join(w.replace("w", "v") for w in s) for s in src])
    preprocess(
        [
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(raw / "train"),
            "--validpref",
            str(raw / "valid"),
            "--testpref",
            str(raw / "test"),
            "--destdir",
            str(root / "bin"),
            "--joined-dictionary",
            "--workers",
            "1",
        ]
    )
    return root / "bin"


@pytest.fixture(scope="session")
def snli_data(tmp_path_factory):
    """The layout the regattn_snli task reads; the label depends on the premise."""
    root = tmp_path_factory.mktemp("snli")
    raw, rng = root / "raw", random.Random(0)
    raw.mkdir()
    labels = ("entailment", "neutral", "contradiction")
    for split, n in (("train", 48), ("valid", 8), ("test", 8)):
        premises, hypotheses, gold = [], [], []
        for _ in range(n):
            premise = [rng.choice(VOCAB) for _ in range(rng.randint(3, 8))]
            label = rng.randrange(3)
            word = premise[0] if label == 0 else rng.choice(VOCAB)
            hypothesis = [word, ("maybe", "yes", "no")[label], rng.choice(VOCAB)]
            premises.append(" ".join(premise))
            hypotheses.append(" ".join(hypothesis))
            gold.append(labels[label])
        write_lines(raw / f"{split}.premise", premises)
        write_lines(raw / f"{split}.hypothesis", hypotheses)
        (root / "bin" / "label").mkdir(parents=True, exist_ok=True)
        write_lines(root / "bin" / "label" / f"{split}.label", gold)
    preprocess(
        [
            "--only-source",
            "--trainpref",
            str(raw / "train.premise"),
            "--validpref",
            str(raw / "valid.premise"),
            "--testpref",
            str(raw / "test.premise"),
            "--destdir",
            str(root / "bin" / "input0"),
            "--workers",
            "1",
        ]
    )
    preprocess(
        [
            "--only-source",
            "--trainpref",
            str(raw / "train.hypothesis"),
            "--validpref",
            str(raw / "valid.hypothesis"),
            "--testpref",
            str(raw / "test.hypothesis"),
            "--srcdict",
            str(root / "bin" / "input0" / "dict.txt"),
            "--destdir",
            str(root / "bin" / "input1"),
            "--workers",
            "1",
        ]
    )
    return root / "bin"
