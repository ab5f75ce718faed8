"""regattn.attention: the fused Triton kernels run in Triton's interpreter on CPU tensors
(TRITON_INTERPRET=1, set before triton is imported) against the row-wise reference in float64
(forward, dq, dk, dv and d alpha), with masks, key padding, causal, packed sequences, GQA and
cross-attention; the reference's own gradcheck in float64; input validation. Small shapes:
the interpreter runs each program in numpy.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton)")

from attention_cases import (  # noqa: E402
    MAPPINGS,
    alpha_of,
    assert_matches_reference,
    check_fused,
    make_inputs,
    run,
)

from regattn import attention, mappings  # noqa: E402
from regattn.attention import (  # noqa: E402
    SparseAttention,
    SparseAttentionFunction,
    sparse_attention,
    threshold_sweeps,
)
from regattn.mappings import _kernels  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero:RuntimeWarning",
    "ignore:invalid value:RuntimeWarning",
    "ignore:overflow encountered:RuntimeWarning",
    "ignore:All-NaN slice encountered:RuntimeWarning",
)

if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)


@pytest.mark.parametrize("key", list(MAPPINGS))
def test_fused_matches_the_reference(key):
    q, k, v, grad = make_inputs(1, lq=24, lk=40)
    check_fused(q, k, v, grad, alpha_of(key))


@pytest.mark.parametrize("key", list(MAPPINGS))
def test_fused_causal_with_a_mask(key):
    q, k, v, grad = make_inputs(2, lq=33, lk=33)
    mask = torch.rand(1, 2, 33, 33, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[0, 1, 5] = False  # a query with no key: zeros, zero gradient
    out = check_fused(q, k, v, grad, alpha_of(key), mask=mask, causal=True)
    assert (out[0][0, 1, 5] == 0).all()


@pytest.mark.parametrize("key", ["sparsemax", "alpha_per_head"])
def test_fused_key_padding_gqa_cross_attention(key):
    # 4 query heads on 2 KV heads, 12 queries on 21 keys, the last keys of batch 1 padded;
    # v with another head dim
    q, k, v, grad = make_inputs(3, b=2, hq=4, hk=2, lq=12, lk=21, d=16, dv=24)
    padding = torch.ones(2, 1, 1, 21, dtype=torch.bool)
    padding[1, ..., 17:] = False
    alpha = alpha_of(key)
    if isinstance(alpha, torch.Tensor):
        alpha = torch.tensor([1.1, 1.5, 1.9, 2.0], dtype=torch.float64)
    out = check_fused(q, k, v, grad, alpha, mask=padding)
    assert out[0].shape == (2, 4, 12, 24)
    assert (out[2][1, :, 17:] == 0).all() and (out[3][1, :, 17:] == 0).all()  # dk, dv


@pytest.mark.parametrize("key", ["entmax15", "alpha_per_head"])
def test_fused_packed_sequences(key):
    # three sequences of 9, 0 and 21 queries on 14, 5 and 30 keys, causal, GQA
    cu_q = torch.tensor([0, 9, 9, 30], dtype=torch.int32)
    cu_k = torch.tensor([0, 14, 19, 49], dtype=torch.int32)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(30, 2, 16, generator=g, dtype=torch.float64) * 1.5
    k = torch.randn(49, 1, 16, generator=g, dtype=torch.float64) * 1.5
    v = torch.randn(49, 1, 16, generator=g, dtype=torch.float64)
    grad = torch.randn(30, 2, 16, generator=g, dtype=torch.float64)
    out = check_fused(
        q, k, v, grad, alpha_of(key), causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k
    )
    # sequence 2 alone, as a dense batch of one, gives the same rows
    dense = run(
        "fused",
        q[9:].transpose(0, 1)[None],
        k[19:].transpose(0, 1)[None],
        v[19:].transpose(0, 1)[None],
        grad[9:].transpose(0, 1)[None],
        alpha_of(key),
        torch.float32,
        causal=True,
    )
    torch.testing.assert_close(out[0][9:], dense[0][0].transpose(0, 1), rtol=0, atol=1e-6)


def test_fused_half_precision_accumulates_in_float32():
    q, k, v, grad = make_inputs(5, lq=24, lk=40)
    for dtype in (torch.float16, torch.bfloat16):
        eps = torch.finfo(dtype).eps
        # the output and gradients are rounded to the dtype; P is rounded before P.V, as in
        # flash attention: a few of the dtype's rounding steps of the largest entry
        out = check_fused(q, k, v, grad, alpha_of("alpha_per_head"), dtype=dtype, tol=4 * eps)
        assert out[0].dtype == dtype


def test_strided_inputs():
    # (batch, length, heads, dim) projections seen as (batch, heads, length, dim), and a slice
    # that is not dense: the kernels address them (and their gradients) by their strides
    q, k, v, grad = make_inputs(19, b=2, hq=2, lq=16, lk=20)
    # its own generator: the global one's state depends on which tests ran before in the worker
    wide = torch.randn(
        2, 2, 20, 24, generator=torch.Generator().manual_seed(20), dtype=torch.float64
    )
    for alpha in (1.5, torch.tensor([1.3, 1.9])):
        xs = [x.float().transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k)]
        xs.append(wide.float()[..., 4:20])  # v: a slice of a wider tensor
        xs = [x.requires_grad_() for x in xs]
        a = alpha.clone().requires_grad_() if isinstance(alpha, torch.Tensor) else alpha
        out = sparse_attention(*xs, alpha=a, impl="fused")
        out.backward(grad.float())
        # the reference on the same float32-rounded inputs, in float64
        rounded = [x.float().double() for x in (q, k, wide[..., 4:20], grad)]
        ref = run("reference", *rounded, alpha, torch.float64)
        got = [out.detach()] + [x.grad for x in xs] + [a.grad if a is not alpha else None]
        assert_matches_reference(got, ref, 2e-5)
        assert xs[0].grad.stride() == xs[0].stride()


def test_fully_masked_rows_give_zeros_and_zero_gradients():
    q, k, v, grad = make_inputs(6, lq=16, lk=20)
    mask = torch.zeros(1, 1, 16, 20, dtype=torch.bool)
    mask[..., :8, :3] = True
    for alpha in (2.0, 1.5, torch.tensor([1.4, 1.6])):
        out, dq, dk, dv, _ = run("fused", q, k, v, grad, alpha, torch.float32, mask=mask)
        assert (out[:, :, 8:] == 0).all() and (dq[:, :, 8:] == 0).all()
        assert (dk[:, :, 3:] == 0).all() and (dv[:, :, 3:] == 0).all()
        assert torch.isfinite(out).all() and torch.isfinite(dq).all()


def test_ties_and_one_key():
    # equal scores (q = 0): every mapping is uniform over the allowed keys; one key: weight 1
    q, k, v, grad = make_inputs(7, lq=16, lk=24)
    q = torch.zeros_like(q)
    for alpha in (2.0, 1.5, torch.tensor([1.3, 1.9])):
        out = run("fused", q, k, v, grad, alpha, torch.float32)[0]
        torch.testing.assert_close(out, v.float().mean(2, keepdim=True).expand_as(out))
    one = run("fused", *make_inputs(8, lq=16, lk=1), 1.5, torch.float32)[0]
    torch.testing.assert_close(one, make_inputs(8, lq=16, lk=1)[2].float().expand_as(one))


def test_threshold_sweeps_are_few_and_exact_on_ties():
    # Newton on the p-norm from the lower bound: a handful of sweeps over the keys on random
    # scores (the last one confirms), one step when the support is a block of equal scores
    q, k, v, _ = make_inputs(18, lq=16, lk=96, spread=0.5)
    q, k, v = q.float(), k.float(), v.float()
    for alpha in (2.0, 1.5, torch.tensor([1.1, 1.9])):
        sweeps = threshold_sweeps(q, k, v, alpha=alpha)
        assert sweeps.shape == (1, 2, 16)
        assert 2 <= sweeps.min() and sweeps.max() <= 10, (alpha, sweeps.unique())
        ties = threshold_sweeps(torch.zeros(1, 2, 16, 16), k[:, :, :32], v[:, :, :32], alpha=alpha)
        # one step and one that confirms it; for a general alpha the powers' rounding
        # (exp and log in float32) can leave a step just above TOL: one more sweep
        most = 3 if isinstance(alpha, torch.Tensor) else 2
        assert (ties >= 2).all() and (ties <= most).all(), (alpha, ties.unique())
    with pytest.raises(ValueError, match="needs the fused kernels"):
        threshold_sweeps(q.double(), k.double(), v.double())


def test_large_scores_are_shifted_exactly():
    # scores up to 3e3, one-hot rows: the kernel works on z - max, exact to the float32
    # resolution of the scores (3e3 * 6e-8 = 2e-4)
    q, k, v, grad = make_inputs(9, lq=16, lk=24, spread=30.0)
    for alpha in (2.0, 1.5, torch.tensor([1.3, 1.9])):
        check_fused(q, k, v, grad, alpha, tol=2e-4)


def test_reference_gradcheck_float64():
    q, k, v, _ = make_inputs(10, b=1, hq=2, hk=1, lq=5, lk=6, d=3)
    alpha = torch.tensor([1.3, 1.7], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 1, 5, 6, dtype=torch.bool)
    mask[..., 4] = False
    xs = [x.requires_grad_() for x in (q, k, v)]

    def f(q, k, v, alpha):
        return sparse_attention(q, k, v, alpha=alpha, mask=mask, causal=True, impl="reference")

    assert torch.autograd.gradcheck(f, (*xs, alpha))
    for fixed in (2.0, 1.5):
        assert torch.autograd.gradcheck(
            lambda q, k, v, a=fixed: sparse_attention(q, k, v, alpha=a, impl="reference"), xs
        )


def test_reference_is_the_mapping_of_the_scores():
    # the reference is P = entmax(q k^T * scale) (masked), out = P v, exactly
    q, k, v, _ = make_inputs(11, lq=7, lk=9)
    scores = q @ k.transpose(-1, -2) * 0.3
    p = mappings.entmax(scores, alpha=1.5)
    out = sparse_attention(q, k, v, alpha=1.5, scale=0.3, impl="reference")
    torch.testing.assert_close(out, p @ v, rtol=0, atol=1e-14)


def test_the_module_learns_alpha():
    q, k, v, grad = make_inputs(12, b=2, hq=2, lq=16, lk=16)
    fused = SparseAttention(2, alpha=1.5, learn_alpha=True, impl="fused")
    ref = SparseAttention(2, alpha=1.5, learn_alpha=True, impl="reference")
    outs, logit_grads = [], []
    for module, dtype in ((fused, torch.float32), (ref, torch.float64)):
        module.to(dtype)
        out = module(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
        out.backward(grad.to(dtype))
        outs.append(out.double())
        logit_grads.append(module.alpha_logit.grad.double())
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=2e-5)
    torch.testing.assert_close(logit_grads[0], logit_grads[1], rtol=1e-4, atol=1e-5)
    assert (logit_grads[0] != 0).all()
    before = fused.alpha.detach().clone()
    torch.optim.SGD(fused.parameters(), lr=1.0).step()
    assert not torch.equal(fused.alpha.detach(), before)
    assert "learned" in repr(fused)


def test_auto_takes_the_reference_on_cpu():
    q, k, v, _ = make_inputs(13, lq=8, lk=8)
    called = []
    original = SparseAttentionFunction.apply

    def spy(*args):
        called.append(True)
        return original(*args)

    SparseAttentionFunction.apply = spy
    try:
        out = sparse_attention(q.float(), k.float(), v.float())
        fused = sparse_attention(q.float(), k.float(), v.float(), impl="fused")
    finally:
        SparseAttentionFunction.apply = original
    assert len(called) == 1  # only impl="fused"
    torch.testing.assert_close(out, fused, rtol=0, atol=2e-6)


def test_nonfinite_scores_are_flagged():
    q, k, v, _ = make_inputs(14, lq=16, lk=16)
    q = q.float()
    q[0, 0, 3, 0] = float("nan")
    with mappings.sync_checks(), pytest.raises(ValueError, match="NaN or infinite"):
        sparse_attention(q, k.float(), v.float(), impl="fused")


def test_alpha_out_of_range_is_flagged_by_the_kernel():
    # a CUDA tensor alpha is checked on the device; the kernel's flag, called directly
    q, k, v, _ = make_inputs(15, lq=16, lk=16)
    alpha = torch.tensor([1.5, 2.5])
    with mappings.sync_checks(), pytest.raises(ValueError, match=r"alpha must be in \(1, 2\]"):
        SparseAttentionFunction.apply(
            q.float(), k.float(), v.float(), alpha, None, False, 0.25, None, None, None, None
        )


BAD_INPUTS = {
    "rank": (lambda q, k, v: (q[0], k, v), {}, "must be \\(batch, heads, length, dim\\)"),
    "dtype": (lambda q, k, v: (q.double(), k, v), {}, "share a dtype"),
    "integer": (lambda q, k, v: (q.long(), k, v), {}, "floating-point"),
    "head dim": (lambda q, k, v: (q[..., :8], k, v), {}, "one head dim"),
    "batch": (lambda q, k, v: (q, k[:1], v[:1]), {}, "batch size"),
    "kv length": (lambda q, k, v: (q, k, v[:, :, :5]), {}, "same heads and length"),
    "gqa": (lambda q, k, v: (torch.cat([q, q[:, :1]], 1), k, v), {}, "multiple of the key/v"),
    "alpha 1": (None, {"alpha": 1.0}, "alpha must be a number in \\(1, 2\\]"),
    "alpha 3": (None, {"alpha": 3.0}, "alpha must be a number in \\(1, 2\\]"),
    "alpha tensor": (None, {"alpha": torch.tensor([1.5, 0.9])}, "alpha must be in \\(1, 2\\]"),
    "alpha shape": (None, {"alpha": torch.tensor([1.5, 1.5, 1.5])}, "one value per query head"),
    "mask dtype": (None, {"mask": torch.ones(1, 1, 1, 12)}, "mask must be a bool tensor"),
    "mask shape": (None, {"mask": torch.ones(1, 1, 1, 7, dtype=torch.bool)}, "must broadcast"),
    "scale": (None, {"scale": -1.0}, "scale must be a finite number > 0"),
    "impl": (None, {"impl": "flash"}, "impl must be one of"),
    "fused float64": (
        lambda q, k, v: (q.double(), k.double(), v.double()),
        {"impl": "fused"},
        "float16, bfloat16 or float32",
    ),  # fmt: skip
    "cu one": (None, {"cu_seqlens_q": torch.tensor([0, 4])}, "\\(tokens, heads, dim\\)"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_a_clear_value_error(case):
    change, kwargs, message = BAD_INPUTS[case]
    q, k, v, _ = make_inputs(16, b=2, lq=10, lk=12)
    q, k, v = q.float(), k.float(), v.float()
    if change is not None:
        q, k, v = change(q, k, v)
    with pytest.raises(ValueError, match=message):
        sparse_attention(q, k, v, **kwargs)


def test_bad_packed_sequences_are_value_errors():
    q = torch.randn(10, 2, 8)
    k = torch.randn(12, 2, 8)
    good_q, good_k = torch.tensor([0, 4, 10]), torch.tensor([0, 6, 12])
    with pytest.raises(ValueError, match="rise from 0 to the number of tokens \\(10\\)"):
        sparse_attention(q, k, k, cu_seqlens_q=torch.tensor([0, 4, 9]), cu_seqlens_k=good_k)
    with pytest.raises(ValueError, match="one batch"):
        sparse_attention(q, k, k, cu_seqlens_q=good_q, cu_seqlens_k=torch.tensor([0, 12]))
    with pytest.raises(ValueError, match="not supported with packed sequences"):
        sparse_attention(
            q, k, k, mask=torch.ones(10, 12, dtype=torch.bool), cu_seqlens_q=good_q,
            cu_seqlens_k=good_k,
        )  # fmt: skip
    with pytest.raises(ValueError, match="both cu_seqlens_q and cu_seqlens_k"):
        sparse_attention(q, k, k, cu_seqlens_q=good_q)


def test_module_validates_its_arguments():
    with pytest.raises(ValueError, match="num_heads"):
        SparseAttention(0)
    with pytest.raises(ValueError, match="alpha must be a number"):
        SparseAttention(2, alpha=2.5)
    with pytest.raises(ValueError, match="strictly between"):
        SparseAttention(2, alpha=2.0, learn_alpha=True)
    assert attention.MAX_HEAD_DIM == 256


@pytest.mark.slow
@pytest.mark.parametrize("key", list(MAPPINGS))
def test_fused_longer_rows(key):
    q, k, v, grad = make_inputs(17, b=2, hq=4, hk=2, lq=130, lk=300, d=32)
    check_fused(q, k, v, grad, alpha_of(key, heads=4), causal=True)
