"""Where a dataset's text comes from, and the record of what was read (for the cache stamp).

Three sources, declared per dataset in configs/prepare/<dataset>.yaml:

- offline (`offline:`): files under the data root (DATA_DIR: the shared offline data, or a
  user's copy of the same layout, --data-dir / $REGATTN_DATA_DIR); each file read is recorded
  with its SHA-256;
- online (`online:`): the Hugging Face hub, always in a no-script form (`datasets` >= 4
  refuses dataset scripts), pinned by revision, the columns mapped to the builder's fields in
  the spec. Two forms: data files (parquet or JSON lines) read through
  `datasets.load_dataset`, the files of each split named by pattern, recorded with the
  `datasets` fingerprint; or line-aligned text files inside a zip archive of the repository
  (``online.archive``; ``online.members`` names each hub split's file per column), fetched with
  `huggingface_hub.hf_hub_download` and streamed line by line, recorded with the archive's
  SHA-256 (the repository's loading script, if any, is never run).
  $REGATTN_HUB_MIRROR=<dir> reads <dir>/<owner>/<name>/ (a copy of the repository's files at
  that revision) through the same code instead of the hub. Besides DATA_SOURCE=online, the
  hub stands in for missing offline copies (a fresh machine without DATA_DIR): `plan_source`;
- local (`local:`): the user's full copy of the official distribution, unmodified, under the
  folder LOCAL_DATA names (--local-data / $REGATTN_LOCAL_DATA); recorded like offline files,
  under ``local:<path>``.
"""

from __future__ import annotations

import gzip
import io
import os
import zipfile
import zlib
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from regattn_checkout.errors import ReproError
from regattn_checkout.files import require_file, sha256_file
from regattn_fairseq.experiments.core.paths import HUB_MIRROR_ENV, LOCAL_DATA_ENV

SOURCES = ("offline", "online", "local")
# The seed of the subsample of a hub split that stands in for a missing offline train set.
STAND_IN_SEED = 0
# a scale's ``stand_in_train`` when it reads whole splits (no subsample): the hub's whole splits
# stand in, nothing is sampled
WHOLE_SPLITS = "all"
LOCAL_PREFIX = "local:"
ONLINE_PREFIX = "online:"


def without_the_hub(spec: DictConfig) -> str:
    """How to reach a dataset's data when the hub cannot be: the user's copy of the official
    files (DATA_SOURCE=local) where the spec has a local layout, else the offline copies."""
    if spec.get("local") is not None:
        return (
            "Without the hub: DATA_SOURCE=local LOCAL_DATA=<folder with the official files> "
            "(docs/reproduction.md, 'Data sources')"
        )
    return (
        f"Without the hub: point DATA_DIR (make) / --data-dir at the offline copies "
        f"({spec.name} has no DATA_SOURCE=local layout)"
    )


