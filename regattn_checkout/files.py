"""Small file helpers (a required file, a file's SHA-256, a JSON file), and writing a result
file so that a crash never leaves it half-written (issue #46).

A file under results/ (a table's markdown or CSV, a sidecar, a figure, a benchmark's record) is
written to a temporary file beside it, flushed to the disk (`os.fsync`) and renamed onto its
name: a reader, or the next run after a crash or a full disk, finds either the old file or the
new one, never a prefix of the new one. One helper for the suite and the benchmarks.

The append-only row files are the exception: they are appended to in place
(`experiments.rows.store.append_rows`), which fsyncs them with `fsync_folder` below.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from regattn_checkout.errors import ReproError


def fsync_folder(folder: Path) -> None:
    """Flush a folder's entries to the disk, so that a file created (or renamed) in it
    survives a crash of the machine, not only of the process."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path to write `path`'s new content to; renamed onto `path` when the block
    ends without an exception, removed when it raises.

    The temporary file is hidden and unique to the writer (``.partial-<pid>-<random>-<name>``, in
    the same folder, so that the rename is atomic, and ending in the same suffix, so that
    e.g. matplotlib's `savefig` picks the format from it); it is flushed to the disk before
    the rename, and the folder after it.

    Parameters
    ----------
    path : Path
        the file to write (its folder is created).

    Yields
    ------
    Path
        where to write the content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{os.getpid()}-{secrets.token_hex(4)}-{path.name}")
    try:
        yield partial
        with open(partial, "rb") as written:
            os.fsync(written.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def write_file(path: Path, content: str | bytes) -> Path:
    """Replace `path`'s content (text as UTF-8) all at once (`replacing`).

    Returns
    -------
    Path
        `path`.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    with replacing(path) as partial:
        partial.write_bytes(data)
    return Path(path)


def write_json(path: Path, payload) -> None:
    """Write `payload` as indented, key-sorted JSON, replacing the file all at once."""
    write_file(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def require_file(path: Path) -> Path:
    """`path`, which must be a file.

    Raises
    ------
    ReproError
        it is not (the message names it).
    """
    if not path.is_file():
        raise ReproError(f"missing data file: {path}")
    return path


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
