"""Command-line arguments checked before any work (issue #26): what a table run's arguments
must satisfy against the table's spec (mappings, the γ grid, the mappings' parameters in the
composed configs), refused up front with one line and exit status 2, never after the data is
built. The argparse types and the one-line parser are `core.cli`'s."""

from __future__ import annotations

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.cli import UsageError
from regattn_fairseq.experiments.core.config import (
    check_experiment_mappings,
    check_mappings,
    check_scale,
    experiment_mappings,
)
from regattn_fairseq.experiments.core.paths import USER_DIR
from regattn_fairseq.experiments.pipelines import pretrained
from regattn_fairseq.experiments.train.train import compose_config
from regattn_fairseq.modules.attention_options import (
    attention_spec_from_cfg,
    continuous_spec_from_cfg,
)


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
        an unknown scale or mapping, an experiment's own mappings outside the table's,
        GAMMA=auto without a grid, or a mapping parameter the
        mapping refuses (`check_mapping_options`).
    """
    try:
        check_scale(args.scale)
        mappings = list(args.mappings or spec.mappings)
        check_experiment_mappings(spec)
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
        for mapping in experiment_mappings(experiment, mappings):
            if pretrained.is_pretrained(experiment):
                tuned = mapping in pretrained.GAMMA_MAPPINGS and args.gamma
                pretrained.check_mapping(experiment, args.scale, mapping, gamma if tuned else None)
                continue
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
    group = experiment.get("mapping_group", "attention")
    extra = [f"model.attention_gamma={float(gamma)}"] if gamma is not None else []
    try:
        cfg = compose_config(
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
    try:
        # learned α exists in the Transformer only (`models.regattn_transformer`)
        learned = model._name.startswith("regattn_transformer")
        attention_spec_from_cfg(model, model._name, allow_learned_alpha=learned)
        if "attention_domain" in model:
            continuous_spec_from_cfg(model)
    except ValueError as error:
        raise UsageError(f"{experiment.name} {mapping}: {error}") from None
