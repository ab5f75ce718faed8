"""Hostile inputs, on the compiled kernels and on the torch reference path: huge finite scores
(every mapping is invariant to adding a constant to a row, so it must give the same output
on a row and on that row shifted to a max of 0), rows whose spread overflows, rows with no
unmasked position (empty="zero"), half precision, empty batches, d = 1, non-contiguous and
expanded inputs, and dim other than last."""

import contextlib

import pytest
import torch
from mapping_helpers import DEFAULTS, NAMES, apply, assert_structure_stable

from regattn import mappings

PATHS = ("kernel", "reference")
# gamma != 1 where a mapping takes it: shifting must also be exact under the temperature
PARAMS = {
    name: {**DEFAULTS[name], **({"gamma": 0.5} if "gamma" in DEFAULTS[name] else {})}
    for name in NAMES
}
PARAMS["entmax_1.3"] = {"alpha": 1.3}


def mapping_of(key):
    return "entmax" if key.startswith("entmax") else key


KEYS = NAMES + ("entmax_1.3",)


def on_path(path):
    return mappings.torch_reference() if path == "reference" else contextlib.nullcontext()


def run(key, x, path, **kw):
    with on_path(path):
        return apply(mapping_of(key), x, **{**PARAMS[key], **kw})


def shifted_to_max(x, mask):
    high = (x if mask is None else x.masked_fill(~mask, float("-inf"))).amax(-1, keepdim=True)
    return x - high


def magnitudes(dtype):
    return [m for m in (1e4, 1e8, 1e16, 1e30) if m < torch.finfo(dtype).max / 4]


def huge_rows(m, dtype, seed):
    """Rows with scores of magnitude m: the issue's [m, -m, 0, 5, m/2], rows of spread ~m,
    and rows of spread ~1 sitting at m (where x - m keeps only what the dtype resolves)."""
    g = torch.Generator().manual_seed(seed)
    spread_m = torch.randn(4, 5, generator=g, dtype=torch.float64) * m
    at_m = m + torch.randn(4, 5, generator=g, dtype=torch.float64) * max(1.0, m * 1e-6)
    issue = torch.tensor([[m, -m, 0, 5, m / 2]], dtype=torch.float64)
    x = torch.cat([issue, spread_m, at_m]).to(dtype)
    mask = torch.rand(x.shape, generator=g) > 0.3
    mask[:, 0] = True
    return x, mask


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("key", KEYS)
def test_output_and_gradient_equal_those_of_the_rows_shifted_to_max_zero(key, dtype, path):
    for m in magnitudes(dtype):
        x, mask = huge_rows(m, dtype, seed=int(m) % 1000)
        grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
        for msk in (None, mask):
            results = []
            for rows in (x, shifted_to_max(x, msk)):
                rows = rows.clone().requires_grad_()
                y = run(key, rows, path, mask=msk)
                y.backward(grad)
                assert torch.isfinite(y).all() and torch.isfinite(rows.grad).all()
                results.append((y.detach(), rows.grad))
            (y, g), (y_shifted, g_shifted) = results
            torch.testing.assert_close(y, y_shifted, rtol=0, atol=0, msg=f"{key} at {m}")
            torch.testing.assert_close(g, g_shifted, rtol=0, atol=0, msg=f"{key} gradient at {m}")
            torch.testing.assert_close(y.sum(-1), torch.ones(x.shape[0], dtype=dtype))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("key", [k for k in KEYS if k != "softmax"])
def test_issue_row_gives_all_mass_to_the_max(key, dtype, path):
    # exact answer: x_0 - x_i >= m/2 > 1 + lam (n-1) for i > 0, so every sparse mapping
    # puts all its mass on position 0
    for m in magnitudes(dtype):
        y = run(key, torch.tensor([[m, -m, 0, 5, m / 2]], dtype=dtype), path)
        torch.testing.assert_close(
            y,
            torch.tensor([[1.0, 0, 0, 0, 0]], dtype=dtype),
            rtol=0,
            atol=4 * torch.finfo(dtype).eps,
        )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("key", KEYS)
