"""regattn_fairseq: the fairseq plugin (`--user-dir`) of the regattn mappings.

Importing this package registers its criterions, models and tasks with fairseq, whatever was
imported before: through `--user-dir .../regattn_fairseq`, `import regattn_fairseq`, or both.

The mappings and the attention statistics live in the fairseq-free library `regattn`. Their
import paths from before the split, `regattn_fairseq.mappings` (with its submodules) and
`regattn_fairseq.analysis`, stay valid: they name the very same module objects (so the
backend switch, the autograd Functions and isinstance checks are shared, never duplicated).
"""

import importlib
import pkgutil
import sys

import regattn
from regattn import analysis, mappings

from . import cli_errors


def _alias_module_tree(package, alias: str) -> None:
    """Makes `alias` and `alias.<sub>` import paths of `package` and its public submodules.

    Private submodules (`_triton`, `_kernels`, ...) are neither aliased nor imported here:
    importing `_triton` would import triton (slow, and absent on CPU-only installs), which the
    library does only when a CUDA tensor needs it.
    """
    sys.modules[alias] = package
    for info in pkgutil.walk_packages(
        getattr(package, "__path__", []), prefix=package.__name__ + "."
    ):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        sys.modules[alias + info.name[len(package.__name__) :]] = importlib.import_module(info.name)


_alias_module_tree(mappings, f"{__name__}.mappings")
_alias_module_tree(analysis, f"{__name__}.analysis")


def register_with_fairseq() -> None:
    """Registers regattn's criterions, models and tasks with fairseq.

    Importing `regattn_fairseq` already does this; calling it again is harmless (Python
    imports each submodule once, so each registration decorator runs once).
    """
    for sub in ("criterions", "models", "tasks"):
        importlib.import_module(f"{__name__}.{sub}")


register_with_fairseq()
# an invalid attention option under fairseq-train: one line, as argparse's errors (issue #26)
cli_errors.install()

__all__ = ["analysis", "mappings", "register_with_fairseq", "regattn"]
