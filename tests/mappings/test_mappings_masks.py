"""Masks remove positions from the problem: padding side, garbage, broadcasting, gradients."""

import pytest
import torch
from mapping_helpers import NAMES, apply

LENGTHS = [5, 2, 7, 1, 4]
T = 7


def _real_rows(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return [2 * torch.randn(n, generator=g, dtype=torch.float64).to(dtype) for n in LENGTHS]


def _pad(rows, side, fill):
    """Stack rows into (len(rows), T) with `fill` in the padding, and the mask of real positions."""
    scores = torch.full((len(rows), T), fill, dtype=rows[0].dtype)
    mask = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, r in enumerate(rows):
        span = slice(T - len(r), T) if side == "left" else slice(0, len(r))
        scores[i, span] = r
        mask[i, span] = True
    return scores, mask


@pytest.mark.parametrize(
    "fill", [0.0, 1e4, float("nan"), float("inf")], ids=["zero", "large", "nan", "inf"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", NAMES)
def test_left_and_right_padding_equal_unpadded(name, dtype, fill):
    rows = _real_rows(0, dtype)
    unpadded = [apply(name, r) for r in rows]
    atol = 1e-6 if dtype == torch.float32 else 1e-12
    for side in ("left", "right"):
        scores, mask = _pad(rows, side, fill)
        y = apply(name, scores, mask=mask)
        assert (y[~mask] == 0).all(), side
        for i, expected in enumerate(unpadded):
            torch.testing.assert_close(
                y[i][mask[i]], expected, rtol=0, atol=atol, msg=f"{side} row {i}"
            )


@pytest.mark.parametrize("name", NAMES)
def test_mask_holes_are_skipped(name):
    """A masked position in the middle links its neighbours (the TV chain for fusedmax)."""
    x = torch.tensor([[1.0, 9.0, 1.1, 0.2, -7.0, 0.25, 1.3]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True, True, False, True, True]])
    y = apply(name, x, mask=mask, **({"lam": 0.3} if name == "fusedmax" else {}))
    expected = apply(name, x[mask], **({"lam": 0.3} if name == "fusedmax" else {}))
    assert (y[~mask] == 0).all()
    torch.testing.assert_close(y[mask], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_mask_broadcasts_over_heads(name):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    key_mask = torch.rand(3, 1, 6, generator=g) < 0.7
    key_mask[:, :, 0] = True
    y = apply(name, x, mask=key_mask)
    torch.testing.assert_close(y, apply(name, x, mask=key_mask.expand(3, 4, 6)), rtol=0, atol=0)
    assert (y.masked_select(~key_mask.expand(3, 4, 6)) == 0).all()


@pytest.mark.parametrize("name", NAMES)
def test_mask_along_non_last_dim(name):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, 3, generator=g, dtype=torch.float64)  # attention along dim 1
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 1]], dtype=torch.bool).unsqueeze(-1)
    y = apply(name, x, dim=1, mask=mask)
    expected = apply(name, x.transpose(1, 2), mask=mask.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-12)
    assert (y.masked_select(~mask.expand_as(y)) == 0).all()


@pytest.mark.parametrize("name", NAMES)
def test_mask_of_lower_rank_broadcasts(name):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([True, False, True, True, False])
    torch.testing.assert_close(
        apply(name, x, mask=mask), apply(name, x, mask=mask.expand(4, 5)), rtol=0, atol=0
    )


@pytest.mark.parametrize("name", NAMES)
def test_gradient_is_finite_and_zero_at_masked_garbage(name):
    scores, mask = _pad(_real_rows(4, torch.float64), "left", float("nan"))
    scores.requires_grad_()
    g = torch.Generator().manual_seed(5)
    apply(name, scores, mask=mask).backward(
        torch.randn(scores.shape, generator=g, dtype=torch.float64)
    )
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[~mask] == 0).all()
