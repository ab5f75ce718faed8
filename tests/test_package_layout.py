"""The package layout's promises: `regattn` works without fairseq (and without its compiled
kernels), the plugin registers with fairseq whatever the import order. (That no code changes
the import path is the lint rule TID251 in pyproject.toml, run by make lint.)"""

import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import children
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (outside the repo, so only installed code imports)."""
    proc = children.run([python, "-c", textwrap.dedent(code)], cwd="/", timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def test_regattn_imports_and_computes_with_fairseq_blocked():
    run_python("""
        import sys
        sys.modules["fairseq"] = None  # any import of fairseq now raises ImportError
        import torch
        import regattn
        from regattn import mappings
        from regattn.mappings.smoothed_max import max_omega
        y = mappings.sparsemax(torch.tensor([1.0, 0.5, -1.0]))
        assert torch.allclose(y, torch.tensor([0.75, 0.25, 0.0])), y
        # the entropic smoothed max is log-sum-exp
        log2 = torch.log(torch.tensor(2.0)).item()
        assert abs(max_omega("softmax", torch.zeros(2)).item() - log2) < 1e-6
        assert "regattn_fairseq" not in sys.modules
        assert not any(name == "fairseq" or name.startswith("fairseq.") for name in sys.modules
                       if sys.modules[name] is not None)
    """)


def test_mappings_fall_back_to_the_reference_path_without_compiled_kernels():
    proc = run_python("""
        import sys, warnings
        sys.modules["regattn._C"] = None  # as if the kernels were never built
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch
            from regattn import mappings
        messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
        assert len(messages) == 1 and "regattn._C" in messages[0], messages
        from regattn.mappings import _kernels
        assert _kernels.kernels is None and not _kernels.use_kernels(torch.zeros(1))
        x = torch.tensor([[1.0, 0.5, -1.0], [0.2, 0.2, 0.1]], dtype=torch.float64)
        x.requires_grad_()
        for name in mappings.NAMES:
            y = mappings.build(name)(x)
            assert torch.allclose(y.sum(-1), torch.ones(2, dtype=torch.float64)), (name, y)
            y[:, 0].sum().backward()
        expected = torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64)
        assert torch.allclose(mappings.sparsemax(x)[0], expected)
        print("ok")
    """)
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("first", ["regattn_fairseq", "fairseq"])
def test_plugin_registers_whatever_is_imported_first(first):
    second = "fairseq" if first == "regattn_fairseq" else "regattn_fairseq"
    run_python(f"""
        import argparse
        import {first}
        import {second}
        from fairseq import utils
        from fairseq.criterions import CRITERION_REGISTRY
        from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
        from fairseq.tasks import TASK_REGISTRY
        # what fairseq's CLIs do with --user-dir: a no-op for a package imported already
        utils.import_user_module(argparse.Namespace(user_dir="{REPO_ROOT / "regattn_fairseq"}"))
        models = {{"regattn_lstm", "regattn_transformer", "regattn_snli"}}
        archs = {{"regattn_lstm_small", "regattn_transformer_small", "regattn_snli_small"}}
        assert models <= set(MODEL_REGISTRY) and archs <= set(ARCH_MODEL_REGISTRY)
        assert "regattn_snli" in TASK_REGISTRY
        assert "regattn_snli_cross_entropy" in CRITERION_REGISTRY
    """)


def test_plugin_import_does_not_import_triton():
    # triton is imported only when a CUDA tensor (or a forced backend) needs a Triton kernel
    run_python("""
        import sys
        sys.modules["triton"] = None  # as on a CPU-only install without triton
        import regattn_fairseq
        assert "regattn.mappings._triton" not in sys.modules
    """)


@pytest.mark.slow
def test_pip_install_gives_a_working_regattn_without_fairseq(tmp_path):
    """`pip install .` into a fresh environment that has torch and numpy but no fairseq."""
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    torch_version = __import__("torch").__version__.split("+")[0]
    for args in (["torch==" + torch_version, "numpy"], ["--no-build-isolation", str(REPO_ROOT)]):
        proc = children.run(
            [python, "-m", "pip", "install", "-q", *args],
            timeout=1800,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
    run_python(
        """
        import importlib.util, torch
        from regattn import mappings
        from regattn.mappings import _kernels
        assert importlib.util.find_spec("fairseq") is None
        assert _kernels.kernels is not None  # the wheel carries the compiled kernels
        y = mappings.fusedmax(torch.tensor([1.0, 1.0, -1.0]), lam=0.1)
        assert torch.allclose(y, torch.tensor([0.5, 0.5, 0.0]))
    """,
        python=python,
    )
