"""regattn_fairseq: the fairseq plugin (`--user-dir`) of the regattn mappings.

Importing this package registers its criterions, models and tasks with fairseq, whatever was
imported before: through `--user-dir .../regattn_fairseq`, `import regattn_fairseq`, or both.

The mappings and the attention statistics live in the fairseq-free library `regattn`.
"""

import importlib

from . import log_levels

# first: fairseq's import-time basicConfig calls would set the root logger to DEBUG (#46)
log_levels.claim_root_logger()

from . import cli_errors  # noqa: E402  (imports fairseq)


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

__all__ = ["register_with_fairseq"]