def test_a_row_whose_spread_overflows_is_an_error(key, dtype, path):
    top = torch.finfo(dtype).max
    x = torch.tensor([[1.0, 2.0, 0.0], [0.4 * top, -0.9 * top, 0.0]], dtype=dtype)
    with pytest.raises(ValueError, match="max - min overflows"):
        run(key, x, path)
    # the masked -0.9 top takes no part: the row's spread, even over gamma = 0.5, is finite
    mask = torch.tensor([[True, True, True], [True, False, True]])
    y = run(key, x, path, mask=mask)
    assert torch.isfinite(y).all() and y[1, 0] == 1
    if "gamma" in PARAMS[key] and key != "sq_pnorm_max":
        # these compute on (x - max) / gamma: a spread of top / 2 over gamma = 1/4 overflows
        with pytest.raises(ValueError, match="max - min overflows"):
            run(key, x, path, mask=mask, gamma=0.25)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
def test_empty_zero_gives_empty_rows_zeros_and_the_others_their_mapping(key, path):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 6, generator=g) > 0.4
    mask[[0, 2, 4], 1] = True
    mask[[1, 3]] = False
    with pytest.raises(ValueError, match="no unmasked position"):
        run(key, x, path, mask=mask)
    xr = x.clone().requires_grad_()
    y = run(key, xr, path, mask=mask, empty="zero")
    y.backward(torch.randn(x.shape, generator=g, dtype=x.dtype))
    keep = [0, 2, 4]
    assert torch.equal(y[[1, 3]], torch.zeros(2, 6, dtype=x.dtype))
    assert torch.equal(xr.grad[[1, 3]], torch.zeros(2, 6, dtype=x.dtype))
    # the non-empty rows: what the mapping gives them alone (default empty="error")
    torch.testing.assert_close(
        y[keep].detach(), run(key, x[keep], path, mask=mask[keep]), rtol=0, atol=1e-15
    )
    # every row empty, and an empty dim
    none = torch.zeros(5, 6, dtype=torch.bool)
    assert torch.equal(run(key, x, path, mask=none, empty="zero"), torch.zeros_like(x))
    assert run(key, x[:, :0], path, empty="zero").shape == (5, 0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
def test_empty_zero_gradcheck_with_a_mix_of_empty_and_nonempty_rows(key, path):
    x = torch.tensor(
        [[0.3, -1.2, 0.9, 0.1], [5.0, 1.0, 2.0, 0.0], [1.1, 0.2, -0.4, 0.8]],
        dtype=torch.float64,
        requires_grad=True,
    )
    mask = torch.tensor([[True, True, True, True], [False] * 4, [True, False, True, True]])

    def fn(t):
        return run(key, t, path, mask=mask, empty="zero")

    assert_structure_stable(fn, (x,), 1e-6)
    with on_path(path):
        assert torch.autograd.gradcheck(
            lambda t: apply(mapping_of(key), t, mask=mask, empty="zero", **PARAMS[key]),
            (x,),
            eps=1e-6,
            atol=1e-6,
        )


def test_entmax_tensor_alpha_with_empty_rows():
    x = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    mask = torch.tensor([[True] * 5, [False] * 5, [True, True, False, True, True]])
    alpha = torch.tensor([[1.3], [1.6], [1.8]], dtype=torch.float64, requires_grad=True)
    for path in PATHS:
        with on_path(path):
            y = mappings.entmax(x, mask=mask, alpha=alpha, empty="zero")
            assert torch.equal(y[1], torch.zeros(5, dtype=x.dtype))
            expected = mappings.entmax(x[[0, 2]], mask=mask[[0, 2]], alpha=alpha[[0, 2]])
            torch.testing.assert_close(y[[0, 2]], expected, rtol=0, atol=1e-15)
            (grad_alpha,) = torch.autograd.grad(y.square().sum(), alpha)
            assert grad_alpha[1] == 0 and (grad_alpha[[0, 2]] != 0).all()


@pytest.mark.parametrize("key", NAMES)
def test_empty_must_be_error_or_zero_everywhere(key):
    for bad in ("zeros", None, "ignore"):
        with pytest.raises(ValueError, match="empty"):
            apply(key, torch.zeros(2, 3), empty=bad)
        with pytest.raises(ValueError, match="empty"):
            mappings.build(key, empty=bad)
    module = mappings.build(key, empty="zero")
    assert module.empty == "zero" and "empty='zero'" in repr(module)
    assert "empty" not in mappings.defaults_of(key)
    y = module(torch.zeros(2, 3), mask=torch.tensor([[True, True, False], [False] * 3]))
    assert torch.equal(y[1], torch.zeros(3))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
def test_half_precision_overflow_raises_and_finite_half_scores_are_computed_in_float32(key, path):
    inf16 = torch.tensor([[70000.0, 1.0, 0.0]], dtype=torch.float16)
    assert torch.isinf(inf16).any()  # 70000 does not fit in float16
    with pytest.raises(ValueError, match="infinite"):
        run(key, inf16, path)
    # finite in float16; their spread (120000) is not, but the float32 computation is fine
    x16 = torch.tensor([[60000.0, -60000.0, 1.0, 0.5], [1.0, 0.5, -0.25, 0.0]], dtype=torch.float16)
    y = run(key, x16, path)
    assert y.dtype == torch.float16 and torch.isfinite(y).all()
    torch.testing.assert_close(y, run(key, x16.float(), path).half(), rtol=0, atol=0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("shape", [(0, 5), (3, 0, 5)])
def test_empty_batches_give_empty_results_and_backprop(key, path, shape):
    x = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    for mask in (None, torch.ones(shape, dtype=torch.bool)):
        y = run(key, x, path, mask=mask)
        assert y.shape == shape
        y.sum().backward()
        assert x.grad.shape == shape


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
def test_d_equal_one_and_one_unmasked_position_give_one(key, path):
    x = torch.tensor([[3.0], [-1e6], [0.0]], dtype=torch.float64, requires_grad=True)
    y = run(key, x, path)
    assert torch.equal(y, torch.ones_like(x))
    y.backward(torch.randn(x.shape, dtype=x.dtype))
    assert torch.equal(x.grad, torch.zeros_like(x))  # y = 1 whatever x
    x2 = torch.tensor([[3.0, 1e30, -2.0]], dtype=torch.float64)
    y2 = run(key, x2, path, mask=torch.tensor([[False, True, False]]))
    assert torch.equal(y2, torch.tensor([[0.0, 1.0, 0.0]], dtype=x2.dtype))


def layouts(base):
    """(name, non-contiguous or expanded view) of scores derived from base (4, 6, 6)."""
    return [
        ("transposed", base.transpose(1, 2)),
        ("step slice", base[:, ::2, ::2]),
        ("expanded", base[:, :1, :].expand(4, 5, 6)),
        ("expanded row", base[:1, :1, :].expand(3, 4, 6)),
    ]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
def test_non_contiguous_and_expanded_inputs_equal_their_contiguous_copies(key, path):
    g = torch.Generator().manual_seed(5)
    base = torch.randn(4, 6, 6, generator=g, dtype=torch.float64)
    for label, view in layouts(base):
        assert not view.is_contiguous(), label
        grad = torch.randn(view.shape, generator=g, dtype=view.dtype)
        mask = torch.rand(view.shape[-1], generator=g) > 0.3
        mask[0] = True
        for msk in (None, mask):
            results = []
            for scores in (view, view.contiguous()):
                leaf = (
                    base.clone().requires_grad_()
                    if scores is view
                    else scores.clone().requires_grad_()
                )
                inp = dict(layouts(leaf))[label] if scores is view else leaf
                y = run(key, inp, path, mask=msk)
                y.backward(grad)
                results.append((y.detach(), inp.grad if inp.is_leaf else None, leaf.grad))
            (y_view, _, g_base), (y_copy, g_copy, _) = results
            torch.testing.assert_close(y_view, y_copy, rtol=0, atol=0, msg=label)
            # the view's gradient, mapped back through the view onto base
            expected = torch.zeros_like(base, requires_grad=True)
            (dict(layouts(expected))[label] * g_copy).sum().backward()
            torch.testing.assert_close(g_base, expected.grad, rtol=0, atol=1e-15, msg=label)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", KEYS)
def test_dim_other_than_last(key, path):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(5, 3, 4, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 1, 4, generator=g) > 0.3
    mask[0] = True
    for dim in (0, 1, -2):
        m = mask if dim in (0,) else None
        y = run(key, x, path, dim=dim, mask=m)
        moved = x.movedim(dim, -1)
        m_moved = None if m is None else m.expand(x.shape).movedim(dim, -1)
        torch.testing.assert_close(
            y, run(key, moved, path, mask=m_moved).movedim(-1, dim), rtol=0, atol=0
        )
