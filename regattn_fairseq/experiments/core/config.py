"""The suite's orchestration configs (configs/<group>/*.yaml), the scales, the mappings and
the offline data root. Paths live in `paths`, run provenance in `provenance`."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.paths import CONFIG_DIR, DATA_DIR_ENV, DEFAULT_DATA_DIR

# The attention mappings are the options of the `attention` config group.
MAPPINGS = tuple(
    sorted(p.stem for p in (CONFIG_DIR / "attention").glob("*.yaml") if p.stem != "base")
)
SCALES = ("paper", "small", "smoke")


def data_root(data_dir: str | os.PathLike | None) -> Path:
    """The offline data root, which may not exist (a fresh machine): explicit argument, else
    $REGATTN_DATA_DIR, else ../shared/data."""
    chosen = data_dir or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    """The offline data root (`data_root`), which must exist."""
    path = data_root(data_dir)
    if not path.is_dir():
        raise ReproError(
            f"DATA_DIR {path} does not exist; point DATA_DIR (make) / --data-dir / "
            f"${DATA_DIR_ENV} at the offline data folder (default {DEFAULT_DATA_DIR})"
        )
    return path


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise ReproError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    return scale


def group_options(group: str) -> tuple[str, ...]:
    """The options of a config group (configs/<group>/*.yaml, `base` excluded)."""
    return tuple(sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml") if p.stem != "base"))


def check_mappings(mappings, group: str = "attention") -> list[str]:
    """The table's "mappings": options of the `attention` group, or of the experiment's
    `mapping_group` (the NER table's `dp` regularisers)."""
    known = MAPPINGS if group == "attention" else group_options(group)
    unknown = [m for m in mappings if m not in known]
    if unknown:
        what = "attention mapping(s)" if group == "attention" else f"{group} option(s)"
        raise ReproError(f"unknown {what} {unknown}; known: {', '.join(known)}")
    return list(mappings)


def experiment_mappings(experiment, mappings) -> list[str]:
    """The mappings of `mappings` (the table's, or a run's `--mappings`) that `experiment`
    trains, in their order: all of them, or those its own `mappings:` lists (an experiment
    that exists for a few mappings: inflection's entmax-output cell)."""
    own = experiment.get("mappings")
    return list(mappings) if own is None else [m for m in mappings if m in own]


def check_experiment_mappings(spec) -> None:
    """An experiment's own `mappings:` must be mappings of its table.

    Raises
    ------
    ReproError
        naming the experiment and the mappings its table does not have.
    """
    for experiment in spec.experiments:
        stray = [m for m in experiment.get("mappings") or [] if m not in spec.mappings]
        if stray:
            raise ReproError(
                f"configs/reproduce/{spec.table}.yaml: experiment {experiment.name}'s mappings "
                f"{stray} are not among the table's mappings {list(spec.mappings)}"
            )


def load_config(*parts: str) -> DictConfig:
    """Load configs/<parts...>.yaml (orchestration specs, not fairseq training configs)."""
    path = CONFIG_DIR.joinpath(*parts).with_suffix(".yaml")
    if not path.is_file():
        available = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ReproError(f"no config {path.relative_to(REPO_ROOT)}; available: {available}")
    return OmegaConf.load(path)
