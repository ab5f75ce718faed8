"""Backends and dispatch: which implementation computes a mapping's rows.

Three backends compute every mapping, with the same results (up to float rounding and the
documented splits among tied values):

* "cpu": the compiled C++ row kernels (regattn._C), built by `make setup` /
  `pip install .`; CPU tensors only. They are also torch operators (regattn::<name>, see
  `_kernel_ops`), so torch.compile traces them into its graph.
* "triton": Triton kernels (regattn/mappings/_triton.py), one program per row; CUDA tensors,
  or CPU tensors when the environment variable TRITON_INTERPRET=1 was set before triton was
  imported (Triton's interpreter: tests on machines with no GPU). Rows of up to
  TRITON_MAX_D positions; longer rows take the reference path (one warning).
* "reference": pure torch ops, on any device.

regattn.dp's Viterbi and DTW sweeps are kernels of the same extension (the viterbi_* and
dtw_* entries of KERNEL_OPS) and follow this dispatch: "cpu" runs them, any other backend
(they have no Triton version) runs dp's torch code, which `torch_reference()` therefore
forces too.

Default dispatch: CUDA tensors -> "triton", CPU tensors -> "cpu", any other device ->
"reference"; a backend that is missing (triton not installed, regattn._C not built) falls
back to "reference" with one warning naming what is missing (for triton: only when a CUDA
tensor would have needed it, never at import). `backend(name)` forces one; forcing a
backend that cannot run the tensor at hand raises RuntimeError instead of falling back.
"""

from __future__ import annotations

import contextlib
import os
import types
import warnings

import torch

# The compiled kernels (see `_kernel_ops`), attributes of a namespace,
# so that call sites read `kernels.sparsemax_rows(x, mask_arg(mask), gamma)`. None when
# regattn._C is not importable (callers test `kernels is not None`).
KERNEL_OPS = (
    "softmax_rows",
    "sparsemax_rows",
    "prox_tv1d_rows",
    "prox_pairwise_max_rows",
    "fusedmax_rows",
    "oscarmax_rows",
    "sparse_jvp_rows",
    "entmax_halley_rows",
    "entmax_halley_weights_rows",
    "weighted_jvp_rows",
    "sq_pnorm_max_rows",
    "sq_pnorm_max_jvp_rows",
    "entmax15_rows",
    "viterbi_forward_sweep",
    "viterbi_marginals_sweep",
    "viterbi_decode_sweep",
    "dtw_forward_sweep",
    "dtw_marginals_sweep",
)


