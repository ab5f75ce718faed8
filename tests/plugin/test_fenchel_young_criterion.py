"""A sparse output layer (issue #50 item 4): `--output-mapping sparsemax|entmax15` makes the
decoder's next-token distribution the mapping of its scores (exact zeros: -inf
log-probabilities), `--criterion regattn_fy` trains it with the mapping's Fenchel-Young loss,
and beam search decodes with the zeros. Softmax with regattn_fy is the cross-entropy."""

import argparse
import math

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq_helpers import (
    BATCH_ARGS,
    COMMON_ARGS,
    MODEL_ARGS,
    SEQ2SEQ_TRAIN_ARGS,
    USER_DIR,
    build_model,
    epoch_losses,
    generate_in_process,
    train_in_process,
    translation_batch,
)

from regattn import losses, mappings
from regattn_fairseq import fairseq_adapter
from regattn_fairseq.criterions.regattn_fenchel_young import RegattnFenchelYoungCriterion

# fairseq's own beam search, which the plugin replaces (fairseq_adapter)
STOCK_BEAM_SEARCH = fairseq_adapter._SparseOutputBeamSearch.__base__
STOCK_GENERATOR = fairseq_adapter._SparseOutputSequenceGenerator.__base__
# the plugin's (what fairseq-generate and task.build_generator build once it is imported)
GENERATOR = fairseq_adapter._SparseOutputSequenceGenerator
OUTPUTS = {"sparsemax": ("sparsemax", {}), "entmax15": ("entmax", {"alpha": 1.5})}


# a beam of 3 and a maximum length of 6 tokens: stock fairseq's failure reads `6 < 6`
MAX_LEN_6 = dict(beam_size=3, max_len_a=0, max_len_b=6)


def _assert_stock_fairseq_fails(model, dictionary, sample):
    """fairseq's own generator and search, at MAX_LEN_6, fail on `model` at the maximum
    length."""
    stock = STOCK_GENERATOR(
        [model], dictionary, **MAX_LEN_6, search_strategy=STOCK_BEAM_SEARCH(dictionary)
    )
    with torch.no_grad(), pytest.raises(AssertionError, match="6 < 6"):
        stock.generate([model], sample)


@pytest.mark.parametrize("model_name", ["regattn_lstm", "regattn_transformer"])
@pytest.mark.parametrize("output", list(OUTPUTS))
def test_criterion_is_the_fenchel_young_loss_of_the_output_mapping(
    model_name, output, translation_data
):
    torch.manual_seed(0)
    task, model = build_model(
        translation_data, MODEL_ARGS[model_name], ["--output-mapping", output]
    )
    assert model.output_mapping == output
    sample = translation_batch(task)
    criterion = RegattnFenchelYoungCriterion(task, label_smoothing=0.1, sentence_avg=False)
    loss, sample_size, log = criterion(model, sample)
    assert sample_size == sample["ntokens"] and log["ntargets"] == sample["ntokens"]
    scores = model(**sample["net_input"])[0]
    mapping, params = OUTPUTS[output]
    expected = losses.fenchel_young_loss(
        scores.reshape(-1, scores.size(-1)),
        sample["target"].reshape(-1),
        mapping,
        ignore_index=task.target_dictionary.pad(),
        reduction="sum",
        label_smoothing=0.1,
        **params,
    )
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # the decoder's distribution is the mapping's, with exact zeros and -inf log-probabilities
    with torch.no_grad():
        probs = model.get_normalized_probs((scores, None), log_probs=False)
        lprobs = model.get_normalized_probs((scores, None), log_probs=True)
    torch.testing.assert_close(probs, getattr(mappings, mapping)(scores.float(), **params))
    assert torch.equal(lprobs == -math.inf, probs == 0)


def test_softmax_output_with_regattn_fy_is_cross_entropy(translation_data):
    task, model = build_model(translation_data, MODEL_ARGS["regattn_lstm"])
    assert model.output_mapping == "softmax"
    sample = translation_batch(task)
    criterion = RegattnFenchelYoungCriterion(task, label_smoothing=0.0, sentence_avg=False)
    loss, _, _ = criterion(model, sample)
    lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    nll = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(loss, nll[sample["target"] != task.target_dictionary.pad()].sum())


