"""decode(): the hypotheses fairseq-generate wrote, in corpus order, and a clear error when a
sentence got none (its outputs would no longer line up with the references)."""

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.decode import decode as decode_module


def _decode_with_output(monkeypatch, tmp_path, lines):
    def fake_generate(cmd, log, echo):
        (tmp_path / "generate-test.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")

    monkeypatch.setattr(decode_module, "tool_path", lambda name: name)
    monkeypatch.setattr(decode_module, "run_logged", fake_generate)
    return decode_module.decode(
        SimpleNamespace(checkpoint=tmp_path / "checkpoint_best.pt"),
        SimpleNamespace(bin_dir=tmp_path / "bin"),
        "test",
        tmp_path,
        OmegaConf.create({"beam": 5, "batch_size": 8}),
        remove_bpe=False,
    )


def test_hypotheses_in_corpus_order(monkeypatch, tmp_path):
    lines = ["S-1\tb", "H-1\t-0.5\tB", "S-0\ta", "H-0\t-0.1\tA", "D-0\t-0.1\tA"]
    hypotheses, _ = _decode_with_output(monkeypatch, tmp_path, lines)
    assert hypotheses == ["A", "B"]


def test_a_sentence_without_hypothesis_is_an_error(monkeypatch, tmp_path):
    lines = ["S-0\ta", "H-0\t-0.1\tA", "S-1\tb", "S-2\tc", "H-2\t-0.3\tC"]
    with pytest.raises(ReproError, match=r"no hypothesis for 1 of the 3 sentences .*\[1\]"):
        _decode_with_output(monkeypatch, tmp_path, lines)
