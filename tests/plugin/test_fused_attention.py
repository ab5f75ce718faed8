"""--attention-impl: the fairseq Transformer's multi-head attention by the fused kernels of
regattn.attention (run in Triton's interpreter on CPU tensors) against its row-wise path, in
the output and every gradient (inputs, projections, learned alphas): self-attention with key
padding, the decoder's future mask, another -inf attn_mask, cross-attention, and a whole
model's training step; the calls the fused path leaves to the row-wise one (weights asked
for, incremental decoding); the choice under "auto"; the errors of "fused" where it cannot
run. Small shapes: the interpreter runs each program in numpy.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from fairseq_helpers import MODEL_ARGS, build_model, translation_batch  # noqa: E402

from regattn.mappings import _kernels  # noqa: E402
from regattn_fairseq.models.regattn_transformer import RegattnTransformerConfig  # noqa: E402
from regattn_fairseq.modules import (  # noqa: E402
    AttentionNormalizer,
    RegattnMultiheadAttention,
    attention_impl_from_cfg,
    attention_spec_from_cfg,
)
from regattn_fairseq.modules import regattn_multihead_attention as mha  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
    "ignore:All-NaN slice encountered:RuntimeWarning",
)

EMBED, HEADS, KDIM = 16, 2, 12
TGT, SRC, BSZ = 6, 9, 3
# attention options -> (the options of RegattnTransformerConfig)
MAPPINGS = {
    "sparsemax": {"attention": "sparsemax"},
    "entmax15": {"attention": "entmax"},
    "entmax_gamma": {"attention": "entmax", "attention_alpha": "1.3", "attention_gamma": 2.0},
    "learned": {"attention": "entmax", "attention_alpha": "learned", "attention_gamma": 0.5},
}
TOL = 1e-4  # float32 on both paths, relative to the largest entry


def attention_module(case="sparsemax", kind="self", impl="fused", dropout=0.0, **options):
    cfg = RegattnTransformerConfig(**{**MAPPINGS[case], **options})
    spec = attention_spec_from_cfg(cfg, "regattn_transformer", allow_learned_alpha=True)
    torch.manual_seed(0)
    module = RegattnMultiheadAttention(
        EMBED,
        HEADS,
        kdim=KDIM if kind == "cross" else None,
        vdim=KDIM if kind == "cross" else None,
        dropout=dropout,
        self_attention=kind == "self",
        encoder_decoder_attention=kind == "cross",
        normalizer=AttentionNormalizer(spec, HEADS),
        attention_impl=impl,
    )
    if spec.learned_alpha:  # alphas apart per head, so that a mixed-up one shows
        with torch.no_grad():
            module.normalizer.alpha_logit.copy_(torch.tensor([-1.0, 1.2]))
    return module


def inputs(kind, seed=1):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(TGT, BSZ, EMBED, generator=g) * 2
    source = torch.randn(SRC, BSZ, KDIM, generator=g) * 2 if kind == "cross" else None
    padding = torch.zeros(BSZ, SRC if kind == "cross" else TGT, dtype=torch.bool)
    padding[1, -2:] = True
    padding[2, -4:] = True
    return query, source, padding


def future_mask(length):
    """fairseq's buffered_future_mask: -inf above the diagonal."""
    return torch.triu(torch.full((length, length), float("-inf")), 1)


def run(module, impl, query, source=None, **kwargs):
    """(output, {name: gradient}) of the module's forward and a fixed backward under `impl`."""
    module.attention_impl = impl
    module.zero_grad()
    query = query.clone().requires_grad_()
    source = None if source is None else source.clone().requires_grad_()
    out, _ = module(query, source, source, need_weights=False, **kwargs)
    out.backward(torch.linspace(-1, 1, out.numel()).view_as(out))
    grads = {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}
    grads["query"] = query.grad
    if source is not None:
        grads["source"] = source.grad
    return out.detach(), grads