def test_trains_and_generates_with_a_sparse_output(translation_data, tmp_path):
    records = train_in_process(
        [
            str(translation_data),
            *SEQ2SEQ_TRAIN_ARGS,
            *COMMON_ARGS,
            *MODEL_ARGS["regattn_lstm"],
            "--attention",
            "entmax",
            "--criterion",
            "regattn_fy",
            "--output-mapping",
            "sparsemax",
            "--label-smoothing",
            "0.1",
            "--save-dir",
            str(tmp_path),
        ]
    )
    train_losses = epoch_losses(records)
    assert len(train_losses) == 3 and train_losses[-1] < train_losses[0], train_losses
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_best.pt"))
    assert state["cfg"]["model"].output_mapping == "sparsemax"
    assert state["cfg"]["criterion"]._name == "regattn_fy"
    lines = generate_in_process(
        [
            str(translation_data),
            "--user-dir",
            USER_DIR,
            "--path",
            str(tmp_path / "checkpoint_best.pt"),
            "--task",
            "translation",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--cpu",
            "--gen-subset",
            "test",
            "--beam",
            "5",
            "--batch-size",
            "4",
            *BATCH_ARGS,
            "--results-path",
            str(tmp_path),
        ]
    )
    hypotheses = [line.split("\t") for line in lines if line.startswith("H-")]
    assert len(hypotheses) == 6
    assert all(math.isfinite(float(score)) for _, score, _ in hypotheses)
    _assert_beam_search_scores_are_the_teacher_forced_ones(tmp_path / "checkpoint_best.pt")


def _assert_beam_search_scores_are_the_teacher_forced_ones(checkpoint):
    """Beam search with the trained sparse output: many next-token probabilities are exact
    zeros (log-probability -inf) and the hypotheses' token scores are the teacher-forced ones."""
    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    assert model.output_mapping == "sparsemax"
    model.eval()
    sample = translation_batch(task)
    generator = GENERATOR([model], task.target_dictionary, beam_size=5, max_len_b=30)
    zeros = total = 0
    with torch.no_grad():
        hypos = generator.generate([model], sample)
        for i, sentence_hypos in enumerate(hypos):
            src = sample["net_input"]["src_tokens"][i : i + 1]
            src = src[src != task.source_dictionary.pad()].unsqueeze(0)
            for hypo in sentence_hypos:
                assert math.isfinite(hypo["score"])
                tokens = hypo["tokens"].unsqueeze(0)
                prev = torch.cat(
                    [tokens.new_full((1, 1), task.target_dictionary.eos()), tokens[:, :-1]], dim=1
                )
                scores, _ = model(src, torch.tensor([src.size(1)]), prev)
                lprobs = model.get_normalized_probs((scores, None), log_probs=True)
                zeros += int((lprobs == -math.inf).sum())
                total += lprobs.numel()
                positional = lprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)[0]
                torch.testing.assert_close(
                    positional, hypo["positional_scores"], rtol=1e-4, atol=1e-4
                )
    assert zeros > 0, total  # a sparse output: some tokens ruled out


def _never_ending_model(translation_data, output):
    """An untrained model whose output mapping gives EOS probability 0 at every step: it
    never ends a sentence by itself."""
    torch.manual_seed(0)
    task, model = build_model(
        translation_data, MODEL_ARGS["regattn_lstm"], ["--output-mapping", output]
    )
    with torch.no_grad():
        model.decoder.fc_out.bias[task.target_dictionary.eos()] = -1e4
    return task, model.eval()


@pytest.mark.parametrize("output", list(OUTPUTS))
def test_beam_search_ends_at_max_len_where_eos_has_probability_zero(output, translation_data):
    """fairseq forces EOS at the maximum length and keeps only finite-scored candidates: with
    p(EOS) = 0 in every hypothesis, stock fairseq fails (`AssertionError: 6 < 6`). The
    plugin's beam search (the one `task.build_generator` and fairseq-generate build) ends the
    hypotheses there, truncated, ranked by their tokens' scores."""
    task, model = _never_ending_model(translation_data, output)
    sample = translation_batch(task)
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    assert (lprobs[..., task.target_dictionary.eos()] == -math.inf).all()

    args = argparse.Namespace(beam=3, max_len_a=0, max_len_b=6, nbest=3)
    _assert_stock_fairseq_fails(model, task.target_dictionary, sample)

    generator = task.build_generator([model], args)
    assert isinstance(generator.search, fairseq_adapter._SparseOutputBeamSearch)
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    assert len(hypos) == sample["nsentences"]
    for sentence_hypos in hypos:
        assert len(sentence_hypos) == 3
        for hypo in sentence_hypos:
            # 6 tokens, then the forced EOS with the stand-in for log 0
            assert hypo["tokens"].tolist()[-1] == task.target_dictionary.eos()
            assert len(hypo["tokens"]) == 7
            positional = hypo["positional_scores"]
            assert positional[-1] == fairseq_adapter.TRUNCATED_EOS_LOG_PROB
            assert torch.isfinite(positional[:-1]).all()
        # ranked by the scores of the tokens they hold
        token_scores = [float(h["positional_scores"][:-1].sum()) for h in sentence_hypos]
        assert token_scores == sorted(token_scores, reverse=True)


