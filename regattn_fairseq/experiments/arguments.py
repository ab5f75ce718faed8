"""Command-line arguments checked before any work (issue #26): every value the entry points
take (scales, seeds, γ grids, mappings and their parameters, data sources, devices, threads)
is refused up front with one line and exit status 2, never after the data is built and never
with a traceback or the name of an internal function.

`OneLineParser` is the entry points' parser (argparse's own errors as one line); the type
functions below give argparse messages in the user's terms; `check_table` checks what needs
the table's spec (mappings, the γ grid, the mappings' parameters in the composed configs)."""

from __future__ import annotations

import argparse
import sys

from .common import ReproError, check_mappings, check_scale


class UsageError(ReproError):
    """A bad argument: printed as one line, exit status 2 (argparse's convention)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors on one line: ``<prog>: error: <message> (--help lists the
    options)``, exit status 2, without the usage block (the tables' usage is 40 lines)."""

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message} (--help lists the options)\n")
        sys.exit(2)


def seed_list(text: str) -> list[int]:
    """``"1 2 3"`` or ``"1,2,3"`` -> [1, 2, 3] (argparse type of --seeds).

    Raises
    ------
    argparse.ArgumentTypeError
        a value is not a whole number >= 0, or there is none.
    """
    values = text.replace(",", " ").split()
    if not values or not all(v.isdigit() for v in values):
        raise argparse.ArgumentTypeError(
            f"seeds are whole numbers >= 0, e.g. `1 2 3` or `1,2,3`; got {text!r}"
        )
    return [int(v) for v in values]


def gamma_grid(text: str) -> list[float]:
    """``"1,4"`` -> [1.0, 4.0] (argparse type of --gamma-grid).

    Raises
    ------
    argparse.ArgumentTypeError
        a value is not a number > 0, or there is none.
    """
    values = text.replace(",", " ").split()
    try:
        grid = [float(v) for v in values]
    except ValueError:
        grid = []
    if not grid or not all(g > 0 for g in grid):
        raise argparse.ArgumentTypeError(
            f"the γ grid is numbers > 0, e.g. `1,4` or `0.5 1 2`; got {text!r}"
        )
    return grid


def whole_number(minimum: int):
    """An argparse type: a whole number >= `minimum`, named as such in its error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def check_table(spec, experiments, args, gamma_mappings) -> None:
    """What a table run's arguments must satisfy before any data is read.

    Parameters
    ----------
    spec : DictConfig
        the table (configs/reproduce/<table>.yaml).
    experiments : list of DictConfig
        its experiments at the run's scale.
    args : argparse.Namespace
        `reproduce.parse_args`'s arguments.
    gamma_mappings : tuple of str
        the mappings GAMMA sets a temperature for (the others train at their default).

    Raises
    ------
    UsageError
        an unknown scale or mapping, GAMMA=auto without a grid, or a mapping parameter the
        mapping refuses (`check_mapping_options`).
    """
    try:
        check_scale(args.scale)
        mappings = list(args.mappings or spec.mappings)
        for experiment in experiments:
            check_mappings(mappings, experiment.get("mapping_group", "attention"))
    except ReproError as error:
        raise UsageError(str(error)) from None
    if args.gamma == "auto" and not (args.gamma_grid or spec.get("gamma_grid")):
        raise UsageError(
            f"--gamma auto: configs/reproduce/{spec.table}.yaml has no gamma_grid; pass "
            "--gamma-grid (GAMMA_GRID=1,4)"
        )
    # one γ of the grid stands for all: each is > 0 (`gamma_grid`), the other options equal
    grid = args.gamma_grid or spec.get("gamma_grid") or [None]
    gamma = grid[0] if args.gamma == "auto" else args.gamma
    for experiment in experiments:
        for mapping in mappings:
            check_mapping_options(
                experiment,
                args.scale,
                mapping,
                args.override,
                gamma if mapping in gamma_mappings else None,
            )


def check_mapping_options(experiment, scale: str, mapping: str, overrides, gamma) -> None:
    """Compose one job's training config (no data read) and let the plugin validate its
    attention options, as the model would when built after the data is prepared.

    Parameters
    ----------
    experiment : DictConfig
        the experiment (its train_config, scale group and mapping group).
    scale : str
        the scale.
    mapping : str
        the mapping (an option of the experiment's mapping group).
    overrides : list of str
        the run's extra Hydra overrides (--override, the devices, a dry run's).
    gamma : float or str or None
        the γ a job of this run trains at (None: the config's).

    Raises
    ------
    UsageError
        an override that does not compose, or an attention option the mapping refuses.
    """
    from . import runs
    from .paths import USER_DIR

    group = experiment.get("mapping_group", "attention")
    extra = [f"model.attention_gamma={float(gamma)}"] if gamma is not None else []
    try:
        cfg = runs.compose_config(
            experiment.train_config,
            [
                f"scale/{experiment.scale_group}={scale}",
                f"common.user_dir={USER_DIR}",
                f"{group}={mapping}",
                *overrides,
                *extra,
            ],
        )
    except Exception as error:  # Hydra's own errors: an unknown key, a malformed override
        raise UsageError(
            f"{experiment.name} {mapping}: the overrides do not compose: {error}"
        ) from None
    model = cfg.model
    if "attention" not in model:  # a model without attention options (the NER tagger)
        return
    from regattn_fairseq.modules.attention_options import (
        attention_spec_from_cfg,
        continuous_spec_from_cfg,
    )

    try:
        # learned α exists in the Transformer only (`models.regattn_transformer`)
        learned = model._name.startswith("regattn_transformer")
        attention_spec_from_cfg(model, model._name, allow_learned_alpha=learned)
        if "attention_domain" in model:
            continuous_spec_from_cfg(model)
    except ValueError as error:
        raise UsageError(f"{experiment.name} {mapping}: {error}") from None
