"""Backend selection: mappings.backend(), the default dispatch by device, and importing
regattn.mappings where triton or the compiled kernels are missing (in subprocesses that
block the module)."""

import os
import subprocess
import sys
import textwrap
import types

import children
import pytest
import torch

from regattn import mappings
from regattn.mappings import _kernels


def fake(device: str, d: int = 8):
    """Enough of a tensor for backend_for: a device and a shape."""
    return types.SimpleNamespace(device=torch.device(device), shape=(2, d), dim=lambda: 2)


def test_backend_names_and_alias():
    assert mappings.BACKENDS == ("triton", "cpu", "reference")
    with pytest.raises(ValueError, match="unknown backend"):
        with mappings.backend("cuda"):
            pass
    x = torch.zeros(2, 3)
    assert _kernels.backend_for(x) == "cpu"
    with mappings.backend("reference"):
        assert _kernels.backend_for(x) == "reference"
        with mappings.backend("cpu"):
            assert _kernels.backend_for(x) == "cpu"
        assert _kernels.backend_for(x) == "reference"
    with mappings.torch_reference():
        assert _kernels.backend_for(x) == "reference"
    assert _kernels.backend_for(x) == "cpu"


def test_forced_cpu_backend_on_another_device_is_an_error():
    with mappings.backend("cpu"), pytest.raises(RuntimeError, match="forced on a tensor on meta"):
        _kernels.backend_for(torch.zeros(2, 3, device="meta"))


def test_default_dispatch_by_device(monkeypatch):
    monkeypatch.setattr(_kernels, "_warned", set())
    if _kernels.triton_kernels() is not None:
        assert _kernels.backend_for(fake("cuda")) == "triton"
    with pytest.warns(RuntimeWarning, match="no kernel for meta tensors"):
        assert _kernels.backend_for(fake("meta")) == "reference"
    # once
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _kernels.backend_for(fake("meta")) == "reference"


def test_cuda_without_triton_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(_kernels, "_warned", set())
    monkeypatch.setattr(_kernels, "_triton", False)
    monkeypatch.setattr(_kernels, "_triton_error", "No module named 'triton'")
    with pytest.warns(RuntimeWarning, match="triton is not importable"):
        assert _kernels.backend_for(fake("cuda")) == "reference"
    assert _kernels.backend_for(fake("cpu")) == "cpu"
    with mappings.backend("triton"), pytest.raises(RuntimeError, match="triton is not importable"):
        _kernels.backend_for(fake("cuda"))


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    return children.run(
        [sys.executable, "-W", "always", "-c", textwrap.dedent(code)],
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


def test_import_and_cpu_use_without_triton_warn_nothing():
    result = run_python(
        """
        import sys, warnings
        sys.modules["triton"] = None
        warnings.simplefilter("error")
        import torch
        from regattn import mappings
        from regattn.mappings import _kernels
        y = mappings.sparsemax(torch.randn(3, 5, requires_grad=True))
        y.sum().backward()
        assert _kernels.triton_kernels() is None
        try:
            with mappings.backend("triton"):
                mappings.sparsemax(torch.randn(3, 5))
        except RuntimeError as err:
            assert "triton is not importable" in str(err), err
        else:
            raise AssertionError("forced triton without triton did not raise")
        print("ok")
        """
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_import_without_compiled_kernels_warns_once_and_computes():
    result = run_python(
        """
        import sys, warnings
        sys.modules["regattn._C"] = None
        sys.modules["triton"] = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
            from regattn import mappings
            for name in mappings.NAMES:
                mappings.build(name)(torch.randn(3, 5, requires_grad=True)).sum().backward()
        messages = [str(w.message) for w in caught if "regattn" in str(w.message)]
        assert len(messages) == 1 and "regattn._C" in messages[0], messages
        try:
            with mappings.backend("cpu"):
                mappings.sparsemax(torch.randn(3, 5))
        except RuntimeError as err:
            assert "compiled kernels" in str(err), err
        else:
            raise AssertionError("forced cpu without regattn._C did not raise")
        print("ok")
        """
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_forced_triton_on_cpu_tensors_needs_the_interpreter():
    pytest.importorskip("triton")
    result = run_python(
        """
        import torch
        from regattn import mappings
        try:
            with mappings.backend("triton"):
                mappings.sparsemax(torch.randn(3, 5))
        except RuntimeError as err:
            assert "TRITON_INTERPRET=1" in str(err), err
            print("ok")
        """,
        TRITON_INTERPRET="0",
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr
