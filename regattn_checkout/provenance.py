"""Where a result came from: the code (git commit, and whether and how the work tree differed
from it) and the CPU. One definition for the benchmark records (`regattn_bench.run_record`)
and the result rows of the reproduction suite (`regattn_fairseq.experiments.core.provenance`).

Dirty means: `git status --porcelain` prints anything (modified, staged, deleted or untracked
files that are not ignored) outside the results folder (`paths.RESULTS_DIR`): the suite and
the benchmarks write their own outputs there while they run, so the second row of a table, or
the second benchmark of `make bench`, would otherwise count as dirty. A dirty tree is recorded
with `git_diff_sha256`, the SHA-256 of `git diff HEAD --binary` followed by the porcelain
status (which names untracked files), so that two rows from the same dirty state can be told
apart from rows of another dirty state."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from pathlib import Path

from regattn_checkout import paths
from regattn_checkout.errors import ReproError


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
