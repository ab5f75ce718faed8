"""What produced a result: the code (git commit, and whether and how the work tree differed
from it), the package versions, the hardware and the date. One definition for the result rows
of the reproduction suite and for the benchmark records (`regattn_fairseq.benchmarks.run_record`).

Dirty means: `git status --porcelain` prints anything (modified, staged, deleted or untracked
files that are not ignored) outside the results folder (`paths.RESULTS_DIR`): the suite and
the benchmarks write their own outputs there while they run, so the second row of a table, or
the second benchmark of `make bench`, would otherwise count as dirty. A dirty tree is recorded
with `git_diff_sha256`, the SHA-256 of `git diff HEAD --binary` followed by the porcelain
status (which names untracked files), so that two rows from the same dirty state can be told
apart from rows of another dirty state."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import subprocess
from pathlib import Path

from regattn_fairseq.experiments.core import paths
from regattn_fairseq.experiments.core.errors import ReproError
from regattn_fairseq.experiments.core.tools import package_version

# Packages whose versions a result row records.
RECORDED_PACKAGES = ("fairseq-fixed", "regattn", "sacrebleu", "rouge-score", "hydra-core")


def git(*args: str) -> str:
    """Run one git command in the repository root.

    Parameters
    ----------
    *args : str
        the git arguments, e.g. ``"rev-parse", "HEAD"``.

    Returns
    -------
    str
        Its standard output, stripped of surrounding whitespace.

    Raises
    ------
    ReproError
        git is not installed, or the command failed (e.g. the root is not a git
        checkout); the message names the command and carries git's stderr.
    """
    command = ["git", *args]
    try:
        done = subprocess.run(command, cwd=paths.REPO_ROOT, capture_output=True, text=True)
    except OSError as error:
        raise ReproError(
            f"`{' '.join(command)}` could not run in {paths.REPO_ROOT}: {error} "
            f"(provenance needs git and a checkout)"
        ) from None
    if done.returncode != 0:
        raise ReproError(
            f"`{' '.join(command)}` failed ({done.returncode}) in {paths.REPO_ROOT}: "
            f"{done.stderr.strip()}"
        )
    return done.stdout.strip()


def _code_pathspec() -> tuple[str, ...]:
    """The git pathspec of everything but the results folder (when it is inside the checkout)."""
    try:
        results = paths.RESULTS_DIR.resolve().relative_to(paths.REPO_ROOT.resolve())
    except ValueError:
        return (".",)
    return (".", f":(exclude){results.as_posix()}")


_CODE_PATHSPEC = _code_pathspec()


def git_state() -> dict:
    """The commit of the checkout and whether the work tree differs from it.

    Returns
    -------
    dict
        ``{"git_commit": <full hash>, "git_dirty": bool, "git_diff_sha256": <hex> or None}``;
        the digest is None for a clean tree (see the module docstring for its definition).

    Raises
    ------
    ReproError
        a git command failed (see `git`).
    """
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", *_CODE_PATHSPEC)
    digest = None
    if status:
        diff = git("diff", "HEAD", "--binary", "--", *_CODE_PATHSPEC)
        digest = hashlib.sha256(
            (diff + "\n" + status).encode("utf-8", "surrogateescape")
        ).hexdigest()
    return {"git_commit": commit, "git_dirty": bool(status), "git_diff_sha256": digest}


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one).

    Returns
    -------
    str
        The model name, else `platform.processor()`, else ``"unknown"``.
    """
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


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
