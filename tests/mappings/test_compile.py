"""torch.compile over the mappings: the compiled CPU kernels are dispatcher operators
(regattn::<name>, see _kernels._kernel_ops), so Dynamo traces them, and the autograd Functions
that call them, into one graph.

No graph break (fullgraph=True) on the CPU kernels' path without a mask: sparsemax,
sq-pnorm-max, fusedmax, oscarmax, 1.5-entmax and alpha-entmax with a float alpha. Breaks
that remain, all host-side checks that read tensor values on the host (`bool(...)`,
`.item()`), not the kernels:

* a mask: `to_rows` (_rows.py) tests `bool(m.any(dim=1).all())` (a row with no unmasked
  position) and `bool(m.all())` (drop an all-True mask);
* softmax: it has no CPU kernel, so `to_rows` shifts and checks the rows in torch ops,
  `shift_to_max`'s `bool((high - low <= limit).all())` and `check_finite`'s `float(sum)`;
* a tensor alpha (entmax): `check_alpha` tests `(alpha <= 1).any()` on the host.

These cases are still checked here for the same values and gradients as eager mode.
Backend "aot_eager" traces forward and backward (fake tensors, the operators' fake
implementations) without compiling C++; one test runs inductor.
"""

from __future__ import annotations

import pytest
import torch

from regattn import mappings
from regattn.mappings._kernels import kernels

pytestmark = pytest.mark.skipif(kernels is None, reason="regattn._C is not built")

ALPHA = torch.tensor([[[1.3]], [[1.7]]], dtype=torch.float64)  # one alpha per batch entry

CASES = {
    "softmax": lambda x, m: mappings.softmax(x, mask=m, gamma=0.7),
    "sparsemax": lambda x, m: mappings.sparsemax(x, mask=m, gamma=0.7),
    "sq_pnorm_max": lambda x, m: mappings.sq_pnorm_max(x, mask=m, p=1.5),
    "fusedmax": lambda x, m: mappings.fusedmax(x, mask=m, lam=0.3),
    "oscarmax": lambda x, m: mappings.oscarmax(x, mask=m, lam=0.05),
    "entmax15": lambda x, m: mappings.entmax(x, mask=m, alpha=1.5),
    "entmax_float": lambda x, m: mappings.entmax(x, mask=m, alpha=1.25),
}
# the CPU kernels' path with no host-side check left: one graph
FULLGRAPH = ("sparsemax", "sq_pnorm_max", "fusedmax", "oscarmax", "entmax15", "entmax_float")


class Tiny(torch.nn.Module):
    """A linear map of the scores, the mapping along the last dim, a weighted sum."""

    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping
        self.proj = torch.nn.Linear(6, 6, dtype=torch.float64)

    def forward(self, x, mask=None):
        y = self.mapping(self.proj(x), mask)
        return y, (y * torch.arange(6, dtype=y.dtype)).sum()


def inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, generator=gen)
    x[0, 0, 4] = x[0, 0, 3]  # a tie: groups for fusedmax / oscarmax
    mask = torch.rand(2, 3, 6, generator=gen) > 0.3
    mask[..., 0] = True  # every row has an unmasked position
    return x, mask


def run(module, fn, x, *args):
    """Output, and gradients of the scalar loss in x and in the module's parameters."""
    for p in module.parameters():
        p.grad = None
    x = x.clone().requires_grad_()
    y, loss = fn(x, *args)
    loss.backward()
    return [y.detach(), x.grad] + [p.grad for p in module.parameters()]


def assert_same(compiled, eager):
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", FULLGRAPH)
def test_kernel_mappings_compile_to_one_graph(name):
    """fullgraph=True: no graph break; the same values and gradients as eager mode."""
    module = Tiny(CASES[name])
    x, _ = inputs()
    eager = run(module, module, x)
    compiled = torch.compile(module, backend="aot_eager", fullgraph=True)
    assert_same(run(module, compiled, x), eager)


@pytest.mark.parametrize("name", list(CASES))
def test_masked_mappings_compile(name):
    """With a mask (graph breaks at the host-side mask checks): same values and gradients."""
    module = Tiny(CASES[name])
    x, mask = inputs()
    eager = run(module, module, x, mask)
    compiled = torch.compile(module, backend="aot_eager")
    assert_same(run(module, compiled, x, mask), eager)


def test_tensor_alpha_entmax_compiles():
    """A tensor alpha (graph breaks at its host-side range check): same values and gradients,
    alpha's included."""
    alpha = ALPHA.clone().requires_grad_()
    module = Tiny(lambda x, m: mappings.entmax(x, mask=m, alpha=alpha))
    x, mask = inputs()
    compiled = torch.compile(module, backend="aot_eager")
    for m in (None, mask):
        eager = run(module, module, x, m) + [alpha.grad.clone()]
        alpha.grad = None
        got = run(module, compiled, x, m) + [alpha.grad.clone()]
        alpha.grad = None
        assert_same(got, eager)


def test_operators_registered_with_fake_implementations():
    """Each kernel is an operator regattn::<name>, and its fake implementation (the shapes
    torch.compile traces with) matches the kernel's outputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, mask = inputs()
    x, mask = x.reshape(6, 6), mask.reshape(6, 6)
    op = torch.ops.regattn.fusedmax_rows.default
    y, group = op(x, mask, 1.0, 0.3)
    with FakeTensorMode() as mode:
        fy, fgroup = op(mode.from_tensor(x), mode.from_tensor(mask), 1.0, 0.3)
    assert (fy.shape, fy.dtype, fgroup.shape, fgroup.dtype) == (
        y.shape,
        y.dtype,
        group.shape,
        group.dtype,
    )
    torch.testing.assert_close(y, torch.as_tensor(kernels.fusedmax_rows(x, mask, 1.0, 0.3)[0]))


def test_inductor_sparsemax():
    """One inductor compile (it generates and builds C++): sparsemax, forward and backward."""
    module = Tiny(CASES["sparsemax"])
    x, _ = inputs()
    eager = run(module, module, x)
    compiled = torch.compile(module, fullgraph=True)
    assert_same(run(module, compiled, x), eager)
