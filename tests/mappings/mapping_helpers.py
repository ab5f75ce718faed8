"""Shared parameter tables and checks for the mapping tests."""

import torch

from regattn import mappings

NAMES = ("softmax", "sparsemax", "sq_pnorm_max", "fusedmax", "oscarmax", "entmax")
# Mappings that take a temperature gamma (every one).
GAMMA_NAMES = ("softmax", "sparsemax", "sq_pnorm_max", "fusedmax", "oscarmax", "entmax")
SPARSE_NAMES = ("sparsemax", "sq_pnorm_max", "fusedmax", "oscarmax", "entmax")
# Paper defaults, written out so that the tests do not depend on the library's defaults.
DEFAULTS = {
    "softmax": {"gamma": 1.0},
    "sparsemax": {"gamma": 1.0},
    "sq_pnorm_max": {"gamma": 1.0, "p": 1.5},
    "fusedmax": {"gamma": 1.0, "lam": 0.1},
    "oscarmax": {"gamma": 1.0, "lam": 0.01},
    "entmax": {"alpha": 1.5, "gamma": 1.0},
}


def apply(name, scores, dim=-1, mask=None, **params):
    """mappings.<name>(scores, dim, mask, **params), with the paper defaults filled in."""
    return getattr(mappings, name)(scores, dim=dim, mask=mask, **{**DEFAULTS[name], **params})


def structure(y):
    """The combinatorial state of a batch of outputs: support and equal-value pairs."""
    support = y > 0
    equal = (y.unsqueeze(-1) - y.unsqueeze(-2)).abs() < 1e-12
    return support, equal


def assert_structure_stable(fn, inputs, eps):
    """Fail if moving any coordinate of any input by ±eps changes structure(fn(*inputs)).

    gradcheck compares against central finite differences; they are only meaningful when
    the support and the fused groups stay the same inside the stencil.
    """
    with torch.no_grad():
        support, equal = structure(fn(*inputs))
        for k, inp in enumerate(inputs):
            for i in range(inp.numel()):
                for step in (eps, -eps):
                    moved = [t.detach().clone() for t in inputs]
                    moved[k].view(-1)[i] += step
                    s, e = structure(fn(*moved))
                    assert torch.equal(s, support) and torch.equal(e, equal), (
                        f"input {k} coordinate {i} sits within {eps} of a kink: pick another seed"
                    )


# Each row Triton kernel with its parameters away from the defaults: test_triton_kernels runs
# them in the interpreter, test_triton_cuda on a CUDA device (with fusedmax and oscarmax,
# whose interpreter tests are test_triton_grouped's).
TRITON_CASES = {
    "softmax": ("softmax", {"gamma": 0.7}),
    "sparsemax": ("sparsemax", {"gamma": 0.7}),
    "entmax15": ("entmax", {"alpha": 1.5}),
    "entmax13": ("entmax", {"alpha": 1.3}),
    "entmax2": ("entmax", {"alpha": 2.0}),
    "sq_pnorm_max": ("sq_pnorm_max", {"gamma": 0.8, "p": 1.5}),
    "sq_pnorm_max_p12": ("sq_pnorm_max", {"gamma": 2.0, "p": 1.2}),
}

# Every kernel against the convex-solver oracles (test_triton_oracle, test_triton_cuda).
ORACLE_CASES = [
    ("softmax", {"gamma": 0.7}),
    ("sparsemax", {"gamma": 0.7}),
    ("sq_pnorm_max", {"gamma": 0.8, "p": 1.5}),
    ("fusedmax", {"gamma": 0.8, "lam": 0.3}),
    ("oscarmax", {"gamma": 0.8, "lam": 0.1}),
    ("entmax", {"alpha": 1.5}),
    ("entmax", {"alpha": 1.3}),
]


def oracle_problem(kind: str, rows: int = 4, d: int = 7):
    """(scores, mask) as numpy arrays: random ("random") or tied ("ties") rows, a mask that
    keeps position 0."""
    import numpy as np

    rng = np.random.default_rng(11)
    if kind == "random":
        scores = rng.normal(size=(rows, d)) * 2
    else:
        scores = rng.choice([-1.0, 0.0, 0.5, 1.0], size=(rows, d))
    mask = rng.random((rows, d)) > 0.25
    mask[:, 0] = True
    return scores, mask
