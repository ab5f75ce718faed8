"""Which slow tests CI runs on a given day (`pytest --slow-tier daily`, `.ci/run`).

The whole slow tier does not fit CI's time on the 2-core machine beside the default suite
(docs/development.md gives the measurements), so CI runs a deterministic half of it each day,
the other half the next, plus every slow test whose module changed in the last day's commits:
a test that its change touches runs the same day; every test runs at least every other day.
`make test-slow` with no option runs the whole tier.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

CHANGED_SINCE = "24 hours ago"

# CI's deadline for starting a slow test (seconds since the epoch, set by .ci/run): CI must end
# before its hard limit, whatever a day's share of the slow tier costs on the machine it gets
CI_DEADLINE_ENV = "REGATTN_CI_SLOW_DEADLINE"


def past_ci_deadline(is_slow: bool, now: float | None = None) -> bool:
    """Whether a test must not start: it is slow and CI's deadline for the slow tier
    (`CI_DEADLINE_ENV`) has passed. Outside CI (the variable unset) nothing is cut, and the
    default suite never is."""
    deadline = os.environ.get(CI_DEADLINE_ENV)
    return bool(deadline) and is_slow and (time.time() if now is None else now) > float(deadline)


def in_todays_half(nodeid: str, day: datetime.date) -> bool:
    """Whether the test `nodeid` is in `day`'s half: the halves swap from one day to the next
    (the parity of the test id's CRC-32 against the day's)."""
    return zlib.crc32(nodeid.encode()) % 2 == day.toordinal() % 2


def changed_modules(repo: Path, since: str = CHANGED_SINCE) -> set[str]:
    """The paths, relative to `repo`, of the files that commits since `since` changed (none
    outside a git checkout)."""
    try:
        done = subprocess.run(
            ["git", "log", f"--since={since}", "--name-only", "--format="],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {line for line in done.stdout.splitlines() if line}


def todays_slow_tests(
    nodeids: Iterable[str], day: datetime.date, changed: set[str]
) -> tuple[list[str], list[str]]:
    """Split slow test ids into (kept, left out): kept are `day`'s half and those whose module
    (the id's path, relative to the repository) is in `changed`."""
    kept, left_out = [], []
    for nodeid in nodeids:
        module = nodeid.split("::", 1)[0]
        (kept if module in changed or in_todays_half(nodeid, day) else left_out).append(nodeid)
    return kept, left_out
