"""What produced a result row: the code (git commit, and whether and how the work tree differed
from it: `regattn_checkout.provenance`, shared with the benchmark records), the package versions,
the hardware and the date; and the refusal to start a small or paper run on a dirty tree
(`regattn_checkout.provenance` says what dirty means)."""

from __future__ import annotations

import datetime
import os
import platform

from regattn_checkout.errors import ReproError
from regattn_checkout.provenance import cpu_model, git_state
from regattn_fairseq.experiments.core.tools import package_version

__all__ = ["allow_dirty_from_env", "check_clean_tree", "provenance"]

# Packages whose versions a result row records.
RECORDED_PACKAGES = ("fairseq-fixed", "regattn", "sacrebleu", "rouge-score", "hydra-core")


def provenance() -> dict:
    """What produced a result row: code version, package versions, hardware, date.

    Returns
    -------
    dict
        ``{"date", "git_commit", "git_dirty", "git_diff_sha256", "versions", "hardware"}``.

    Raises
    ------
    ReproError
        a git command failed (see `git`): a row never claims an unknown commit.
    """
    import torch

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **git_state(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            **{p: package_version(p) for p in RECORDED_PACKAGES},
        },
        "hardware": {
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            # ATen's SIMD dispatch level (e.g. AVX2, AVX512): it picks the CPU kernels, so two
            # hosts that differ in it may round differently and train different models
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda": torch.cuda.is_available(),
            # the GPU a training on it ran on (GPUS=N trains on the first N visible devices)
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        },
    }


# Scales that refuse a dirty work tree unless ALLOW_DIRTY=1 (smoke is a pipeline test).
CLEAN_TREE_SCALES = ("small", "paper")


def allow_dirty_from_env() -> bool:
    """Whether ALLOW_DIRTY=1 is set.

    Returns
    -------
    bool
        True for ``ALLOW_DIRTY`` in 1/true/yes.
    """
    return os.environ.get("ALLOW_DIRTY", "").lower() in ("1", "true", "yes")


def check_clean_tree(scale: str, allow_dirty: bool, state: dict | None = None) -> dict:
    """Refuse to start a small or paper run on a dirty work tree.

    Parameters
    ----------
    scale : str
        the run's scale (smoke is exempt).
    allow_dirty : bool
        ALLOW_DIRTY=1 / ``--allow-dirty``: start anyway (the rows record the diff's hash and
        the tables mark them).
    state : dict, optional
        `provenance.git_state()`; read when not given.

    Returns
    -------
    dict
        The git state.

    Raises
    ------
    ReproError
        the tree is dirty, the scale is small or paper and dirty runs are not allowed; or
        git failed.
    """

    state = state or git_state()
    if state["git_dirty"] and scale in CLEAN_TREE_SCALES and not allow_dirty:
        raise ReproError(
            f"the work tree differs from commit {state['git_commit'][:10]} (git status is not "
            f"empty): a {scale}-scale result would not be reproducible from a commit. Commit "
            f"first, or set ALLOW_DIRTY=1 (make) / --allow-dirty to record the rows as dirty "
            f"(diff hash {str(state['git_diff_sha256'])[:12]}; the tables mark them †)."
        )
    return state
