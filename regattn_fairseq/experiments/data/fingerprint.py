"""What data a model trained on, as one hash of its binarized files."""

from __future__ import annotations

import hashlib
from pathlib import Path

from regattn_fairseq.experiments.core.errors import ReproError

import hashlib
import json
import os
from pathlib import Path
from regattn_fairseq.experiments.core.errors import ReproError


def data_fingerprint(bin_dir: Path) -> str:
    """The SHA-256 of the binarized data and dictionaries a model trains on.

    Parameters
    ----------
    bin_dir : Path
        the prepared data's fairseq folder.

    Returns
    -------
    str
        Hex SHA-256 over the sorted (path relative to `bin_dir`, SHA-256) of every ``*.bin``,
        ``*.idx``, ``*.label`` and ``dict*.txt`` file in it or its subfolders (SNLI keeps
        premise, hypothesis and labels in input0/, input1/ and label/).

    Raises
    ------
    ReproError
        the folder holds none of them.
    """
    bin_dir = Path(bin_dir)
    files = sorted(
        p
        for p in bin_dir.rglob("*")
        if p.is_file() and (p.suffix in (".bin", ".idx", ".label") or p.name.startswith("dict"))
    )
    if not files:
        raise ReproError(f"no binarized data or dictionary in {bin_dir}")
    digest = hashlib.sha256()
    for path in files:
        name = path.relative_to(bin_dir).as_posix()
        digest.update(f"{name} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()