def _fake_like(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return t.new_empty(t.shape, dtype=dtype)


def _fake_grouped(x, mask, *params):
    """(values, int32 group ids), both of x's shape: the prox and fusedmax/oscarmax kernels."""
    return _fake_like(x), _fake_like(x, torch.int32)


# Output shapes and dtypes of each operator without running it (torch.compile traces the
# graph on fake tensors): every kernel returns fresh tensors of its first input's shape.
_FAKES = {
    "softmax_rows": lambda x, mask, gamma: _fake_like(x),
    "sparsemax_rows": lambda x, mask, gamma: _fake_like(x),
    "prox_tv1d_rows": _fake_grouped,
    "prox_pairwise_max_rows": _fake_grouped,
    "fusedmax_rows": _fake_grouped,
    "oscarmax_rows": _fake_grouped,
    "sparse_jvp_rows": lambda y, g, alpha, group, alpha_rows: _fake_like(g),
    "entmax_halley_rows": lambda x, mask, alpha: _fake_like(x),
    "entmax_halley_weights_rows": lambda x, mask, alpha: (_fake_like(x), _fake_like(x)),
    "weighted_jvp_rows": lambda w, g: _fake_like(g),
    "sq_pnorm_max_rows": lambda x, mask, gamma, p: _fake_like(x),
    "sq_pnorm_max_jvp_rows": lambda y, v, gamma, p: _fake_like(y),
    "entmax15_rows": lambda x, mask: _fake_like(x),
    # regattn.dp's Viterbi sweeps: theta (batch, T, S, S)
    "viterbi_forward_sweep": lambda theta, lengths, reg, gamma: (
        theta.new_empty(theta.shape[0]),
        _fake_like(theta),
        theta.new_empty(theta.shape[0], theta.shape[2]),
    ),
    "viterbi_marginals_sweep": lambda q, u_final, lengths: (
        _fake_like(q),
        q.new_empty(q.shape[0], q.shape[1] + 1, q.shape[2]),
    ),
    "viterbi_decode_sweep": lambda theta, lengths: theta.new_empty(
        theta.shape[0], theta.shape[1] + 1, dtype=torch.long
    ),
    # and its DTW sweeps: theta (batch, m, n)
    "dtw_forward_sweep": lambda theta, reg, gamma: (
        theta.new_empty(theta.shape[0], theta.shape[1] + 1, theta.shape[2] + 1),
        theta.new_empty(theta.shape[0], theta.shape[1] + 2, theta.shape[2] + 2, 3),
    ),
    "dtw_marginals_sweep": lambda q, ends_m, ends_n: q.new_empty(q.shape[:3]),
}


def _kernel_call(op, fn):
    """A kernel call: fn (the pybind function) eagerly, op (its operator) under torch.compile."""

    def call(*args):
        # a pybind call costs less than the dispatcher's (~1.5 us, and measured up to 30 us
        # on 1024 x 400 rows); Dynamo reads is_compiling() as True, so its graph holds the
        # operator (grouped kernels return a tuple from the operator, a list from pybind:
        # callers unpack or tuple() them)
        if torch.compiler.is_compiling():
            return op(*args)
        return fn(*args)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = f"regattn::{fn.__name__} (see _kernels._kernel_ops)"
    return call


def _kernel_ops(module) -> types.SimpleNamespace:
    """The compiled kernels, callable eagerly and traceable by torch.compile.

    regattn._C binds each kernel twice to the same C++ function: as a pybind function and
    as a dispatcher operator regattn::<name> (TORCH_LIBRARY in csrc/regattn_cpu.cpp, a CPU
    implementation). This adds the operators' fake implementations, which give torch.compile
    the outputs' shapes, so Dynamo puts the calls in its graph instead of breaking it at an
    opaque extension function; eagerly the pybind function runs (it skips the dispatcher's
    argument boxing). Mapping forwards and backwards are autograd.Functions that call the
    kernels, which therefore need no autograd formula; the exception, softmax_rows, is
    differentiable itself (its backward in C++), as operator and as pybind function.

    Parameters
    ----------
    module : module
        the imported regattn._C (loading it registered the operators).

    Returns
    -------
    types.SimpleNamespace
        One attribute per name in KERNEL_OPS, called as the pybind function (positional
        tensors and floats, an empty tensor for "no mask"; grouped kernels return a pair),
        `use_vector_isa`, the extension's switch for the vector paths of its float32 kernels
        ("avx512", "avx2" or "portable"), and
        `range_within(x, limit)`, the one-pass check of the scores that softmax runs (see
        _rows.shift_to_max; a plain function, not an operator).

    Raises
    ------
    ImportError
        the extension lacks a kernel or its operator: it was built from older sources.
    """
    calls = {}
    for name in KERNEL_OPS:
        try:
            fn = getattr(module, name)
            op = getattr(torch.ops.regattn, name).default
        except (AttributeError, RuntimeError) as err:
            raise ImportError(
                f"regattn._C has no kernel {name!r} ({err}): it was built from older sources; "
                "rebuild it with `make setup` or `python setup.py build_ext --inplace`"
            ) from None
        torch.library.register_fake(op, _FAKES[name])
        calls[name] = _kernel_call(op, fn)
    return types.SimpleNamespace(
        **calls, use_vector_isa=module.use_vector_isa, range_within=module.range_within
    )


try:
    from regattn import _C
except ImportError as err:
    kernels = None
    warnings.warn(
        f"regattn's compiled CPU kernels (regattn._C) are not importable ({err}); every "
        "mapping falls back to its pure-torch reference path, which is exact but slower. "
        "Build them with `make setup` or `pip install --no-build-isolation -e .`.",
        RuntimeWarning,
        stacklevel=2,
    )
else:
    kernels = _kernel_ops(_C)

_NO_TENSOR = torch.empty(0, dtype=torch.bool)

BACKENDS = ("triton", "cpu", "reference")
# The Triton kernels hold a row in one block (next power of two >= d).
TRITON_MAX_D = 4096

_forced: str | None = None
_warned: set = set()
_triton = None  # the imported regattn.mappings._triton, False once its import failed
_triton_error: str = ""


def mask_arg(mask):
    """The kernels take an empty tensor for "no mask"."""
    return mask if mask is not None else _NO_TENSOR


def warn_once(key: str, message: str) -> None:
    """Warns (RuntimeWarning) the first time `key` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def triton_kernels():
    """The Triton kernel module (regattn.mappings._triton), or None if triton is not importable.

    Returns
    -------
    module or None
        The module, imported on first use (never at `import regattn.mappings`).
    """
    global _triton, _triton_error
    if _triton is None:
        try:
            from . import _triton as module
        except ImportError as err:  # triton not installed (or blocked)
            _triton, _triton_error = False, str(err)
        else:
            _triton = module
    return _triton or None


def triton_interpreting() -> bool:
    """Whether Triton runs in its interpreter (TRITON_INTERPRET=1): kernels on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton_runs(x: torch.Tensor) -> bool:
    return x.device.type == "cuda" or (x.device.type == "cpu" and triton_interpreting())


def _too_long(x: torch.Tensor) -> bool:
    if x.dim() > 0 and x.shape[-1] > TRITON_MAX_D:
        warn_once(
            "long",
            f"rows longer than {TRITON_MAX_D} positions do not fit the Triton kernels' one "
            "block per row; they take the pure-torch reference path (exact, slower, and it "
            "synchronizes with the device to validate the scores)",
        )
        return True
    return False


def backend_for(x: torch.Tensor) -> str:
    """The backend that computes the rows of x: "triton", "cpu" or "reference".

    Parameters
    ----------
    x : torch.Tensor
        the (rows, d) scores (or, in a backward pass, outputs) about to be computed on.

    Returns
    -------
    str
        One of BACKENDS, by the rules in this module's docstring.

    Raises
    ------
    RuntimeError
        if a forced backend (see `backend`) is not available or cannot run on x's device.
    """
    forced = _forced
    if forced == "reference":
        return "reference"
    if forced == "cpu":
        if kernels is None:
            raise RuntimeError(
                "backend('cpu') was forced but regattn's compiled kernels (regattn._C) are not "
                "importable; build them with `make setup` or `pip install "
                "--no-build-isolation -e .`"
            )
        if x.device.type != "cpu":
            raise RuntimeError(f"backend('cpu') was forced on a tensor on {x.device}")
        return "cpu"
    if forced == "triton":
        if triton_kernels() is None:
            raise RuntimeError(
                f"backend('triton') was forced but triton is not importable ({_triton_error}); "
                "install it (`pip install triton`; CUDA builds of torch bring their own)"
            )
        if not _triton_runs(x):
            raise RuntimeError(
                f"backend('triton') was forced on a tensor on {x.device}: Triton kernels run "
                "on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1 (set before "
                "triton is imported)"
            )
        return "reference" if _too_long(x) else "triton"
    device = x.device.type
    if device == "cpu":
        return "cpu" if kernels is not None else "reference"
    if device == "cuda":
        if triton_kernels() is None:
            warn_once(
                "triton",
                f"triton is not importable ({_triton_error}); mappings on CUDA tensors take the "
                "pure-torch reference path (exact, slower, and it synchronizes with the device "
                "to validate the scores). Install triton to use the Triton kernels.",
            )
            return "reference"
        return "reference" if _too_long(x) else "triton"
    warn_once(
        f"device:{device}",
        f"regattn has no kernel for {device} tensors (Triton kernels run on CUDA, the compiled "
        "kernels on CPU); mappings on them take the pure-torch reference path",
    )
    return "reference"


def use_kernels(x: torch.Tensor) -> bool:
    """Whether x's rows go through the compiled CPU kernels (backend "cpu")."""
    return backend_for(x) == "cpu"


def use_triton(x: torch.Tensor) -> bool:
    """Whether x's rows go through the Triton kernels (backend "triton")."""
    return backend_for(x) == "triton"


@contextlib.contextmanager
def backend(name: str):
    """Forces a backend for every mapping computed (forward and backward) within the block.

    Parameters
    ----------
    name : str
        "triton" (CUDA tensors; CPU tensors under TRITON_INTERPRET=1), "cpu" (the compiled
        kernels; CPU tensors) or "reference" (pure torch, any device); None restores the
        default dispatch.

    Returns
    -------
    object
        A context manager; the previous setting is restored on exit.

    Raises
    ------
    ValueError
        on an unknown name.
    RuntimeError
        (when a mapping runs) if the forced backend is not available or cannot run on
        the tensor's device: a forced backend never falls back silently.
    """
    global _forced
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    previous, _forced = _forced, name
    try:
        yield
    finally:
        _forced = previous


def torch_reference():
    """Forces the pure-torch reference paths: within this block every mapping computes as on
    devices without a kernel (tests compare it with the kernels, benchmarks time both). The
    same as `backend("reference")`.

    Returns
    -------
    object
        A context manager; the previous setting is restored on exit.
    """
    return backend("reference")
