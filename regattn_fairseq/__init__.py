"""regattn: sparse and structured attention (Niculae & Blondel 2017) as a fairseq user dir.

`regattn_fairseq.mappings` is plain torch and never imports fairseq. When fairseq loads this
package as a user dir (`--user-dir .../regattn_fairseq`), fairseq is already imported and we
import the submodules whose decorators register the models, tasks and criterions. A process
that imported this package before fairseq (fairseq then skips the user dir as already
imported) calls `register_with_fairseq()` itself.
"""
import importlib
import sys


def register_with_fairseq() -> None:
    """Registers regattn's criterions, models and tasks with fairseq (idempotent)."""
    for sub in ("criterions", "models", "tasks"):
        importlib.import_module(f"{__name__}.{sub}")


if "fairseq" in sys.modules:
    register_with_fairseq()
