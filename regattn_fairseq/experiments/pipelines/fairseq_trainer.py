"""The fairseq tables' experiments (no ``trainer:`` in their config): each mapping trained by
fairseq-hydra-train at its γ (chosen on validation, fixed, or its config's), each seed a job of
`table_jobs` through the one lifecycle (`jobs.run_job`). The pretrained-encoder table's
counterpart is `pretrained`; `trainers` holds both.
"""

from __future__ import annotations

from pathlib import Path

from regattn_fairseq.experiments.core.cli import UsageError
from regattn_fairseq.experiments.core.paths import USER_DIR
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.pipelines.gamma_select import (
    GAMMA_MAPPINGS,
    choose_gamma,
    planned_gamma,
    train_free_grid_runs,
)
from regattn_fairseq.experiments.pipelines.plan import ExperimentTrainer, PlannedJob, TableRun
from regattn_fairseq.experiments.pipelines.table_jobs import (
    MappingSetup,
    run_table_job,
    table_job,
)
from regattn_fairseq.experiments.train.train import compose_config
from regattn_fairseq.modules.attention_options import (
    attention_spec_from_cfg,
    continuous_spec_from_cfg,
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


def _check_mapping(experiment, args, mapping: str, gamma) -> None:
    check_mapping_options(experiment, args.scale, mapping, args.override, gamma)


def plan_jobs(table: TableRun, experiment, data: PreparedData) -> tuple[list, float]:
    """Each job of the experiment, done (its rows exist) or to do with its estimated wall
    time, without training anything: a mapping whose γ has no recorded choice
    (`gamma_select.planned_gamma`) has its seeds to do after its grid, whose estimate is
    returned apart.

    Returns
    -------
    tuple
        (list of `plan.PlannedJob`, the estimated seconds of the γ grids left).
    """
    args, rows = table.args, table.rows()
    jobs, grids = [], 0.0
    for mapping in table.mappings_of(experiment):
        gamma, note, grid = planned_gamma(table, experiment, data, mapping, rows)
        grids += grid
        estimate, source = table.estimate(rows, experiment, mapping)
        note = "; ".join(part for part in (note, source) if part)
        setup = MappingSetup(mapping, gamma, None)
        for seed in table.seeds:
            done = False
            tuned_without_choice = (
                gamma is None and args.gamma == "auto" and mapping in GAMMA_MAPPINGS
            )
            if not tuned_without_choice:
                job = table_job(table, experiment, data, setup, seed)
                done = bool(job.finished(rows)) and not (args.rescore or args.retrain)
            jobs.append(
                PlannedJob(experiment.name, mapping, seed, done, None if done else estimate, note)
            )
    return jobs, grids


def mapping_setup(table: TableRun, experiment, data: PreparedData, mapping: str) -> MappingSetup:
    """How `mapping` is trained: at the γ chosen on validation (--gamma auto), at a fixed γ
    (--gamma <number>), or at its config's (no --gamma, or a mapping with no temperature)."""
    args = table.args
    selection, gamma = None, None
    if args.gamma and mapping not in GAMMA_MAPPINGS:
        print(f"[gamma] {mapping} has no temperature γ: trained at its default")
    elif args.gamma == "auto":
        selection = choose_gamma(table, experiment, data, mapping, table.rows())
        gamma = selection["chosen"]
    elif args.gamma:
        gamma = float(args.gamma)
    return MappingSetup(mapping, gamma, selection)


def choose_gammas(table: TableRun, experiment, data: PreparedData) -> None:
    """--gamma-select-only: each mapping's γ chosen (its grid trained where no choice is
    recorded), no seed trained beyond the grid's."""
    for mapping in table.mappings_of(experiment):
        mapping_setup(table, experiment, data, mapping)


def run_experiment(table: TableRun, experiment, data: PreparedData, progress=None) -> list[Path]:
    """Train and score every mapping and seed of an experiment whose rows are missing;
    `progress` (`plan.Progress`) prints a line as each job to do starts. Shared with other
    workers (``--workers``), a first pass trains only the jobs no other worker holds
    (`_run_free_jobs`); this pass then waits for the others' and finds them finished.

    Returns
    -------
    list of Path
        the attention exports of the first seed and evaluation set, one per mapping (the
        figure's panels).
    """
    starting = progress.starting if progress is not None else None
    # the first pass's γ choices are final: not made again (each would restart fairseq on
    # every finished grid run)
    setups = _run_free_jobs(table, experiment, data, starting) if table.args.workers > 1 else {}
    exports = []
    for mapping in table.mappings_of(experiment):
        setup = setups.get(mapping) or mapping_setup(table, experiment, data, mapping)
        for seed in table.seeds:
            export = run_table_job(table, experiment, data, setup, seed, started=starting)
            if export is not None:
                exports.append(export)
    return exports


def _run_free_jobs(
    table: TableRun, experiment, data: PreparedData, starting
) -> dict[str, MappingSetup]:
    """The first pass of a worker sharing the table: each mapping's γ grid runs that no other
    worker holds (`gamma_select.train_free_grid_runs`), then, where its γ can be chosen, its
    seeds that no other worker holds; held ones are left to their holders.

    Returns
    -------
    dict
        mapping -> its `MappingSetup`, for the mappings whose γ was settled in this pass.
    """
    setups = {}
    for mapping in table.mappings_of(experiment):
        tuned = table.args.gamma == "auto" and mapping in GAMMA_MAPPINGS
        if tuned and not train_free_grid_runs(table, experiment, data, mapping, table.rows()):
            continue  # part of its grid is another worker's: its choice waits for the next pass
        setups[mapping] = setup = mapping_setup(table, experiment, data, mapping)
        for seed in table.seeds:
            run_table_job(table, experiment, data, setup, seed, share=True, started=starting)
    return setups


TRAINER = ExperimentTrainer(
    name="fairseq",
    gamma_mappings=tuple(GAMMA_MAPPINGS),
    check_mapping=_check_mapping,
    plan_jobs=plan_jobs,
    choose_gammas=choose_gammas,
    run=run_experiment,
)
