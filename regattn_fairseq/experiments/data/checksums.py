"""Checksums of what data preparation produced: every binarized file and dictionary of a
prepared folder's bin/ (size and SHA-256), recorded in its stamp when it is built and verified
before the data is used.

The stamp's cache key records what went *into* the data (options, code, tools, input files);
these checksums record what came *out*, so that a prepared file damaged afterwards (bytes
zeroed at the same size, a truncated copy) is found before a model trains or is scored on it,
and no result row is written from it.

Verification is cheap where it runs often: a file's size is compared every time, its content
is hashed again only when its size, modification time or inode differ from the last time this
process hashed it (the first verification of a process hashes everything: when the stamp is
read). The rows' data fingerprint (`fingerprint`; `fingerprint.data_fingerprint` of a
folder) is computed from the same per-file SHA-256 values, with the formula rows have always
used, so that an unchanged prepared folder keeps its fingerprint."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.files import sha256_file
from regattn_fairseq.experiments.data.sources import LOCAL_PREFIX, ONLINE_PREFIX

# the manifest's entry (in the stamp): path relative to bin/ -> {"size", "sha256"}
STAMP_KEY = "checksums"
# (resolved path) -> (size, mtime_ns, inode, sha256) of the last hash this process computed
_HASHED: dict[str, tuple[int, int, int, str]] = {}


class DamagedData(ReproError):
    """A prepared file differs from its recorded checksum (or is gone)."""


def data_files(bin_dir: Path) -> list[Path]:
    """The files a model trains on: every binarized file and dictionary under `bin_dir`.

    Parameters
    ----------
    bin_dir : Path
        the prepared data's fairseq folder.

    Returns
    -------
    list of Path
        Sorted ``*.bin``, ``*.idx``, ``*.label`` and ``dict*.txt`` files in it or its
        subfolders (SNLI keeps premise, hypothesis and labels in input0/, input1/, label/).
    """
    return sorted(
        p
        for p in Path(bin_dir).rglob("*")
        if p.is_file() and (p.suffix in (".bin", ".idx", ".label") or p.name.startswith("dict"))
    )


def _hash(path: Path) -> str:
    """The SHA-256 of a file, hashed again only when its size, mtime or inode changed since
    this process last hashed it (a rewrite in place changes the mtime)."""
    stat = path.stat()
    identity = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
    key = str(path.resolve())
    cached = _HASHED.get(key)
    if cached is not None and cached[:3] == identity:
        return cached[3]
    digest = sha256_file(path)
    _HASHED[key] = (*identity, digest)
    return digest


def record(bin_dir: Path) -> dict:
    """The checksums of a freshly built folder, for its stamp.

    Parameters
    ----------
    bin_dir : Path
        the prepared data's fairseq folder.

    Returns
    -------
    dict
        path relative to `bin_dir` -> ``{"size": bytes, "sha256": hex}``.

    Raises
    ------
    ReproError
        the folder holds no binarized data or dictionary (the build produced nothing).
    """
    bin_dir = Path(bin_dir)
    files = data_files(bin_dir)
    if not files:
        raise ReproError(f"no binarized data or dictionary in {bin_dir}")
    return {
        p.relative_to(bin_dir).as_posix(): {"size": p.stat().st_size, "sha256": _hash(p)}
        for p in files
    }


def fingerprint(checksums: dict) -> str:
    """The data fingerprint of result rows, from per-file checksums.

    Parameters
    ----------
    checksums : dict
        path relative to bin/ -> ``{"sha256", ...}`` (`record`).

    Returns
    -------
    str
        Hex SHA-256 over the lines ``"<path> <sha256>\\n"`` in path order: the formula rows
        have always used, so that the same data keeps its fingerprint.
    """
    digest = hashlib.sha256()
    for name in sorted(checksums):
        digest.update(f"{name} {checksums[name]['sha256']}\n".encode())
    return digest.hexdigest()


def damage(bin_dir: Path, checksums: dict | None, content: bool = True) -> str | None:
    """What differs between a prepared folder and its recorded checksums.

    Parameters
    ----------
    bin_dir : Path
        the prepared data's fairseq folder.
    checksums : dict or None
        the stamp's record (`record`); None for a stamp written before checksums existed.
    content : bool
        compare content hashes too (`_hash`: hashed again only where a file changed since
        this process hashed it); False compares sizes and the set of files only.

    Returns
    -------
    str or None
        The first difference, naming the file (``"bin/train.src-tgt.src.bin: 6000 bytes,
        recorded 14000"``), or None when the folder matches.
    """
    bin_dir = Path(bin_dir)
    if checksums is None:
        return "the stamp records no checksums of the prepared files"
    present = {p.relative_to(bin_dir).as_posix(): p for p in data_files(bin_dir)}
    label = lambda name: f"{bin_dir.name}/{name}"  # noqa: E731
    for name, expected in sorted(checksums.items()):
        path = present.get(name)
        if path is None:
            return f"{label(name)}: missing"
        size = path.stat().st_size
        if size != expected["size"]:
            return f"{label(name)}: {size} bytes, recorded {expected['size']}"
        if content and _hash(path) != expected["sha256"]:
            return f"{label(name)}: content differs from its recorded SHA-256 (same size)"
    extra = sorted(set(present) - set(checksums))
    if extra:
        return f"{label(extra[0])}: not produced by the build that wrote the stamp"
    return None


def verify(prepared, content: bool = True) -> str:
    """Check a prepared dataset against its stamp's checksums before it is used.

    Parameters
    ----------
    prepared : prepare.PreparedData
        the data (its ``root`` holds the stamp, its ``bin_dir`` the files).
    content : bool
        compare content hashes too (see `damage`); sizes are always compared.

    Returns
    -------
    str
        The data fingerprint (`fingerprint` of the recorded checksums).

    Raises
    ------
    DamagedData
        a file differs; the message names it and the fix (a re-run rebuilds the data).
    """
    checksums = prepared.manifest.get(STAMP_KEY)
    problem = damage(prepared.bin_dir, checksums, content)
    if problem is not None:
        raise DamagedData(
            f"prepared data {prepared.root} is damaged: {problem}. Nothing was written from "
            "it; run the same command again: the data is checked when it is prepared and "
            "rebuilt"
        )
    return fingerprint(checksums)


def stamp_damage(root: Path, stamp: dict, data_dir: Path, local_dir: Path | None) -> str | None:
    """Why a prepared folder must be rebuilt although its stamp may be current: a produced
    file differs from its checksum (content compared: this runs when the stamp is read).

    Parameters
    ----------
    root : Path
        the prepared folder (its bin/ holds the files).
    stamp : dict
        its stamp.
    data_dir : Path
        the offline data root.
    local_dir : Path or None
        LOCAL_DATA.

    Returns
    -------
    str or None
        ``"damaged: <file>: <difference>"``, or None when every file matches (or the stamp
        predates the checksums).

    Raises
    ------
    DamagedData
        a file differs and the inputs it was built from are gone (the data cannot be
        rebuilt): the message names the damaged file, the missing input and the fix.
    """
    checksums = stamp["manifest"].get(STAMP_KEY)
    if checksums is None:
        # written by code before the checksums: its cache key names other code, so the
        # stamp is stale and the folder rebuilt (`prepare._stale_reason`)
        return None
    problem = damage(Path(root) / "bin", checksums)
    if problem is None:
        return None
    missing = inputs_missing(stamp, data_dir, local_dir)
    if missing:
        raise DamagedData(
            f"prepared data {root} is damaged ({problem}) and cannot be rebuilt: its input "
            f"{missing[0]} is gone{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}"
            ". Restore the inputs (DATA_DIR / LOCAL_DATA as when it was built) and run again, "
            f"or delete {root} and prepare it from another source (DATA_SOURCE)"
        )
    print(f"[prepare] {root}: {problem}; the data is rebuilt", flush=True)
    return f"damaged: {problem}"


def inputs_missing(stamp: dict, data_dir: Path, local_dir: Path | None) -> list[str]:
    """The stamp's input files that are no longer where the data was built from.

    Parameters
    ----------
    stamp : dict
        the prepared folder's stamp (its ``manifest.inputs``: offline paths relative to the
        data root, ``local:`` paths relative to LOCAL_DATA, ``online:`` hub splits).
    data_dir : Path
        the offline data root.
    local_dir : Path or None
        LOCAL_DATA.

    Returns
    -------
    list of str
        The missing inputs' paths (online ones are never reported: the hub is asked again).
    """
    missing = []
    for relative in stamp["manifest"]["inputs"]:
        if relative.startswith(ONLINE_PREFIX):
            continue
        if relative.startswith(LOCAL_PREFIX):
            if local_dir is None:
                missing.append(relative)
                continue
            path = Path(local_dir) / relative[len(LOCAL_PREFIX) :]
        else:
            path = Path(data_dir) / relative
        if not os.path.isfile(path):
            missing.append(str(path))
    return missing
