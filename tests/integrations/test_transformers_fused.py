"""The `transformers` backends' fused path (regattn.attention's Triton kernels, run in Triton's
interpreter on CPU tensors) against their row-wise path on tiny random models: the same
logits and the same gradient of every parameter (the learned alphas too), with padding masks,
a causal decoder with grouped-query attention and an encoder-decoder's cross-attention; and
the choice between the two paths (`attention_impl`). Small shapes: the interpreter runs each
program in numpy.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hf_tiny_models import FUSED, HEADS, run_with_impl, tiny_batch, tiny_model  # noqa: E402

from regattn import attention  # noqa: E402
from regattn.integrations import transformers as rt  # noqa: E402
from regattn.mappings import _kernels  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
    "ignore:All-NaN slice encountered:RuntimeWarning",
)

rt.register()

# float32 on both paths, through two layers: a few float32 roundings of the logits' scale
TOL = 2e-4


def assert_close(actual, expected, name=""):
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, atol=TOL * scale, rtol=0, msg=name)


@pytest.mark.parametrize(
    "kind, case",
    [("encoder", case) for case in FUSED]
    + [("decoder", "sparsemax"), ("decoder", "entmax_learned"), ("encoder_decoder", "entmax15")],
)
def test_fused_equals_rowwise_in_logits_and_gradients(kind, case, monkeypatch):
    calls = []
    fused_attention = attention.sparse_attention

    def counted(*args, **kwargs):
        calls.append(kwargs["impl"])
        return fused_attention(*args, **kwargs)

    monkeypatch.setattr(attention, "sparse_attention", counted)
    logits, grads = run_with_impl(kind, case, "fused")
    assert calls and set(calls) == {"fused"}
    fused_calls = len(calls)
    expected_logits, expected_grads = run_with_impl(kind, case, "rowwise")
    assert len(calls) == fused_calls  # the row-wise path never calls the fused attention
    assert_close(logits, expected_logits, "logits")
    assert grads.keys() == expected_grads.keys() and len(grads) > 10
    if case == "entmax_learned":
        assert sum(name.endswith("alpha_logit") for name in grads) == len(calls)
    for name, grad in grads.items():
        assert_close(grad, expected_grads[name], name)


def test_left_padding_gives_fully_masked_rows_zeros_on_both_paths():
    # a causal model's left-padded query positions have no key: zeros on both paths (their
    # outputs are discarded), an error with empty="error" on both
    batch = tiny_batch("decoder", left_padding=True)
    results = {}
    for impl in ("fused", "rowwise"):
        model = tiny_model("decoder", "regattn_entmax15")
        rt.configure(model, attention_impl=impl)
        out = model(**batch)
        out.loss.backward()
        results[impl] = out.logits.detach(), model.model.layers[0].self_attn.q_proj.weight.grad
        rt.configure(model, empty="error", attention_impl=impl)
        with pytest.raises(ValueError, match="no unmasked position"):
            model(**batch)
    keep = batch["attention_mask"].bool()
    assert_close(results["fused"][0][keep], results["rowwise"][0][keep])
    assert_close(results["fused"][1], results["rowwise"][1])


def test_auto_takes_the_rowwise_path_on_the_cpu(monkeypatch):
    # "auto" takes the fused path for CUDA tensors only, with or without the interpreter
    def refuse(*args, **kwargs):
        raise AssertionError("auto took the fused path on CPU tensors")

    monkeypatch.setattr(attention, "sparse_attention", refuse)
    for interpreting in ("1", "0"):
        monkeypatch.setenv("TRITON_INTERPRET", interpreting)
        model = tiny_model("encoder", "regattn_sparsemax")
        rt.configure(model)
        assert getattr(rt.attention_modules(model)[0], rt.MAPPING_ATTRIBUTE).attention_impl == (
            "auto"
        )
        model(**tiny_batch("encoder")).loss.backward()


def test_fused_where_it_cannot_run_is_an_error_naming_why(monkeypatch):
    batch = tiny_batch("encoder")
    cases = [
        # (backend, configure's parameters, model settings, the error)
        ("fusedmax", {}, {}, "the fused kernels compute sparsemax .* not regattn_fusedmax"),
        ("entmax", {"alpha": 1.0}, {}, "the fused kernels .* not regattn_entmax \\(alpha=1.0"),
        ("sparsemax", {}, {"dropout": 0.1}, "dropout 0.1 on the attention weights"),
        ("sparsemax", {}, {"dtype": torch.float64}, "the fused kernels take float16, bfloat16"),
    ]
    for backend, params, settings, message in cases:
        model = tiny_model("encoder", rt.PREFIX + backend, **settings)
        rt.configure(model, attention_impl="fused", **params)
        with pytest.raises(ValueError, match=f"attention_impl='fused' cannot run: {message}"):
            model(**batch)
    model = tiny_model("encoder", "regattn_sparsemax")
    rt.configure(model, attention_impl="fused")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors outside the interpreter
    with pytest.raises(ValueError, match="run on CUDA tensors"):
        model(**batch)


def test_dropout_outside_training_and_output_attentions_under_fused_keep_working():
    # dropout applies in training only: in evaluation a model with attention dropout takes the
    # fused path; a call with output_attentions takes the row-wise path even under "fused"
    batch = tiny_batch("encoder")
    logits = {}
    for impl in ("fused", "rowwise"):
        model = tiny_model("encoder", "regattn_sparsemax", dropout=0.1).eval()
        rt.configure(model, attention_impl=impl)
        with torch.no_grad():
            logits[impl] = model(**batch).logits
            out = model(**batch, output_attentions=True)
        assert len(out.attentions) == 2 and out.attentions[0].shape == (3, HEADS, 9, 9)
        assert_close(out.logits, logits["fused"])
    assert_close(logits["fused"], logits["rowwise"])


def test_a_position_bias_or_a_biased_additive_mask_is_refused_by_fused():
    g = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))
    module = torch.nn.Module().eval()
    setattr(module, rt.MAPPING_ATTRIBUTE, rt.AttentionMapping("sparsemax", attention_impl="fused"))
    keep = torch.rand(2, 1, 1, 5, generator=g) > 0.3
    keep[..., 0] = True
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    # an additive mask of zeros and the minimum is a boolean mask: fused takes it
    fused, weights = rt.regattn_attention_forward("sparsemax", module, query, key, value, additive)
    assert weights is None
    getattr(module, rt.MAPPING_ATTRIBUTE).attention_impl = "rowwise"
    expected, _ = rt.regattn_attention_forward("sparsemax", module, query, key, value, keep)
    assert_close(fused, expected)
    getattr(module, rt.MAPPING_ATTRIBUTE).attention_impl = "fused"
    with pytest.raises(ValueError, match="adds a bias to the scores"):
        rt.regattn_attention_forward("sparsemax", module, query, key, value, additive + 0.5)
    with pytest.raises(ValueError, match="a position bias"):
        rt.regattn_attention_forward(
            "sparsemax", module, query, key, value, keep, position_bias=torch.zeros(1, 4, 5, 5)
        )
    with pytest.raises(ValueError, match="soft-capped"):
        rt.regattn_attention_forward("sparsemax", module, query, key, value, keep, softcap=5.0)


def test_attention_impl_is_recorded_saved_and_checked(tmp_path):
    model = tiny_model("encoder", "regattn_sparsemax")
    rt.configure(model, attention_impl="rowwise")
    assert model.config.regattn_attention["attention_impl"] == "rowwise"
    assert "attention_impl='rowwise'" in repr(model)
    model.save_pretrained(tmp_path)
    loaded = rt.from_pretrained(type(model), tmp_path)
    impls = {getattr(m, rt.MAPPING_ATTRIBUTE).attention_impl for m in rt.attention_modules(loaded)}
    assert impls == {"rowwise"}
    loaded = rt.from_pretrained(type(model), tmp_path, attention_impl="fused")
    impls = {getattr(m, rt.MAPPING_ATTRIBUTE).attention_impl for m in rt.attention_modules(loaded)}
    assert impls == {"fused"}
    with pytest.raises(ValueError, match="attention_impl must be one of auto, fused, rowwise"):
        rt.configure(model, attention_impl="flash")
    assert model.config.regattn_attention["attention_impl"] == "rowwise"
    unconfigured = tiny_model("encoder", "regattn_sparsemax")
    unconfigured.save_pretrained(tmp_path / "unconfigured")
    with pytest.raises(ValueError, match="saved without regattn settings"):
        rt.from_pretrained(type(model), tmp_path / "unconfigured", attention_impl="fused")