def assert_close(actual, expected, name=""):
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual, expected, atol=TOL * scale, rtol=0, msg=name)


@pytest.fixture
def fused_calls(monkeypatch):
    """The calls of the fused attention (their `causal` and whether a mask was given)."""
    calls = []
    fused = mha.sparse_attention

    def counted(*args, **kwargs):
        calls.append((kwargs["causal"], kwargs["mask"] is not None))
        return fused(*args, **kwargs)

    monkeypatch.setattr(mha, "sparse_attention", counted)
    return calls


def compare(module, query, source=None, **kwargs):
    out, grads = run(module, "fused", query, source, **kwargs)
    expected, expected_grads = run(module, "rowwise", query, source, **kwargs)
    assert_close(out, expected, "output")
    assert grads.keys() == expected_grads.keys()
    if module.normalizer.spec.learned_alpha:
        assert "normalizer.alpha_logit" in grads
    for name, grad in grads.items():
        assert_close(grad, expected_grads[name], name)


@pytest.mark.parametrize("case", list(MAPPINGS))
def test_self_attention_with_key_padding(case, fused_calls):
    query, _, padding = inputs("self")
    compare(attention_module(case), query, key_padding_mask=padding)
    assert fused_calls == [(False, True)]


@pytest.mark.parametrize("case", ["entmax15", "learned"])
def test_decoder_self_attention_with_the_future_mask(case, fused_calls):
    query, _, padding = inputs("self")
    compare(attention_module(case), query, attn_mask=future_mask(TGT), key_padding_mask=padding)
    compare(attention_module(case), query, attn_mask=future_mask(TGT))
    # the future mask goes to the kernel as its causal flag, with no tgt x src mask
    assert fused_calls == [(True, True), (True, False)]


def test_another_neg_inf_attn_mask_is_a_mask():
    query, _, padding = inputs("self")
    g = torch.Generator().manual_seed(3)
    attn_mask = torch.zeros(TGT, TGT).masked_fill(torch.rand(TGT, TGT, generator=g) > 0.6, -1e30)
    attn_mask = attn_mask.masked_fill(attn_mask < 0, float("-inf"))
    attn_mask[:, 0] = 0.0
    compare(attention_module("sparsemax"), query, attn_mask=attn_mask, key_padding_mask=padding)


@pytest.mark.parametrize("case", ["sparsemax", "learned"])
def test_cross_attention_with_key_padding(case, fused_calls):
    query, source, padding = inputs("cross")
    compare(attention_module(case, kind="cross"), query, source, key_padding_mask=padding)
    assert fused_calls == [(False, True)]


def test_calls_the_fused_path_does_not_serve_take_the_rowwise_one(fused_calls):
    query, _, padding = inputs("self")
    module = attention_module("entmax15")
    # the weights asked for (fairseq's decoder asks for its alignment layer's)
    out, weights = module(query, None, None, key_padding_mask=padding, need_weights=True)
    assert weights is not None and weights.shape == (BSZ, TGT, TGT)
    # an attn_mask with a finite bias
    module(query, None, None, attn_mask=torch.full((TGT, TGT), 0.5), need_weights=False)
    assert fused_calls == []
    # incremental decoding, step by step, gives the full sequence's causal attention
    full, _ = module(query, None, None, attn_mask=future_mask(TGT), need_weights=False)
    assert len(fused_calls) == 1
    state = {}
    steps = [
        module(query[t : t + 1], None, None, incremental_state=state, need_weights=False)[0]
        for t in range(TGT)
    ]
    assert len(fused_calls) == 1
    assert_close(torch.cat(steps), full)


