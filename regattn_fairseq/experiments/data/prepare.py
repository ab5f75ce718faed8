"""Data preparation: read a dataset (offline from DATA_DIR, online from the hub through
`datasets`, or local from the user's official layouts under LOCAL_DATA), tokenize / segment
it as the field does, binarize it with fairseq-preprocess, and cache the result under
<work_dir>/data/<variant>/<scale>-<source>/ behind a stamp.

What is read and how is declared in configs/prepare/<dataset>.yaml. The work is split by
concern: `sources` (where the data comes from: the plan, offline and local files, hub
splits), `text_processing` (Moses, BPE, fairseq-preprocess), `builders` (one module per
dataset kind); this module holds the cache, the `prepare()` entry and the line a run prints
first (`describe_sources`).

The cache key (`cache_key_inputs`) covers everything that shapes the prepared data: the
composed dataset spec and options, the source, the source code of every module that takes
part (this one, core's config and tools, the checkout's files, sources, text_processing, the
builders package and the kind's builder), and the versions of the tools the builder uses (plus
`datasets` when online). The stamp also records each input file's hash, re-checked on every call."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from omegaconf import DictConfig, OmegaConf

from regattn_checkout import files
from regattn_checkout.errors import ReproError
from regattn_checkout.files import sha256_file, write_json
from regattn_fairseq.experiments.core import cli, config, tools
from regattn_fairseq.experiments.core.config import check_scale, data_root, load_config
from regattn_fairseq.experiments.core.dry_run import caps_label
from regattn_fairseq.experiments.core.paths import DEFAULT_WORK_DIR
from regattn_fairseq.experiments.core.tools import package_version
from regattn_fairseq.experiments.data import builders, checksums, sources, text_processing
from regattn_fairseq.experiments.data.builders import builder_for
from regattn_fairseq.experiments.data.sources import (
    LOCAL_PREFIX,
    ONLINE_PREFIX,
    Inputs,
    SourcePlan,
    plan_source,
    resolve_local_dir,
)


@dataclass
class PreparedData:
    """A binarized dataset ready for fairseq plus what scoring needs (references, languages)."""

    root: Path
    manifest: dict

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def evaluation(self, name: str) -> dict:
        """The manifest entry of evaluation set `name`.

        Raises
        ------
        ReproError
            the dataset has no such evaluation set (the message lists them).
        """
        try:
            return self.manifest["evaluations"][name]
        except KeyError:
            raise ReproError(
                f"dataset {self.manifest['dataset']} has no evaluation set {name!r}; "
                f"it has {sorted(self.manifest['evaluations'])}"
            ) from None


def code_modules(kind: str) -> list[ModuleType]:
    """The modules whose source shapes the prepared data of a dataset kind.

    Parameters
    ----------
    kind : str
        the spec's ``kind``.

    Returns
    -------
    list[ModuleType]
        This module, core's config and tools, the checkout's file helpers, sources,
        text_processing, the builders package and the kind's builder module.

    Raises
    ------
    ReproError
        unknown kind.
    """
    return [
        sys.modules[__name__],
        config,
        tools,
        files,
        sources,
        text_processing,
        builders,
        builder_for(kind),
    ]


def tool_versions(kind: str, source: str) -> dict[str, str]:
    """The versions of the tools a kind's builder uses (and `datasets` for online data).

    Parameters
    ----------
    kind : str
        the spec's ``kind``.
    source : str
        ``"offline"`` or ``"online"``.

    Returns
    -------
    dict[str, str]
        distribution -> version (``"not installed"`` where absent).

    Raises
    ------
    ReproError
        unknown kind.
    """
    tools = list(builder_for(kind).TOOLS) + (["datasets"] if source.startswith("online") else [])
    return {tool: package_version(tool) for tool in sorted(set(tools))}


def cache_key_inputs(spec: DictConfig, opts: DictConfig, source: str) -> dict:
    """Everything the prepared data depends on, except the input files (checked separately).

    Parameters
    ----------
    spec : DictConfig
        the dataset spec (configs/prepare/<dataset>.yaml).
    opts : DictConfig
        the composed options (the scale's, with the caller's overrides).
    source : str
        ``"offline"`` or ``"online"``.

    Returns
    -------
    dict
        ``{"spec", "options", "source", "code": {module: sha256 of its file},
        "tools": {distribution: version}}``.

    Raises
    ------
    ReproError
        the spec's kind is unknown.
    """
    return {
        "spec": OmegaConf.to_container(spec, resolve=True),
        "options": OmegaConf.to_container(opts, resolve=True),
        "source": source,
        "code": {
            module.__name__: sha256_file(Path(module.__file__))
            for module in code_modules(spec.kind)
        },
        "tools": tool_versions(spec.kind, source),
    }


def cache_key(spec: DictConfig, opts: DictConfig, source: str) -> str:
    """The SHA-256 of `cache_key_inputs` (canonical JSON).

    Raises
    ------
    ReproError
        the spec's kind is unknown.
    """
    return _digest(cache_key_inputs(spec, opts, source))


def _caps_note(caps: dict) -> str:
    """The caps in the data's description (the scale's note describes the uncapped data)."""
    if not caps:
        return ""
    return "; capped: " + ", ".join(f"{name} {value}" for name, value in caps.items())


def _digest(key_inputs: dict) -> str:
    return hashlib.sha256(json.dumps(key_inputs, sort_keys=True).encode()).hexdigest()


def _stale_reason(
    stamp: dict, options_key: str, key_inputs: dict, data_dir: Path, local_dir: Path | None
) -> str | None:
    """Why a stamp is not current (None when it is): other options, code or tool versions,
    another data root or LOCAL_DATA folder, or an input file whose hash changed (online inputs
    are identified by their `datasets` fingerprint and not re-fetched)."""
    if stamp.get("options_key") != options_key:
        old = stamp.get("key_inputs") or {}
        changed = [
            part
            for part in ("spec", "options", "source", "code", "tools")
            if old.get(part) != key_inputs[part]
        ]
        return f"changed: {', '.join(changed) or 'cache key'}"
    if stamp.get("data_dir") != str(data_dir):
        return f"data root was {stamp.get('data_dir')}"
    if stamp.get("local_dir") != (local_dir and str(local_dir)):
        return f"LOCAL_DATA was {stamp.get('local_dir')}"
    for relative, digest in stamp["manifest"]["inputs"].items():
        if relative.startswith(ONLINE_PREFIX):
            continue
        if relative.startswith(LOCAL_PREFIX):
            path = local_dir / relative[len(LOCAL_PREFIX) :]
        else:
            path = data_dir / relative
        if not path.is_file() or sha256_file(path) != digest:
            return f"input changed: {relative}"
    return None


@contextmanager
def _build_lock(root: Path):
    """An exclusive lock on a prepared-data folder (a file beside it), held while its stamp is
    checked and, if stale, while it is rebuilt; released when the process ends, even killed."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class _DataBuild:
    """One prepared-data folder: what it is built from and where (the steps of `prepare`).

    Attributes
    ----------
    dataset, scale, variant : str
        the spec's name, the scale, and the data's name (``<dataset>-<setting>`` where the
        options choose a setting).
    spec, opts : DictConfig
        the dataset spec and the composed, capped options.
    caps : dict
        a dry run's caps (in the folder's name and the data's description).
    plan : SourcePlan
        where the data comes from.
    builder : ModuleType
        the kind's builder.
    data_dir : Path
        the offline data root.
    local_dir : Path or None
        the LOCAL_DATA folder (source ``local`` only).
    root : Path
        the folder.
    key_inputs : dict
        everything the data depends on but the input files (`cache_key_inputs`).
    """

    dataset: str
    scale: str
    variant: str
    spec: DictConfig
    opts: DictConfig
    caps: dict
    plan: SourcePlan
    builder: ModuleType
    data_dir: Path
    local_dir: Path | None
    root: Path
    key_inputs: dict

    @property
    def stamp_path(self) -> Path:
        return self.root / "stamp.json"

    @property
    def options_key(self) -> str:
        """The cache key (`cache_key`), recorded in the stamp."""
        return _digest(self.key_inputs)

    @property
    def what(self) -> str:
        """The data as the log lines name it: ``<variant> (<scale>, <source>)``."""
        return f"{self.variant} ({self.scale}, {self.plan.label})"


