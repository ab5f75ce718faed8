"""Small file helpers: a required file, a file's SHA-256, a JSON file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .errors import ReproError


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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
