"""The attention-gradient diagnostic (issue #17 item 7): hand cases of the row statistics, and
a per-epoch measurement of tiny trained models."""

import json
import shutil

import pytest
import torch
from plugin_helpers import COMMON_ARGS, MODEL_ARGS, SEQ2SEQ_TRAIN_ARGS, train_in_process

from regattn import mappings
from regattn_fairseq.experiments.core.errors import ReproError
from regattn_fairseq.experiments.studies import attention_gradients


def _backward_stats(name, scores, upstream, mask=None, gamma=1.0):
    scores = scores.clone().requires_grad_(True)
    probs = mappings.build(name, empty="zero", gamma=gamma)(scores, dim=-1, mask=mask)
    probs.retain_grad()
    (probs * upstream).sum().backward()
    return attention_gradients.row_statistics(
        scores.detach(), probs.detach(), scores.grad, probs.grad, mask, gamma
    )


def test_sparsemax_with_support_one_passes_no_gradient_softmax_does():
    scores = torch.tensor([[3.0, 0.5, 0.0, -1.0]])  # margin 2.5 > 1: sparsemax support {0}
    upstream = torch.tensor([[0.0, 1.0, -2.0, 0.5]])
    sparse = _backward_stats("sparsemax", scores, upstream)
    assert sparse["support_one"] == 1 and sparse["zero_grad_scores"] == 1
    assert sparse["grad_scores"] == 0.0 and sparse["grad_probs"] > 0
    assert sparse["margin"] == pytest.approx(2.5)
    dense = _backward_stats("softmax", scores, upstream)
    assert dense["support_one"] == 0 and dense["zero_grad_scores"] == 0
    assert dense["grad_scores"] > 0
    # a higher temperature widens the support and lets gradient through
    warm = _backward_stats("sparsemax", scores, upstream, gamma=4.0)
    assert warm["support"] >= 2 and warm["grad_scores"] > 0
    assert warm["margin"] == pytest.approx(2.5 / 4.0)