def prepare(
    dataset: str,
    scale: str,
    *,
    data_dir=None,
    source: str | None = None,
    work_dir: Path = DEFAULT_WORK_DIR,
    overrides: dict | None = None,
    caps: dict | None = None,
    local_dir=None,
) -> PreparedData:
    """Prepare `dataset` at `scale` (options from configs/prepare/<dataset>.yaml), cached.

    Parameters
    ----------
    dataset : str
        a spec name in configs/prepare/.
    scale : str
        paper, small or smoke.
    data_dir
        the offline data root (default: $REGATTN_DATA_DIR, else the shared data); where the
        copies a build needs are missing, the hub stands in (`sources.plan_source`).
    source : str | None
        ``"offline"``, ``"online"`` or ``"local"`` (default: the scale's).
    work_dir : Path
        the data goes to work_dir/data/<variant>/<scale>-<source>/.
    overrides : dict | None
        options merged over the scale's (e.g. ``{"languages": ["finnish"]}``).
    caps : dict | None
        caps on the number of examples, ``{"max_train": n, "max_eval": m}`` (a dry run,
        `dry_run.DryRun.data_caps`): each lowers the option of that name, never raises it;
        the capped data goes to a folder of its own (``<scale>-<source>-capped-train<n>...``)
        and is never taken for the full data.
    local_dir
        the folder of the official layouts for source ``local`` (default:
        $REGATTN_LOCAL_DATA).

    Returns
    -------
    PreparedData
        The prepared data (its folder and manifest), rebuilt only when the cache key or an
        input file changed.

    Raises
    ------
    ReproError
        unknown dataset, scale, source or kind; missing data; a failed tool.
    """
    build = _planned_build(dataset, scale, data_dir, source, work_dir, overrides, caps, local_dir)
    # Two runs that need the same data (two mappings started side by side) must not build it
    # into the same folder at once: the second waits, then finds the first one's stamp.
    with _build_lock(build.root):
        stamp = json.loads(build.stamp_path.read_text()) if build.stamp_path.is_file() else None
        if stamp is None:
            return _build(build, "no stamp")
        # the produced files against their checksums first (issue #26): a damaged file is
        # rebuilt, or named when its inputs are gone, before the stamp's inputs are judged
        damage = checksums.stamp_damage(build.root, stamp, build.data_dir, build.local_dir)
        if damage:
            return _build(build, damage)
        stale = _stale_reason(
            stamp, build.options_key, build.key_inputs, build.data_dir, build.local_dir
        )
        if stale is None:
            print(f"[prepare] {build.what} is up to date: {build.root}", flush=True)
            return PreparedData(build.root, stamp["manifest"])
        return _build(build, stale, aside=True)


