"""The attention-gradient study (issue #17 item 7, studies/attention_gradients.py): hand cases of
the row statistics, a per-epoch measurement of tiny trained models, and the checks that what it
measures is the mapping's own: the rows of trained checkpoints and of fresh models against
independent implementations of softmax, sparsemax and entmax (forward, and backward given the
model's own ∂L/∂p), gradcheck of the model's normalizer on real rows, and epoch 0 being the model
its training started from."""

import json
import shutil

import pytest
import torch
from fairseq_helpers import (
    COMMON_ARGS,
    MODEL_ARGS,
    SEQ2SEQ_TRAIN_ARGS,
    build_model,
    train_in_process,
)

from regattn import mappings
from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.studies import attention_gradients

# the study's measurement settings (its command line's defaults)
MAX_SENTENCES, BATCH_SIZE = 400, 50


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


# The independent implementations the measured rows are checked against.
REFERENCE_MAPPINGS = ("softmax", "sparsemax", "entmax")


def _reference_mapping(name: str, z: torch.Tensor, alpha: float | None) -> torch.Tensor:
    """softmax, sparsemax or alpha-entmax of z by an implementation independent of regattn's
    (torch.softmax; the `entmax` package's sparsemax, entmax15 and, for another alpha,
    entmax_bisect)."""
    if name == "softmax":
        return torch.softmax(z, dim=-1)
    import entmax

    if name == "sparsemax" or alpha == 2:
        return entmax.sparsemax(z, dim=-1)
    if alpha == 1.5:
        return entmax.entmax15(z, dim=-1)
    return entmax.entmax_bisect(z, alpha, dim=-1, n_iter=80)


def reference_check(
    name, gamma, scores, probs, grad_scores, grad_probs, mask, alpha: float | None = None
) -> dict | None:
    """A mapping's output and vector-Jacobian product against an independent implementation.

    Parameters
    ----------
    name : str
        the mapping (softmax, sparsemax and entmax with a fixed alpha are checked).
    gamma : float
        its temperature.
    scores, probs, grad_scores, grad_probs, mask
        as in `attention_gradients.row_statistics` (mask may be None).
    alpha : float, optional
        entmax's alpha (None: learned, not checked).

    Returns
    -------
    dict or None
        Over the rows the loss depends on: ``forward`` (max |p − p_ref|), ``backward``
        (max |∂L/∂s − ∂L/∂s_ref| with ∂L/∂s_ref the reference's vector-Jacobian product of the
        model's own ∂L/∂p), ``grad_scale`` (max |∂L/∂s_ref|), ``term_scale`` (max |∂L/∂p|/γ over
        the reference's support: the size of the terms whose differences the product takes,
        w ⊙ (g − ⟨w, g⟩/Σw) with w ≤ 1, so float32 rounding of ∂L/∂s is a few ulps of it) and
        ``rows``; None for another mapping.
    """
    if name not in REFERENCE_MAPPINGS or (name == "entmax" and not isinstance(alpha, float)):
        return None
    if mask is None:
        mask = torch.ones_like(probs, dtype=torch.bool)
    keep = mask.any(dim=-1) & (grad_probs != 0).any(dim=-1)
    mask = mask[keep]
    leaf = scores[keep].double().requires_grad_(True)
    # masked positions far below every score: outside any support, zero weight and gradient
    z = (leaf / gamma).masked_fill(~mask, -1e6)
    reference = _reference_mapping(name, z, alpha)
    reference.backward(grad_probs[keep].double())
    return {
        "forward": float((reference.detach() - probs[keep].double()).abs().max()),
        "backward": float((leaf.grad - grad_scores[keep].double()).abs().max()),
        "grad_scale": float(leaf.grad.abs().max()),
        "term_scale": float(
            (grad_probs[keep].double().abs() * (reference.detach() > 0)).max() / gamma
        ),
        "rows": int(keep.sum()),
    }


def gradcheck_rows(rows: attention_gradients.AttentionRows, count: int = 16) -> bool:
    """torch.autograd.gradcheck of the model's own normalizer on the first `count` real rows
    that have a position to attend to, in double."""
    mask = rows.mask if rows.mask is not None else torch.ones_like(rows.scores, dtype=torch.bool)
    keep = mask.any(dim=-1).nonzero().squeeze(-1)[:count]
    leaf = rows.scores[keep].detach().double().requires_grad_(True)
    return torch.autograd.gradcheck(
        lambda x: rows.module(x, mask[keep]), (leaf,), eps=1e-6, atol=1e-5, raise_exception=False
    )