def test_masked_positions_and_empty_rows_are_left_out():
    scores = torch.tensor([[1.0, 0.9, 50.0], [0.0, 0.0, 0.0], [0.0, 1.0, 2.0]])
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    # the third row's loss gradient is zero: a padded target step
    upstream = torch.tensor([[1.0, -1.0, 7.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    stats = _backward_stats("sparsemax", scores, upstream, mask=mask)
    assert stats["rows"] == 1 and stats["support"] == 2.0
    assert stats["margin"] == pytest.approx(0.1, abs=1e-6)
    # ∂L/∂p centred over the two positions: (1, -1) -> norm sqrt(2)
    assert stats["grad_probs"] == pytest.approx(2**0.5)


def test_summary_of_nothing_is_an_error():
    with pytest.raises(ReproError, match="no attention rows"):
        attention_gradients.summarize({"rows": 0}, 0.0, 1)


def _train(data, save_dir, mapping):
    common = [a for a in COMMON_ARGS if a != "--no-epoch-checkpoints"]
    argv = [str(data), *SEQ2SEQ_TRAIN_ARGS, *MODEL_ARGS["regattn_lstm"], *common]
    train_in_process([*argv, "--attention", mapping, "--save-dir", str(save_dir)])


def _prepared_copy(translation_data, root):
    """The tiny data laid out as the suite prepares it (bin/ and a stamp.json manifest), so
    that --bleu can find its evaluation set."""
    shutil.copytree(translation_data, root / "bin")
    refs = translation_data.parent / "raw" / "test.tgt"
    manifest = {
        "dataset": "tiny",
        "evaluations": {"test": {"subset": "test", "refs": [str(refs)], "detokenize": "en"}},
    }
    (root / "stamp.json").write_text(json.dumps({"manifest": manifest}))
    return root / "bin"


def test_per_epoch_measurement_of_trained_models(translation_data, tmp_path):
    data = _prepared_copy(translation_data, tmp_path / "data")
    for mapping in ("softmax", "sparsemax"):
        _train(data, tmp_path / mapping / "checkpoints", mapping)
    out = tmp_path / "gradients.json"
    attention_gradients.main(
        [
            str(tmp_path / "softmax"),
            str(tmp_path / "sparsemax"),
            "--out",
            str(out),
            "--init",
            "--bleu",
            "test",
        ]
    )
    report = json.loads(out.read_text())
    assert report["provenance"]["git_commit"]
    by_mapping = {}
    for run in report["runs"]:
        assert run["seed"] == 1 and run["data"] == str(data)
        assert run["optimization"]["max_epoch"] == 3
        epochs = run["epochs"]
        assert [e["epoch"] for e in epochs] == list(range(len(epochs))) and len(epochs) >= 3
        by_mapping[epochs[0]["mapping"]["name"]] = epochs
        # epoch 0 is the run's own initial model: the embedding rows of the dictionaries'
        # padding symbols, which training never updates, match the trained checkpoint's
        assert epochs[0]["init_check"]["rows"] > 0
        assert epochs[0]["init_check"]["max_abs_diff"] == 0.0
        assert "bleu" not in epochs[0]
        for e in epochs:
            assert e["rows"] > 0 and e["valid_nll"] > 0
            assert 1.0 <= e["mean_support"] and 0.0 <= e["support_one_fraction"] <= 1.0
            assert 0.0 < e["mean_top_prob"] <= 1.0
            # the mapping agrees with an independent implementation, forward and backward
            check = e["reference_check"]
            assert check["rows"] == e["rows"] and check["grad_scale"] > 0
            assert check["forward"] < 1e-5 and check["backward"] < 1e-5 * check["grad_scale"]
            assert e["gradcheck"]["passed"] and e["gradcheck"]["rows"] > 0
        for e in epochs[1:]:
            assert 0.0 <= e["bleu"] <= 100.0 and e["bleu_eval"]["beam"] == 5
    for e in by_mapping["softmax"]:
        assert e["zero_grad_scores_fraction"] == 0.0 and e["pass_ratio"] > 0
    # sparsemax: exactly the rows with a single supported position get no score gradient
    for e in by_mapping["sparsemax"]:
        assert e["zero_grad_scores_fraction"] >= e["support_one_fraction"]
    assert out.with_suffix(".png").stat().st_size > 0
    with pytest.raises(ReproError, match="never overwritten"):
        attention_gradients.main([str(tmp_path / "softmax"), "--out", str(out)])


def test_reference_check_sees_a_wrong_backward():
    scores = torch.tensor([[1.0, 0.8, -0.5, 0.2], [2.0, 0.0, 0.1, 0.3]])
    upstream = torch.tensor([[0.3, -1.0, 2.0, 0.5], [1.0, 0.0, -1.0, 0.0]])
    leaf = scores.clone().requires_grad_(True)
    probs = mappings.build("sparsemax", gamma=2.0)(leaf, dim=-1)
    (probs * upstream).sum().backward()
    good = attention_gradients.reference_check(
        "sparsemax", 2.0, scores, probs.detach(), leaf.grad, upstream, None
    )
    assert good["forward"] < 1e-6 and good["backward"] < 1e-6 and good["rows"] == 2
    # the softmax formula in place of sparsemax's: caught
    wrong = probs.detach() * (upstream - (probs.detach() * upstream).sum(-1, keepdim=True)) / 2
    bad = attention_gradients.reference_check(
        "sparsemax", 2.0, scores, probs.detach(), wrong, upstream, None
    )
    assert bad["backward"] > 1e-2
    assert (
        attention_gradients.reference_check("fusedmax", 1.0, scores, probs, wrong, upstream, None)
        is None
    )


def test_a_run_without_epoch_checkpoints_is_an_error(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint_best.pt").write_bytes(b"")
    with pytest.raises(ReproError, match="no_epoch_checkpoints=false"):
        attention_gradients.epoch_checkpoints(tmp_path)


@pytest.mark.parametrize("alpha", [1.5, 1.3])
def test_reference_check_of_entmax_at_a_temperature(alpha):
    """1.5-entmax (and another alpha) at γ = 2 against the entmax package's, which sees s / γ;
    a backward that ignores 1/γ is caught; a learned alpha (None) is not checked."""
    scores = torch.tensor([[1.0, 0.8, -0.5, 0.2], [2.0, 0.0, 0.1, 0.3]])
    upstream = torch.tensor([[0.3, -1.0, 2.0, 0.5], [1.0, 0.0, -1.0, 0.0]])
    leaf = scores.clone().requires_grad_(True)
    probs = mappings.build("entmax", alpha=alpha, gamma=2.0)(leaf, dim=-1)
    (probs * upstream).sum().backward()
    args = (scores, probs.detach())
    good = attention_gradients.reference_check(
        "entmax", 2.0, *args, leaf.grad, upstream, None, alpha=alpha
    )
    assert good["forward"] < 1e-5 and good["backward"] < 1e-5 and good["rows"] == 2
    bad = attention_gradients.reference_check(
        "entmax", 2.0, *args, leaf.grad * 2.0, upstream, None, alpha=alpha
    )
    assert bad["backward"] > 1e-2
    assert (
        attention_gradients.reference_check(
            "entmax", 2.0, *args, leaf.grad, upstream, None, alpha=None
        )
        is None
    )


def test_a_named_checkpoint_that_is_missing_is_an_error(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ReproError, match="checkpoint_best.pt does not exist"):
        attention_gradients.main(
            [
                str(tmp_path / "run"),
                "--checkpoint",
                "checkpoint_best.pt",
                "--out",
                str(tmp_path / "g.json"),
            ]
        )


def test_figure_labels_entmax_alpha_and_marks_a_statistic_not_measured(tmp_path):
    """The legend names α (1.5-entmax, not "entmax"); a panel no run measured (BLEU without
    --bleu) says "not measured" instead of showing empty axes."""
    epochs = [
        {"epoch": e, "mapping": {"name": "entmax", "params": {"alpha": 1.5, "gamma": 1.0}}}
        | {key: 1.0 / (e + 1) for key, _ in attention_gradients.PLOTTED if key != "bleu"}
        for e in range(3)
    ]
    assert attention_gradients.run_label(epochs) == "entmax (γ=1, α=1.5)"
    import matplotlib.pyplot as plt

    texts = []
    original = plt.Axes.text

    def record(axis, *args, **kwargs):
        texts.append((axis.get_title(), args[2]))
        return original(axis, *args, **kwargs)

    plt.Axes.text = record
    try:
        png = attention_gradients.plot_report({"runs": [{"epochs": epochs}]}, tmp_path / "g.png")
    finally:
        plt.Axes.text = original
    assert png.is_file() and png.with_suffix(".pdf").is_file()
    assert texts == [("BLEU (beam 5)", "not measured")]