def _planned_build(
    dataset: str,
    scale: str,
    data_dir,
    source: str | None,
    work_dir: Path,
    overrides: dict | None,
    caps: dict | None,
    local_dir,
) -> _DataBuild:
    """What `prepare` builds and where (its arguments), decided before anything is read: the
    scale's options with the overrides and caps, the builder, the source, the folder and the
    cache key.

    Raises
    ------
    ReproError
        unknown dataset, scale, source or kind; a cap no option takes; offline copies missing
        where no source stands in for them.
    """
    check_scale(scale)
    spec = load_config("prepare", dataset)
    caps = dict(caps or {})
    opts = _capped_options(spec, dataset, scale, overrides, caps)
    builder = builder_for(spec.kind)
    data_dir = data_root(data_dir)
    plan = plan_source(spec, opts, source, data_dir, local_dir)
    variant = f"{dataset}-{opts.setting}" if opts.get("setting") else dataset
    folder = f"{scale}-{plan.label}{caps_label('capped', caps)}"
    return _DataBuild(
        dataset=dataset,
        scale=scale,
        variant=variant,
        spec=spec,
        opts=opts,
        caps=caps,
        plan=plan,
        builder=builder,
        data_dir=data_dir,
        local_dir=resolve_local_dir(local_dir) if plan.source == "local" else None,
        root=Path(work_dir).resolve() / "data" / variant / folder,
        key_inputs=cache_key_inputs(spec, opts, plan.label),
    )


def _capped_options(
    spec: DictConfig, dataset: str, scale: str, overrides: dict | None, caps: dict
) -> DictConfig:
    """The scale's options with the caller's overrides, each cap lowering its option.

    Raises
    ------
    ReproError
        a cap names no option of the scale.
    """
    opts = OmegaConf.merge(spec.scales[scale], overrides or {})
    for name, cap in caps.items():
        if name not in opts:
            raise ReproError(
                f"configs/prepare/{dataset}.yaml: scale {scale} has no option {name!r} to cap "
                f"(options: {', '.join(opts)})"
            )
        opts[name] = cap if opts[name] is None else min(int(opts[name]), cap)
    return opts


def _build(build: _DataBuild, reason: str, aside: bool = False) -> PreparedData:
    """Build the folder and stamp it.

    A folder whose stamp is whole but stale (``aside``) is rebuilt aside and compared
    with it file for file (`_content_digests`), because trainings of other processes may be
    reading it: identical content (a code change that changes no output) keeps the folder
    in use, restamped; other content replaces it in one rename. Anything else is built in
    place.
    """
    if aside and build.root.is_dir():
        return _build_aside(build, reason)
    _build_into(build, build.root, reason)
    return PreparedData(build.root, json.loads(build.stamp_path.read_text())["manifest"])