def _scripted_model(translation_data, script):
    """(task, model, steps): a model whose next-token distribution at decoding step t puts all
    its mass on the token script(t, dictionary); `steps` counts the decoder calls."""
    task, model = build_model(
        translation_data, MODEL_ARGS["regattn_lstm"], ["--output-mapping", "sparsemax"]
    )
    model.eval()
    dictionary, steps = task.target_dictionary, []

    def scripted(net_output, log_probs, sample=None):
        lprobs = torch.full_like(net_output[0], -math.inf)
        lprobs[..., script(len(steps), dictionary)] = 0.0
        steps.append(len(steps))
        return lprobs

    model.get_normalized_probs = scripted
    return task, model, steps


def test_beam_search_ends_a_sentence_left_without_a_finite_continuation(translation_data):
    """Fewer nonzero tokens than the beam fill the beam with -inf candidates, which can never
    end. Here step 0 allows one word and step 1 only EOS: one hypothesis ends, the other two
    are -inf. Stock fairseq waits for 3 hypotheses and fails at the maximum length; the
    plugin's generator ends the sentence at step 1 with the one that ended."""
    task, model, steps = _scripted_model(
        translation_data, lambda t, d: d.index("w3") if t == 0 else d.eos()
    )
    dictionary, sample = task.target_dictionary, translation_batch(task)
    _assert_stock_fairseq_fails(model, dictionary, sample)
    steps.clear()
    with torch.no_grad():
        hypos = GENERATOR([model], dictionary, **MAX_LEN_6).generate([model], sample)
    assert len(steps) == 2  # steps 0 and 1, not on to the maximum length
    assert len(hypos) == sample["nsentences"]
    for sentence_hypos in hypos:
        tokens = [h["tokens"].tolist() for h in sentence_hypos]
        assert tokens == [[dictionary.index("w3"), dictionary.eos()]]
        assert sentence_hypos[0]["score"] == 0.0


def test_beam_search_stops_at_max_len_when_no_hypothesis_can_end(translation_data):
    """A model that puts all its mass on padding (which fairseq rules out) after one word: no
    hypothesis has a finite score left and none can end. Stock fairseq asserts at the maximum
    length; the plugin's stops there, with no hypothesis for those sentences (decode() then
    names them: tests/experiments/decode/test_decode.py)."""
    task, model, _ = _scripted_model(
        translation_data, lambda t, d: d.index("w3") if t == 0 else d.pad()
    )
    dictionary, sample = task.target_dictionary, translation_batch(task)
    _assert_stock_fairseq_fails(model, dictionary, sample)
    with torch.no_grad():
        hypos = GENERATOR([model], dictionary, **MAX_LEN_6).generate([model], sample)
    assert hypos == [[] for _ in range(sample["nsentences"])]


def test_beam_search_is_fairseqs_where_eos_can_end_a_sentence(translation_data):
    """With softmax (no exact zeros) the plugin's beam search finds exactly stock fairseq's
    hypotheses and scores."""
    torch.manual_seed(0)
    task, model = build_model(translation_data, MODEL_ARGS["regattn_lstm"])
    model.eval()
    sample = translation_batch(task)
    kwargs = dict(beam_size=4, max_len_a=0, max_len_b=5)
    ours = GENERATOR([model], task.target_dictionary, **kwargs)
    assert isinstance(ours.search, fairseq_adapter._SparseOutputBeamSearch)
    stock = STOCK_GENERATOR(
        [model],
        task.target_dictionary,
        **kwargs,
        search_strategy=STOCK_BEAM_SEARCH(task.target_dictionary),
    )
    with torch.no_grad():
        for a, b in zip(
            ours.generate([model], sample), stock.generate([model], sample), strict=True
        ):
            assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
            for ha, hb in zip(a, b, strict=True):
                torch.testing.assert_close(ha["positional_scores"], hb["positional_scores"])


def test_bad_output_mapping_is_an_argparse_error(translation_data):
    with pytest.raises(SystemExit):
        build_model(translation_data, MODEL_ARGS["regattn_lstm"], ["--output-mapping", "entmax"])
