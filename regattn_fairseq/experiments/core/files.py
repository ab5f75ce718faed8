"""Small file helpers: a required file, a file's SHA-256, a JSON file, and a file replaced all
at once (`replacing`, `write_file`: shared with the benchmarks, in `regattn_bench.files`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from regattn_bench.files import fsync_folder, replacing, write_file

from .errors import ReproError

__all__ = ["fsync_folder", "replacing", "require_file", "sha256_file", "write_file", "write_json"]


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise ReproError(f"missing data file: {path}")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json(path: Path, payload) -> None:
    """Write `payload` as indented, key-sorted JSON, replacing the file all at once."""
    write_file(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