def read_text_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (gzip when it ends in .gz), without line ends.

    Parameters
    ----------
    path : Path
        the file.

    Returns
    -------
    list[str]
        One string per line.

    Raises
    ------
    ReproError
        a line is not UTF-8 (the message names the file and the line).
    """
    opener = gzip.open if path.suffix == ".gz" else open
    lines = []
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as error:
                raise line_error(path, number, f"not UTF-8 text ({error.reason})") from None
    return lines


def line_error(path: Path | str, number: int, problem: str) -> ReproError:
    """The error for a malformed line of a data file: ``<file>, line <n>: <problem>``."""
    return ReproError(f"{path}, line {number}: {problem}")


def check_parallel(files: tuple[Path, Path], sides: tuple[list, list]) -> None:
    """Two line-aligned files must have as many lines.

    Raises
    ------
    ReproError
        they differ: the message names both files and the first line one of them lacks.
    """
    if len(sides[0]) != len(sides[1]):
        shorter = 0 if len(sides[0]) < len(sides[1]) else 1
        raise ReproError(
            f"{files[shorter]} ends at line {len(sides[shorter])} but its parallel file "
            f"{files[1 - shorter]} has {len(sides[1 - shorter])} lines (line "
            f"{len(sides[shorter]) + 1} has no counterpart)"
        )


def _hub_location(online: DictConfig) -> tuple[str, str | None, str]:
    """Where `datasets.load_dataset` reads a hub dataset: (path, revision, description).

    The hub repository at the pinned revision, or its copy under $REGATTN_HUB_MIRROR (the
    files of that revision, so no revision is passed)."""
    mirror = os.environ.get(HUB_MIRROR_ENV)
    if mirror:
        path = Path(mirror).expanduser().resolve() / online.hf_id
        return str(path), None, f"{path} ({HUB_MIRROR_ENV} copy of {online.hf_id})"
    return online.hf_id, online.revision, f"{online.hf_id}@{online.revision}"


def _hub_file(online: DictConfig, filename: str) -> Path:
    """One file of the spec's hub repository at the pinned revision, as a local path: fetched
    (and cached) with `huggingface_hub.hf_hub_download`, or the file of the
    $REGATTN_HUB_MIRROR copy.

    Raises
    ------
    OSError, ValueError
        the hub cannot be reached, the revision or the file is missing (huggingface_hub's
        errors), or the mirror copy lacks the file.
    """
    path, revision, _ = _hub_location(online)
    if revision is None:  # the mirror: a copy of the repository's files at that revision
        copy = Path(path) / filename
        if not copy.is_file():
            raise FileNotFoundError(f"{copy} does not exist")
        return copy
    from huggingface_hub import hf_hub_download

    return Path(
        hf_hub_download(
            repo_id=online.hf_id, filename=filename, repo_type="dataset", revision=revision
        )
    )


def hub_split_pattern(spec: DictConfig, split: str) -> str | None:
    """The data-file pattern of `split` (a split or evaluation name) in the spec's hub
    repository (for an archive source: the hub split, a key of ``online.members``):
    ``online.splits`` (DATA_SOURCE=online) or ``online.stand_in`` (only when the offline copies
    are missing); None when the hub has no such split."""
    online = spec.get("online")
    if online is None:
        return None
    for group in ("splits", "stand_in"):
        pattern = (online.get(group) or {}).get(split)
        if pattern is not None:
            return pattern
    return None


def stand_in_sample(count: int, size: int) -> list[int]:
    """The rows of a hub train split of `count` rows that stand in for a missing offline
    train set of `size` pairs, in sampled order: the first `size` of a seeded permutation
    (seed `STAND_IN_SEED`; the rows that ``datasets.Dataset.shuffle(seed=STAND_IN_SEED)``
    puts first)."""
    import numpy as np

    return np.random.default_rng(STAND_IN_SEED).permutation(count)[:size].tolist()


def _archive_lines(archive: zipfile.ZipFile, member: str, label: str, replace: dict):
    """The lines of one member of a zip archive, streamed (never read whole), each stripped of
    surrounding whitespace and with ``replace``'s strings replaced (old -> new).

    Raises
    ------
    ReproError
        a line is not UTF-8 (the message names the archive, the member and the line).
    """
    with io.BufferedReader(archive.open(member), buffer_size=1 << 20) as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                raise line_error(label, number, f"not UTF-8 text ({error.reason})") from None
            for old, new in replace.items():
                text = text.replace(old, new)
            yield text


def _archive_rows(archive: zipfile.ZipFile, path: Path, members: dict, replace: dict):
    """The rows of line-aligned members of a zip archive (column -> member), streamed: one
    tuple of lines (in the order of `members`) per row (see `_archive_lines`).

    Raises
    ------
    ReproError
        a member ends before the others (the message names it and the line).
    """
    streams = [_archive_lines(archive, m, f"{path}:{m}", replace) for m in members.values()]
    for number, row in enumerate(zip_longest(*streams), 1):
        if None in row:
            ended = next(m for m, v in zip(members.values(), row, strict=True) if v is None)
            raise ReproError(
                f"{path}:{ended} ends at line {number - 1} but its parallel members "
                f"({', '.join(members.values())}) go on (line {number} has no counterpart)"
            )
        yield row


@dataclass
class SourcePlan:
    """Where one dataset's data comes from at one scale.

    Attributes
    ----------
    source : str
        ``offline``, ``online`` or ``local`` (the prepared data's folder and rows say it).
    stand_in : bool
        the offline copies are missing and the hub stands in for them (every split and
        evaluation set with a hub counterpart comes from the hub, train subsampled).
    summary : str
        one line: the source, where it is read and the sizes.
    """

    source: str
    stand_in: bool
    summary: str

    @property
    def label(self) -> str:
        """The data's name in folders, the cache key and rows: the source, or
        ``online-stand-in`` (other data than DATA_SOURCE=online at the same scale)."""
        return "online-stand-in" if self.stand_in else self.source


def offline_files(spec: DictConfig, source: str) -> list[str]:
    """The paths (relative to DATA_DIR) a build reads offline: every path of ``offline:`` and
    of ``evaluations:``, except the splits that `source` takes from the hub."""
    online_splits = (
        set((spec.get("online") or {}).get("splits") or {}) if source == "online" else set()
    )
    paths: list[str] = []

    def collect(node) -> None:
        if isinstance(node, str):
            paths.append(node)
        elif isinstance(node, (DictConfig, dict)):
            for value in node.values():
                collect(value)
        elif isinstance(node, (ListConfig, list)):
            for value in node:
                collect(value)

    for split, node in (spec.get("offline") or {}).items():
        if split not in online_splits:
            collect(node)
    for files in (spec.get("evaluations") or {}).values():
        for key in ("src", "tgt", "refs"):
            collect(files.get(key))
    return paths


def resolve_local_dir(local_dir) -> Path:
    """The folder of the user's own copies (DATA_SOURCE=local): the argument, else
    $REGATTN_LOCAL_DATA.

    Raises
    ------
    ReproError
        none named, or the folder does not exist.
    """
    chosen = local_dir or os.environ.get(LOCAL_DATA_ENV)
    if not chosen:
        raise ReproError(
            f"DATA_SOURCE=local reads the official distributions from a folder you name: "
            f"LOCAL_DATA=<dir> (make), --local-data <dir> or ${LOCAL_DATA_ENV} (layouts: "
            f"docs/reproduction.md, 'Data sources')"
        )
    path = Path(chosen).expanduser().resolve()
    if not path.is_dir():
        raise ReproError(f"LOCAL_DATA {path} is not a folder")
    return path


def _sizes(opts: DictConfig) -> str:
    caps = [
        f"{key} {opts[key]:,}" for key in ("max_train", "max_eval") if opts.get(key) is not None
    ]
    return f" (capped: {', '.join(caps)})" if caps else ""


def plan_source(
    spec: DictConfig, opts: DictConfig, requested: str | None, data_dir: Path, local_dir
) -> SourcePlan:
    """Decide where a dataset's data comes from, before reading any of it.

    Rules: the source asked for (DATA_SOURCE), else the scale's. ``local`` needs the spec's
    ``local:`` layout, ``online`` hub splits (``online.splits``); a dataset without them (its
    offline copy is complete) is read offline.
    When the offline copies a build needs are missing (no DATA_DIR on a fresh machine) and no
    source was asked for, the hub stands in: the scale's ``stand_in_train`` pairs sampled
    from the hub's train split (seed `STAND_IN_SEED`, the size of the offline train set) and
    the hub's copies of the evaluation sets (``online.stand_in``); where the scale reads whole
    splits (``stand_in_train: all``, `WHOLE_SPLITS`), the hub's whole splits, unsampled.

    Parameters
    ----------
    spec : DictConfig
        the dataset spec.
    opts : DictConfig
        the scale's options (with overrides and caps).
    requested : str | None
        the source asked for, or None.
    data_dir : Path
        the offline data root (it may not exist).
    local_dir
        the LOCAL_DATA folder, or None.

    Returns
    -------
    SourcePlan
        The source and a one-line summary of it.

    Raises
    ------
    ReproError
        an unknown source; LOCAL_DATA missing for ``local``; offline copies missing where
        no hub source stands in for them (the message names the first missing file).
    """
    source = requested or opts.source
    if source not in SOURCES:
        raise ReproError(f"unknown data source {source!r}; choose one of {', '.join(SOURCES)}")
    if source == "local" and spec.get("local") is not None:
        root = resolve_local_dir(local_dir)
        return SourcePlan(
            "local", False, f"{spec.name}: local, official layout under {root}{_sizes(opts)}"
        )
    source, note = _source_with_something_to_read(spec, source)
    missing = [p for p in offline_files(spec, source) if not (data_dir / p).exists()]
    if not missing:
        return _offline_copies_plan(spec, opts, source, note, data_dir)
    absent_copies = _absent_copies(data_dir, missing)
    if requested is not None:
        raise ReproError(
            f"{spec.name}: DATA_SOURCE={requested}{note} reads the offline copies, but "
            f"{absent_copies}; point DATA_DIR at them, or leave DATA_SOURCE unset to let the hub "
            f"stand in for them"
        )
    return _stand_in_plan(spec, opts, data_dir, absent_copies)


def _source_with_something_to_read(spec: DictConfig, source: str) -> tuple[str, str]:
    """The source a build reads, and the note on why: ``local`` and ``online`` fall back to
    ``offline`` where the spec has no local layout or no hub splits (its offline copy is
    complete); any other source is read as asked, with no note."""
    if source == "local":
        return "offline", " (no local layout: its offline copy is complete)"
    if source == "online" and not ((spec.get("online") or {}).get("splits")):
        return "offline", " (nothing to take from the hub: its offline copy is complete)"
    return source, ""


def _offline_copies_plan(
    spec: DictConfig, opts: DictConfig, source: str, note: str, data_dir: Path
) -> SourcePlan:
    """The plan when every offline copy the build reads is under the data root (``online``:
    train from the hub, the rest offline)."""
    detail = (
        f"train from {_hub_location(spec.online)[2]}, the rest from {data_dir}"
        if source == "online"
        else str(data_dir)
    )
    return SourcePlan(
        source, False, f"{spec.name}: {source}{note} ({detail}): {opts.note}{_sizes(opts)}"
    )


def _absent_copies(data_dir: Path, missing: list[str]) -> str:
    """What is missing of the offline copies: the data root, or its first missing file."""
    if data_dir.is_dir():
        return f"{data_dir / missing[0]} is missing ({len(missing)} files missing)"
    return f"DATA_DIR {data_dir} does not exist"


def _stand_in_plan(
    spec: DictConfig, opts: DictConfig, data_dir: Path, absent_copies: str
) -> SourcePlan:
    """The hub standing in for the missing offline copies (see `plan_source`).

    Raises
    ------
    ReproError
        the spec has no hub source, or none at this scale (no ``stand_in_train``).
    """
    name, online = spec.name, spec.get("online")
    if online is None or opts.get("stand_in_train") is None:
        hub = "no hub source" if online is None else "no hub source at this scale"
        local = (
            " or DATA_SOURCE=local LOCAL_DATA=<folder with the official files> "
            "(docs/reproduction.md, 'Data sources')"
            if spec.get("local") is not None
            else ""
        )
        raise ReproError(
            f"{name}: {absent_copies}, and no hub source can stand in for the offline copies "
            f"({hub} is configured in configs/prepare/{name}.yaml); point DATA_DIR (make) / "
            f"--data-dir at the offline data{local}"
        )
    summary = (
        f"{name}: hub {_hub_location(online)[2]} standing in for the offline copies missing "
        f"under {data_dir}: {_taken_from_the_hub(spec, opts)}{_sizes(opts)}"
    )
    return SourcePlan("online", True, summary)


def _taken_from_the_hub(spec: DictConfig, opts: DictConfig) -> str:
    """What a stand-in reads from the hub: its whole splits (``stand_in_train: all``), or a
    sample of its train split and the evaluation sets it has."""
    if opts.stand_in_train == WHOLE_SPLITS:
        setting = opts.get("setting")
        splits = [s for s in spec.online.stand_in if setting is None or s.startswith(f"{setting}_")]
        return f"the hub's whole splits {splits}: {opts.note}"
    evaluations = list((spec.get("evaluations") or {}).keys())
    on_hub = [e for e in evaluations if hub_split_pattern(spec, e) is not None]
    absent = [e for e in evaluations if e not in on_hub]
    return (
        f"train {int(opts.stand_in_train):,} pairs sampled from the hub's train split (seed "
        f"{STAND_IN_SEED}), evaluation sets {on_hub or 'none'} from the hub"
        + (f", {absent} not on the hub (left out)" if absent else "")
    )


class Inputs:
    """Reads a builder's inputs and remembers them for the cache stamp.

    Parameters
    ----------
    data_dir : Path
        the offline data root.
    source : str
        ``offline``, ``online`` or ``local`` (`SourcePlan.source`).
    spec : DictConfig
        the dataset spec (configs/prepare/<dataset>.yaml).
    local_dir : Path | None
        the LOCAL_DATA folder (source ``local``).
    stand_in_train : int | str | None
        set when the hub stands in for missing offline copies (`SourcePlan.stand_in`): the
        number of hub train pairs to sample, or `WHOLE_SPLITS` (no sample).

    Attributes
    ----------
    files
        input name -> digest: SHA-256 of an offline file (its path under DATA_DIR) or of a
        local one (``local:<path>``), or the `datasets` fingerprint of a hub split
        (``online:<id>@<revision>/<pattern>``).
    """

    def __init__(
        self,
        data_dir: Path,
        source: str,
        spec: DictConfig,
        local_dir: Path | None = None,
        stand_in_train: int | str | None = None,
    ):
        self.data_dir = data_dir
        self.source = source
        self.spec = spec
        self.local_dir = local_dir
        self.stand_in_train = stand_in_train
        self.stand_in = stand_in_train is not None
        self.files: dict[str, str] = {}
        self._archive_digests: dict[Path, str] = {}

    @property
    def local(self) -> DictConfig | None:
        """The spec's local layout when the source is ``local``, else None."""
        return self.spec.local if self.source == "local" else None

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
        """The lines of an offline text file (see `read_text_lines`)."""
        return read_text_lines(self.path(relative))

    def local_path(self, relative: str) -> Path:
        """The file `relative` of the user's official layout under LOCAL_DATA, recorded.

        Raises
        ------
        ReproError
            the file does not exist: the message names it and the layout's section in
            docs/reproduction.md.
        """
        path = self.local_dir / relative
        if not path.is_file():
            raise ReproError(
                f"{self.spec.name}: missing {path} (DATA_SOURCE=local expects the official "
                f"layout under LOCAL_DATA={self.local_dir}; docs/reproduction.md, 'Data sources')"
            )
        self.files[LOCAL_PREFIX + relative] = sha256_file(path)
        return path

    def local_lines(self, relative: str) -> list[str]:
        """The lines of a file of the local layout (see `read_text_lines`)."""
        return read_text_lines(self.local_path(relative))

    def evaluation_names(self) -> list[str]:
        """The spec's evaluation sets this plan provides: all of them, except those the hub
        lacks when it stands in for missing offline copies."""
        names = list((self.spec.get("evaluations") or {}).keys())
        if self.stand_in:
            return [name for name in names if hub_split_pattern(self.spec, name) is not None]
        return names

    def split_source(self, split: str) -> str:
        """Where `split` (a split or evaluation name) comes from: 'local' for a local plan,
        'online' where the plan takes it from the hub, else 'offline'.

        Raises
        ------
        ReproError
            the split is needed offline but the spec has no offline copy of it (the message
            points at DATA_SOURCE=online and local).
        """
        if self.source == "local":
            return "local"
        if self.source == "online" and split in (
            (self.spec.get("online") or {}).get("splits") or {}
        ):
            return "online"
        if self.stand_in and hub_split_pattern(self.spec, split) is not None:
            return "online"
        if (
            split in (self.spec.get("evaluations") or {})
            or self.spec.offline.get(split) is not None
        ):
            return "offline"
        raise ReproError(
            f"{self.spec.name}: the {split} split is not available offline in {self.data_dir} "
            f"(DATA_SOURCE=online takes it from the hub; DATA_SOURCE=local from your own copy)"
        )

    def hub_columns(self, split: str) -> dict[str, list]:
        """One split of the spec's hub dataset, as the builder's fields (``online.columns``).

        A stand-in train split is subsampled (`stand_in_sample`) to the offline train set's
        size; every other split is read whole (the builder applies max_train / max_eval).

        Parameters
        ----------
        split : str
            a split or evaluation name with a hub pattern (`hub_split_pattern`).

        Returns
        -------
        dict[str, list]
            field -> values, one per example (rows whose ``online.drop`` column holds a
            dropped value are left out first; data-file form only); a field of
            ``online.labels`` holds the names of its ClassLabel ints.

        Raises
        ------
        ReproError
            no hub pattern for the split; the dataset cannot be loaded: the hub is out of
            reach, the revision or files are missing, or the revision holds a loading script
            (the message names the dataset and DATA_SOURCE=local); an archive is no zip, lacks
            a member, or its members differ in length; a mapped column is missing; too few rows
            to sample.
        """
        online = self.spec.online
        pattern = hub_split_pattern(self.spec, split)
        if pattern is None:
            raise ReproError(f"{self.spec.name}: no hub source configured for {split!r}")
        where = _hub_location(online)[2]
        print(f"[prepare] {self.spec.name}: {split} from {where} ({pattern})", flush=True)
        read = self._archive_split if online.get("archive") else self._files_split
        rows, digest, name = read(split, pattern, where)
        self.files[f"{ONLINE_PREFIX}{online.hf_id}@{online.revision}/{name}"] = digest
        out = {}
        labels = online.get("labels") or {}
        for field, column in online.columns.items():
            top, _, key = column.partition(".")
            values = list(rows[top])
            values = [value[key] for value in values] if key else values
            if field in labels:  # ClassLabel ints (one per row, or a sequence per row)
                names = list(labels[field])
                values = [
                    [names[i] for i in value] if isinstance(value, list) else names[value]
                    for value in values
                ]
            out[field] = values
        return out

    def _hub_error(self, what: str, where: str, error: Exception) -> ReproError:
        """The error for a hub split that cannot be read: it names the dataset, what was read
        from where (the hub id and revision), the cause and the way without the hub
        (`without_the_hub`)."""
        # on a fresh machine the hub was the last resort: say that both are out of reach
        standing_in = (
            f"the offline copies are missing under {self.data_dir} and the hub, standing "
            f"in for them, cannot be reached: "
            if self.stand_in
            else ""
        )
        return ReproError(
            f"{self.spec.name}: {standing_in}could not load {what} of the hub dataset {where} "
            f"({type(error).__name__}: {error}). {without_the_hub(self.spec)}"
        )

    def _check_columns(self, available: list[str], where: str, pattern: str) -> None:
        """Every column that ``online.columns`` maps must be among `available`."""
        needed = {column.split(".")[0] for column in self.spec.online.columns.values()}
        missing = sorted(needed - set(available))
        if missing:
            raise ReproError(
                f"{self.spec.name}: {where} {pattern} has no column {missing}; it has "
                f"{available} (online.columns in configs/prepare/{self.spec.name}.yaml)"
            )

    def _sample(self, split: str, count: int, where: str, pattern: str) -> list[int] | None:
        """The rows to keep of a hub split of `count` rows: a stand-in train split's sample
        (`stand_in_sample`), else None (all of them)."""
        if not (self.stand_in and split == "train") or self.stand_in_train == WHOLE_SPLITS:
            return None
        if count < self.stand_in_train:
            raise ReproError(
                f"{self.spec.name}: {where} {pattern} has {count} rows, fewer than "
                f"the {self.stand_in_train} to sample"
            )
        return stand_in_sample(count, self.stand_in_train)

    def _files_split(self, split: str, pattern: str, where: str):
        """A split of data files (parquet, JSON lines) through `datasets.load_dataset`:
        (the table, its `datasets` fingerprint, the pattern)."""
        import datasets

        path, revision, _ = _hub_location(self.spec.online)
        try:
            table = datasets.load_dataset(
                path, revision=revision, data_files={split: pattern}, split=split
            )
        # RuntimeError: `datasets` refuses a revision that holds a loading script
        except (OSError, ValueError, RuntimeError) as error:
            raise self._hub_error(pattern, where, error) from error
        self._check_columns(table.column_names, where, pattern)
        fingerprint = table._fingerprint
        for column, values_dropped in (self.spec.online.get("drop") or {}).items():
            table = table.filter(
                lambda values, dropped=frozenset(values_dropped): [
                    v not in dropped for v in values
                ],
                input_columns=column,
                batched=True,
            )
        rows = self._sample(split, len(table), where, pattern)
        if rows is not None:
            table = table.select(rows)
        return table, fingerprint, pattern

    def _archive_split(self, split: str, pattern: str, where: str):
        """A hub split stored as line-aligned text files inside a zip archive of the
        repository (``online.archive``; the split's file per column: ``online.members``),
        streamed line by line, each line stripped of surrounding whitespace and with the
        split's ``online.replace`` strings replaced: (column -> values, the archive's SHA-256,
        ``<archive>:<split>``). A stand-in sample reads the archive twice (count, then pick)
        rather than hold the whole split.

        Raises
        ------
        ReproError
            the archive cannot be fetched (`_hub_error`), is no readable zip, lacks a member,
            or two members differ in length.
        """
        online = self.spec.online
        name = self.spec.name
        members = dict((online.get("members") or {}).get(pattern) or {})
        if not members:
            raise ReproError(
                f"{name}: online.members has no hub split {pattern!r} (configs/prepare/{name}.yaml)"
            )
        columns = list(members)
        self._check_columns(columns, where, pattern)
        what = f"{pattern} ({', '.join(members.values())} in {online.archive})"
        try:
            path = _hub_file(online, online.archive)
        except (OSError, ValueError) as error:
            raise self._hub_error(what, where, error) from error
        if path not in self._archive_digests:
            self._archive_digests[path] = sha256_file(path)
        replace = dict((online.get("replace") or {}).get(pattern) or {})
        try:
            with zipfile.ZipFile(path) as archive:
                held = sorted(archive.namelist())
                absent = [member for member in members.values() if member not in held]
                if absent:
                    raise ReproError(
                        f"{name}: the archive {online.archive} of {where} ({path}) has no "
                        f"member {absent[0]} (online.members.{pattern} in "
                        f"configs/prepare/{name}.yaml); it holds {held[:8]}"
                        + (f" and {len(held) - 8} more" if len(held) > 8 else "")
                    )

                sample = None
                if self.stand_in and split == "train":
                    first = next(iter(members.values()))
                    with io.BufferedReader(archive.open(first), buffer_size=1 << 20) as handle:
                        count = sum(1 for _ in handle)
                    sample = self._sample(split, count, where, pattern)
                if sample is None:
                    values = {column: [] for column in columns}
                    appends = [values[column].append for column in columns]
                    for row in _archive_rows(archive, path, members, replace):
                        for append, value in zip(appends, row, strict=True):
                            append(value)
                else:
                    position = {index: k for k, index in enumerate(sample)}
                    picked: list = [None] * len(sample)
                    for index, row in enumerate(_archive_rows(archive, path, members, replace)):
                        if index in position:
                            picked[position[index]] = row
                    values = {c: [row[k] for row in picked] for k, c in enumerate(columns)}
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise ReproError(
                f"{name}: the archive {online.archive} of {where} ({path}) is not a readable "
                f"zip ({type(error).__name__}: {error}). {without_the_hub(self.spec)}"
            ) from error
        return values, self._archive_digests[path], f"{online.archive}:{pattern}"