def assert_rows_are_the_mappings_own(model, task) -> None:
    """Every row the study measures on `model`'s validation sentences agrees with an
    independent implementation of its mapping, forward and backward (the largest differences
    over all rows; the backward's within float32 rounding of the terms it subtracts, and far
    below the largest |∂L/∂s|, which a wrong product misses by its own size), and the model's
    normalizer passes gradcheck on the first batch's rows."""
    spec = model.attention_spec
    batches = list(
        attention_gradients.teacher_forced_batches(model, task, "valid", MAX_SENTENCES, BATCH_SIZE)
    )
    checks, measured = [], 0
    for _nll, _tokens, calls in batches:
        for rows in calls:
            checks.append(
                reference_check(
                    spec.name, rows.gamma, *rows.as_tuple(), alpha=spec.params.get("alpha")
                )
            )
            measured += attention_gradients.row_statistics(*rows.as_tuple(), rows.gamma)["rows"]
    assert measured > 0 and sum(check["rows"] for check in checks) == measured
    grad_scale = max(check["grad_scale"] for check in checks)
    assert grad_scale > 0
    assert max(check["forward"] for check in checks) < 1e-5
    term_scale = max(check["term_scale"] for check in checks)
    backward = max(check["backward"] for check in checks)
    # ∂L/∂s is a difference of terms up to term_scale in size: float32 rounding leaves a few
    # ulps of it (1e-5 is ~80 ulps), however small the difference itself comes out
    assert backward < 1e-5 * term_scale
    assert backward < 1e-3 * grad_scale
    # after the batches: the study's hooks are gone, so gradcheck's calls are not recorded
    assert gradcheck_rows(batches[0][2][0])


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


TRAINED_MAPPINGS = ("softmax", "sparsemax")


@pytest.fixture(scope="module")
def trained_runs(translation_data, tmp_path_factory):
    """Run folders of tiny LSTMs trained 3 epochs with each of TRAINED_MAPPINGS (one
    checkpoint per epoch), on the tiny data laid out as the suite prepares it."""
    root = tmp_path_factory.mktemp("gradients")
    data = _prepared_copy(translation_data, root / "data")
    for mapping in TRAINED_MAPPINGS:
        _train(data, root / mapping / "checkpoints", mapping)
    return {"data": data, **{mapping: root / mapping for mapping in TRAINED_MAPPINGS}}


def test_per_epoch_measurement_of_trained_models(trained_runs, tmp_path):
    out = tmp_path / "gradients.json"
    runs = [str(trained_runs[mapping]) for mapping in TRAINED_MAPPINGS]
    attention_gradients.main([*runs, "--out", str(out), "--init"])
    report = json.loads(out.read_text())
    assert report["provenance"]["git_commit"]
    by_mapping = {}
    for run in report["runs"]:
        assert run["seed"] == 1 and run["data"] == str(trained_runs["data"])
        assert run["optimization"]["max_epoch"] == 3
        epochs = run["epochs"]
        assert [e["epoch"] for e in epochs] == list(range(len(epochs))) and len(epochs) >= 3
        by_mapping[epochs[0]["mapping"]["name"]] = epochs
        for e in epochs:
            assert e["rows"] > 0 and e["valid_nll"] > 0
            assert 1.0 <= e["mean_support"] and 0.0 <= e["support_one_fraction"] <= 1.0
            assert 0.0 < e["mean_top_prob"] <= 1.0
            assert "bleu" not in e  # decoded only with --bleu (next test)
    for e in by_mapping["softmax"]:
        assert e["zero_grad_scores_fraction"] == 0.0 and e["pass_ratio"] > 0
    # sparsemax: exactly the rows with a single supported position get no score gradient
    for e in by_mapping["sparsemax"]:
        assert e["zero_grad_scores_fraction"] >= e["support_one_fraction"]
    assert out.with_suffix(".png").stat().st_size > 0
    with pytest.raises(ReproError, match="never overwritten"):
        attention_gradients.main([str(trained_runs["softmax"]), "--out", str(out)])


@pytest.mark.slow  # three fairseq-generate processes: 30-95 s of the default suite
def test_bleu_per_epoch_decodes_each_trained_checkpoint(trained_runs, tmp_path):
    """--bleu on one run (each checkpoint is a fairseq-generate process: the other mapping
    would only repeat the same decoding)."""
    out = tmp_path / "gradients.json"
    attention_gradients.main(
        [str(trained_runs["sparsemax"]), "--out", str(out), "--init", "--bleu", "test"]
    )
    [run] = json.loads(out.read_text())["runs"]
    epochs = run["epochs"]
    assert "bleu" not in epochs[0]  # the initial model is measured, not decoded
    for e in epochs[1:]:
        assert 0.0 <= e["bleu"] <= 100.0 and e["bleu_eval"]["beam"] == 5
        assert e["bleu_eval"]["evaluation"] == "test"