def test_a_query_with_no_key_is_an_error_on_both_paths():
    # the mappings' default, empty="error": the kernels alone would give such a row zeros
    query, _, padding = inputs("self")
    module = attention_module("sparsemax")
    padding[0, 0] = True  # with the future mask, sentence 0's first query sees no key
    padding[1] = True  # sentence 1 is all padding
    for impl, attn_mask, kpm in (
        ("fused", None, padding),
        ("rowwise", None, padding),
        ("fused", future_mask(TGT), padding[[0]].expand(BSZ, -1)),
        ("rowwise", future_mask(TGT), padding[[0]].expand(BSZ, -1)),
    ):
        module.attention_impl = impl
        with pytest.raises(ValueError, match="no unmasked position"):
            module(query, None, None, key_padding_mask=kpm, attn_mask=attn_mask, need_weights=False)


def test_auto_takes_the_rowwise_path_on_the_cpu(fused_calls, monkeypatch):
    query, _, padding = inputs("self")
    module = attention_module("sparsemax", impl="auto")
    for interpreting in ("1", "0"):
        monkeypatch.setenv("TRITON_INTERPRET", interpreting)
        module(query, None, None, key_padding_mask=padding, need_weights=False)
    assert fused_calls == []


@pytest.mark.parametrize(
    "options, message",
    [
        ({"attention": "fusedmax"}, "the fused kernels compute sparsemax .* not .*fusedmax"),
        ({"attention": "entmax", "attention_alpha": "1.0"}, "the fused kernels .*'alpha': 1.0"),
        ({"attention_device": "cpu"}, "--attention-device cpu moves the mapping"),
        ({"dropout": 0.1}, "attention dropout 0.1"),
    ],
)
def test_fused_where_it_cannot_run_is_an_error_naming_why(options, message):
    dropout = options.pop("dropout", 0.0)
    module = attention_module("sparsemax", dropout=dropout, **options)
    query, _, _ = inputs("self")
    with pytest.raises(ValueError, match=f"--attention-impl='fused' cannot run: {message}"):
        module(query, None, None, need_weights=False)


def test_fused_on_float64_or_outside_the_interpreter_is_an_error(monkeypatch):
    module = attention_module("sparsemax")
    query, _, _ = inputs("self")
    with pytest.raises(ValueError, match="float16, bfloat16 or float32, got torch.float64"):
        module.double()(query.double(), None, None, need_weights=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="run on CUDA tensors"):
        module.float()(query, None, None, need_weights=False)


def test_the_option_reaches_every_attention_and_is_checked(translation_data):
    assert RegattnTransformerConfig().attention_impl == "auto"
    for impl in ("fused", "rowwise"):
        _, model = build_model(
            translation_data,
            MODEL_ARGS["regattn_transformer"],
            ["--attention", "sparsemax", "--attention-impl", impl],
        )
        modules = [m for m in model.modules() if isinstance(m, RegattnMultiheadAttention)]
        assert len(modules) == 3 and {m.attention_impl for m in modules} == {impl}
    with pytest.raises(ValueError, match="--attention-impl .*'flash' is not one of"):
        attention_impl_from_cfg({"attention_impl": "flash"})


def test_a_model_training_step_is_the_same_on_both_paths(translation_data, fused_calls):
    task, model = build_model(
        translation_data, MODEL_ARGS["regattn_transformer"], ["--attention", "entmax"]
    )
    batch = translation_batch(task, "train")
    results = {}
    for impl in ("fused", "rowwise"):
        for module in model.modules():
            if isinstance(module, RegattnMultiheadAttention):
                module.attention_impl = impl
        model.train()
        model.zero_grad()
        out, _ = model(**batch["net_input"])
        out.float().sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[impl] = out.detach(), grads
    # the encoder's self-attention and the decoder's; the decoder's one layer is its
    # alignment layer, whose cross-attention weights fairseq asks for: row-wise
    assert [causal for causal, _ in fused_calls] == [False, True]
    assert_close(results["fused"][0], results["rowwise"][0], "logits")
    for name, grad in results["fused"][1].items():
        assert_close(grad, results["rowwise"][1][name], name)
