"""Where a dataset's text comes from, and the record of what was read (for the cache stamp).

- offline: files under the data root (DATA_DIR: the shared offline data, or a user's own copy
  of the same layout pointed at with --data-dir / $REGATTN_DATA_DIR), paths as declared in
  configs/prepare/<dataset>.yaml `offline:`; each file read is recorded with its SHA-256;
- online: a split of a hub dataset through the `datasets` library (`online:` in the spec), the
  only place anything is downloaded; recorded with the dataset's fingerprint."""

from __future__ import annotations

import gzip
from pathlib import Path

from omegaconf import DictConfig

from .common import ReproError, require_file, sha256_file

SOURCES = ("offline", "online")


class Inputs:
    """Reads a builder's inputs and remembers them for the cache stamp.

    Parameters
    ----------
    data_dir : Path
        the offline data root.
    source : str
        ``"offline"`` or ``"online"`` (the source asked for).
    spec : DictConfig
        the dataset spec (configs/prepare/<dataset>.yaml).

    Attributes
    ----------
    files
        input name -> digest (SHA-256 of an offline file, or the `datasets`
        fingerprint of an online split, under ``"online:<id>/<config>/<split>"``).
    """

    def __init__(self, data_dir: Path, source: str, spec: DictConfig):
        self.data_dir = data_dir
        self.source = source
        self.spec = spec
        self.files: dict[str, str] = {}

    def path(self, relative: str) -> Path:
        """The offline file `relative` (to the data root), recorded.

        Raises
        ------
        ReproError
            the file does not exist (the message names it).
        """
        path = require_file(self.data_dir / relative)
        self.files[relative] = sha256_file(path)
        return path

    def lines(self, relative: str) -> list[str]:
        """The lines of an offline text file (gzip when it ends in .gz), without newlines."""
        path = self.path(relative)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle]

    def online_rows(self, split: str) -> list[dict]:
        """Rows of one split from the `datasets` library (the only place that downloads).

        Raises
        ------
        ReproError
            the spec configures no online source for `split`.
        """
        online = self.spec.get("online")
        if online is None or split not in online.splits:
            raise ReproError(f"{self.spec.name}: no online source configured for split {split!r}")
        import datasets

        print(
            f"[prepare] downloading {online.hf_id} {online.get('config') or ''} {split}", flush=True
        )
        rows = datasets.load_dataset(online.hf_id, online.get("config"), split=online.splits[split])
        self.files[f"online:{online.hf_id}/{online.get('config')}/{online.splits[split]}"] = (
            rows._fingerprint
        )
        return list(rows)

    def split_source(self, split: str) -> str:
        """Where `split` comes from: 'online' only where an online split is configured and
        online was asked for, else 'offline'.

        Raises
        ------
        ReproError
            the split is needed offline but the spec has no offline copy of it
            (the message points at DATA_SOURCE=online).
        """
        online = self.spec.get("online")
        if self.source == "online" and online is not None and split in online.splits:
            return "online"
        if self.spec.offline.get(split) is None:
            raise ReproError(
                f"{self.spec.name}: the {split} split is not available offline in {self.data_dir} "
                f"(use DATA_SOURCE=online to obtain it through the `datasets` library)"
            )
        return "offline"