def _build_aside(build: _DataBuild, reason: str) -> PreparedData:
    """Rebuild a stamped folder beside it, then keep it (same content) or swap the new one in."""
    root = build.root
    aside = root.with_name(f"{root.name}.rebuild")
    _build_into(build, aside, reason)
    new_stamp = json.loads((aside / "stamp.json").read_text())
    # the builders name files by absolute path (the references): the folder's, not the aside's
    text = json.dumps(new_stamp, ensure_ascii=False)
    new_stamp = json.loads(text.replace(str(aside), str(root)))
    old, new = _content_digests(root), _content_digests(aside)
    if old == new:
        # same files: the stamp is all that changes (its cache key and the inputs' hashes)
        write_json(build.stamp_path, new_stamp)
        shutil.rmtree(aside)
        print(
            f"[prepare] {build.what}: the rebuild ({reason}) produced the same {len(new)} files "
            f"as {root}, which is kept as it is (restamped)",
            flush=True,
        )
        return PreparedData(root, new_stamp["manifest"])
    changed = sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name))
    write_json(aside / "stamp.json", new_stamp)
    replaced = root.with_name(f"{root.name}.replaced")
    if replaced.exists():
        shutil.rmtree(replaced)
    root.rename(replaced)
    aside.rename(root)
    shutil.rmtree(replaced)
    print(
        f"[prepare] {build.what}: the rebuild ({reason}) changed {len(changed)} file(s) "
        f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}); it replaces {root}",
        flush=True,
    )
    return PreparedData(root, new_stamp["manifest"])


def _content_digests(root: Path) -> dict[str, str]:
    """SHA-256 of every file a prepared folder holds, by relative path; the stamp and the
    tools' logs (which name the folder) left out."""
    digests = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != "stamp.json" and path.suffix != ".log":
            digests[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def _build_into(build: _DataBuild, root: Path, reason: str) -> None:
    """Build the data from scratch into ``root`` (emptied first) and stamp it there."""
    plan = build.plan
    print(f"[prepare] building {build.what} in {root} ({reason})", flush=True)
    cli.at(f"preparing {build.what} in {root}")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    print(f"[prepare] {plan.summary}", flush=True)
    inputs = Inputs(
        build.data_dir,
        plan.source,
        build.spec,
        local_dir=build.local_dir,
        stand_in_train=build.opts.stand_in_train if plan.stand_in else None,
    )
    manifest = _manifest(build, root, inputs, build.builder.build(inputs, build.opts, root))
    write_json(
        root / "stamp.json",
        {
            "options_key": build.options_key,
            "data_dir": str(build.data_dir),
            "local_dir": build.local_dir and str(build.local_dir),
            "manifest": manifest,
            "key_inputs": build.key_inputs,
        },
    )


def _manifest(build: _DataBuild, root: Path, inputs: Inputs, evaluations: dict) -> dict:
    """What the built folder holds: the data's names and description, its evaluation sets,
    the inputs read and the checksums of what the build produced."""
    source = build.plan.label
    # a stand-in's sizes and origin are its plan's, not the scale's note (the offline data)
    note = build.plan.summary if build.plan.stand_in else build.opts.note
    return {
        "dataset": build.dataset,
        "variant": build.variant,
        "scale": build.scale,
        "source": source,
        "description": f"{build.spec.description} [{source}; {note}{_caps_note(build.caps)}]",
        "evaluations": evaluations,
        "inputs": inputs.files,
        # what the build produced, verified before every use (issue #26)
        checksums.STAMP_KEY: checksums.record(root / "bin"),
    }


def describe_sources(
    title: str,
    datasets: list[tuple[str, dict | None]],
    scale: str,
    *,
    data_dir=None,
    source: str | None = None,
    local_dir=None,
    caps: dict | None = None,
) -> str:
    """The line a run prints first: where each dataset's data comes from, and its sizes.

    Nothing is read (`sources.plan_source` on the composed options), so that a user
    sees which source a run takes, hub stand-in included, before anything is downloaded.

    Parameters
    ----------
    title : str
        what runs (a table or a sweep).
    datasets : list[tuple[str, dict | None]]
        the datasets it prepares, each with its option overrides.
    scale : str
        paper, small or smoke.
    data_dir, source, local_dir
        as for `prepare`.
    caps : dict | None
        a dry run's caps (added to the line).

    Returns
    -------
    str
        ``[data] <title> at scale <scale>: <dataset>: <source> ...; <dataset>: ...``.

    Raises
    ------
    ReproError
        as `sources.plan_source`: no LOCAL_DATA for local, or offline copies missing
        where the hub cannot stand in for them.
    """
    summaries = []
    for dataset, overrides in datasets:
        spec = load_config("prepare", dataset)
        opts = OmegaConf.merge(spec.scales[check_scale(scale)], overrides or {})
        summary = plan_source(spec, opts, source, data_root(data_dir), local_dir).summary
        if summary not in summaries:
            summaries.append(summary)
    capped = f" [dry run, capped: {caps}]" if caps else ""
    return f"[data] {title} at scale {scale}{capped}: {'; '.join(summaries)}"