@pytest.mark.parametrize("mapping", TRAINED_MAPPINGS)
def test_measured_rows_of_every_epoch_are_the_mappings_own(trained_runs, mapping):
    checkpoints = attention_gradients.epoch_checkpoints(trained_runs[mapping])
    assert_rows_are_the_mappings_own(*attention_gradients.initial_model(checkpoints[0]))
    for path in checkpoints:
        assert_rows_are_the_mappings_own(*attention_gradients.load_checkpoint(path))


@pytest.mark.parametrize("mapping", TRAINED_MAPPINGS)
def test_epoch_zero_is_the_model_training_started_from(trained_runs, mapping):
    """The rebuilt initial model has the trained checkpoint's embedding rows of the symbols
    training never sees (fairseq's ``madeupword`` padding of the dictionaries: they get no
    gradient, so Adam leaves them at their initial values)."""
    path = attention_gradients.epoch_checkpoints(trained_runs[mapping])[-1]
    initial, task = attention_gradients.initial_model(path)
    trained, _ = attention_gradients.load_checkpoint(path)
    compared = 0
    for name, dictionary in (
        ("encoder.embed_tokens.weight", task.source_dictionary),
        ("decoder.embed_tokens.weight", task.target_dictionary),
    ):
        unused = [i for i, symbol in enumerate(dictionary.symbols) if symbol.startswith("madeup")]
        fresh = initial.state_dict()[name][unused]
        assert torch.equal(fresh, trained.state_dict()[name][unused]), name
        compared += len(unused)
    assert compared > 0


@pytest.mark.parametrize(
    "mapping, options",
    [
        ("softmax", []),
        ("sparsemax", ["--attention-gamma", "2"]),
        ("entmax", ["--attention-alpha", "1.5"]),
        ("entmax", ["--attention-alpha", "1.3", "--attention-gamma", "2"]),
    ],
)
def test_measured_rows_of_a_fresh_model_are_the_mappings_own(translation_data, mapping, options):
    task, model = build_model(
        translation_data, MODEL_ARGS["regattn_lstm"], ["--attention", mapping, *options]
    )
    assert_rows_are_the_mappings_own(model, task)


def test_gradient_measurement_uses_the_mappings_own_jacobian(translation_data):
    task, model = build_model(
        translation_data,
        MODEL_ARGS["regattn_lstm"],
        ["--attention", "sparsemax", "--attention-grad-surrogate", "softmax"],
    )
    stats = attention_gradients.measure_model(model, task, "valid", 8, 4)
    assert stats["trained_grad_surrogate"] == "softmax" and stats["rows"] > 0
    assert model.decoder.attention.grad_surrogate is None
    # measured through sparsemax's Jacobian
    assert_rows_are_the_mappings_own(model, task)


def test_reference_check_sees_a_wrong_backward():
    scores = torch.tensor([[1.0, 0.8, -0.5, 0.2], [2.0, 0.0, 0.1, 0.3]])
    upstream = torch.tensor([[0.3, -1.0, 2.0, 0.5], [1.0, 0.0, -1.0, 0.0]])
    leaf = scores.clone().requires_grad_(True)
    probs = mappings.build("sparsemax", gamma=2.0)(leaf, dim=-1)
    (probs * upstream).sum().backward()
    good = reference_check("sparsemax", 2.0, scores, probs.detach(), leaf.grad, upstream, None)
    assert good["forward"] < 1e-6 and good["backward"] < 1e-6 and good["rows"] == 2
    # the softmax formula in place of sparsemax's: caught
    wrong = probs.detach() * (upstream - (probs.detach() * upstream).sum(-1, keepdim=True)) / 2
    bad = reference_check("sparsemax", 2.0, scores, probs.detach(), wrong, upstream, None)
    assert bad["backward"] > 1e-2
    assert reference_check("fusedmax", 1.0, scores, probs, wrong, upstream, None) is None


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
    good = reference_check("entmax", 2.0, *args, leaf.grad, upstream, None, alpha=alpha)
    assert good["forward"] < 1e-5 and good["backward"] < 1e-5 and good["rows"] == 2
    bad = reference_check("entmax", 2.0, *args, leaf.grad * 2.0, upstream, None, alpha=alpha)
    assert bad["backward"] > 1e-2
    assert reference_check("entmax", 2.0, *args, leaf.grad, upstream, None, alpha=None) is None


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
