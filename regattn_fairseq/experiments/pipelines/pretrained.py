"""The pretrained-encoder table's jobs: a pinned pretrained Transformer (all-MiniLM-L6-v2) with
its attention swapped to each mapping, fine-tuned on SNLI (`train.hf_finetune`) and scored
(`score.hf_classify`), through `reproduce`'s table run: the same prepared data, baselines,
plan, progress, run folders, locks, keys, rows and report as the fairseq tables.

An experiment of a table config is one of these when it says ``trainer: huggingface``; it then
names its ``pretrained`` model (a `PinnedModel` of `regattn.integrations.pretrained_models`),
its fine-tuning settings per scale (``finetune:``, `FineTuneSettings`' fields) and the short
runs that choose γ (``gamma_select:``, the fields they change).

γ (GAMMA=auto): each mapping that takes a temperature is fine-tuned once per γ of the table's
grid on the selection seeds, in short runs (``gamma_select``), and the γ of the lowest
validation loss is kept; a choice at the grid's edge extends it by the table's
``gamma_grid_extend`` rule, as the fairseq tables do (`gamma_edge`).
"""

from __future__ import annotations

import functools
import json
import shutil
import uuid
from pathlib import Path

from omegaconf import OmegaConf

from regattn import mappings
from regattn.integrations import pretrained_models
from regattn_fairseq.experiments.core.cli import UsageError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.provenance import provenance
from regattn_fairseq.experiments.core.result_row import ResultRow, attention_stats, gamma_selection
from regattn_fairseq.experiments.core.run_lock import run_lock
from regattn_fairseq.experiments.data import checksums
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines import short_runs
from regattn_fairseq.experiments.pipelines.gamma_edge import search_grid
from regattn_fairseq.experiments.pipelines.jobs import run_job
from regattn_fairseq.experiments.pipelines.plan import (
    ExperimentTrainer,
    PlannedJob,
    grid_seconds,
    stand_ins,
)
from regattn_fairseq.experiments.pipelines.table_jobs import table_outputs
from regattn_fairseq.experiments.rows.build import Scored, job_rows
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import job_key
from regattn_fairseq.experiments.score.hf_classify import classify
from regattn_fairseq.experiments.score.significance import write_items
from regattn_fairseq.experiments.train.hf_finetune import (
    ATTENTION_OPTIONS,
    FineTuneSettings,
    fine_tune,
    load_finetuned,
    read_pairs,
)
from regattn_fairseq.experiments.train.train import record_training_start


def _say(line: str) -> None:
    print(line, flush=True)


# the mappings a γ applies to: every one with a temperature (the attention-free control and a
# learned α's entmax are trained at their configs' values) but softmax: the pretrained weights
# were trained under softmax at γ = 1, the scores' own scale, so softmax is the model as it
# was pretrained, the baseline the other mappings are compared with
GAMMA_MAPPINGS = tuple(m for m in mappings.gamma_configs() if m != mappings.REFERENCE_MAPPING)
CRITERION = "validation loss"
STARTED_FILE = "started.json"


def pinned_model(experiment) -> pretrained_models.PinnedModel:
    """The experiment's pretrained model (``pretrained:``, a model of `pretrained_models`).

    Raises
    ------
    UsageError
        for a name no pinned model has.
    """
    models = {m.name: m for m in (pretrained_models.MINILM_L6_V2,)}
    name = experiment.get("pretrained")
    if name not in models:
        raise UsageError(
            f"{experiment.name}: pretrained model {name!r} is not pinned; pinned: "
            f"{', '.join(models)} (regattn.integrations.pretrained_models)"
        )
    return models[name]


def attention_config(mapping: str, gamma: float | None = None) -> dict:
    """configs/attention/<mapping>.yaml's options that are set, with γ when given."""
    config = OmegaConf.to_container(load_config("attention", mapping))
    options = {
        key: config[key] for key in ("attention", *ATTENTION_OPTIONS) if config.get(key) is not None
    }
    if gamma is not None:
        options["attention_gamma"] = float(gamma)
    return options


def settings_for(experiment, scale: str, mapping: str, seed: int, gamma=None, select=False):
    """A job's `FineTuneSettings`: the experiment's ``finetune.<scale>``, with the short
    selection runs' changes (``gamma_select.<scale>``) when `select`. Its ``alpha_lr`` goes
    to the mappings with a learned α alone: the others have no α to learn."""
    options = dict(OmegaConf.to_container(experiment.finetune[scale]))
    if select:
        options.update(OmegaConf.to_container(experiment.gamma_select[scale]))
    attention = attention_config(mapping, gamma)
    if attention.get("attention_alpha") != mappings.LEARNED:
        options.pop("alpha_lr", None)
    return FineTuneSettings(
        model=pinned_model(experiment).record(),
        attention=attention,
        seed=seed,
        **options,
    )


def check_mapping(experiment, scale: str, mapping: str, gamma) -> None:
    """Build the mapping's attention as the model would (`AttentionMapping`), before any data
    is read.

    Raises
    ------
    UsageError
        an option the mapping refuses, or settings that are no `FineTuneSettings`.
    """
    from regattn.integrations.transformers import AttentionMapping

    try:
        settings = settings_for(experiment, scale, mapping, 1, gamma)
        params = settings.params
        heads = 1 if params.get("alpha") == "learned" else None
        AttentionMapping(settings.backend, num_heads=heads, **params)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{experiment.name} {mapping}: {error}") from None


def _check_run_mapping(experiment, args, mapping: str, gamma) -> None:
    check_mapping(experiment, args.scale, mapping, gamma)


def _job(table, experiment, data: PreparedData, mapping, seed, gamma, selection=None, select=False):
    """One fine-tuning job (a short γ-selection run with `select`, in a folder of its own)."""
    folder = table.run_dir(experiment, data, mapping, seed, gamma)
    label = f"{experiment.name} {mapping} seed {seed}"
    if select:
        folder = folder.with_name(f"{folder.name}-select")
        label = f"{experiment.name} {mapping} γ={gamma} seed {seed}"
    settings = settings_for(experiment, table.scale, mapping, seed, gamma, select)
    dry_run = table.args.dry_run.record()
    key = job_key(
        experiment.name,
        table.scale,
        data.manifest["source"],
        mapping,
        settings.config(),
        seed,
        dry_run,
    )
    return Job(
        experiment=experiment,
        scale=table.scale,
        data=data,
        mapping=mapping,
        seed=seed,
        run_dir=folder,
        key=key,
        evaluations=tuple(experiment_test_sets(experiment)),
        label=label,
        gamma=gamma,
        gamma_selection=selection,
        dry_run=dry_run,
    )


def _settings(job: Job, select: bool = False) -> FineTuneSettings:
    """The job's fine-tuning settings (`settings_for`)."""
    return settings_for(job.experiment, job.scale, job.mapping, job.seed, job.gamma, select)


def _grid(table) -> tuple[list[float], int]:
    args, spec = table.args, table.spec
    return list(args.gamma_grid or spec.gamma_grid), int(spec.get("gamma_grid_extend") or 0)


def choose_gamma(table, experiment, data: PreparedData, mapping: str) -> dict:
    """GAMMA=auto: a short fine-tuning run per γ of the grid (and beyond its edge, by the
    table's rule) on the selection seeds; the γ of the lowest mean validation loss.

    Returns
    -------
    dict
        the rows' ``gamma_selection``: grid, extend, extended, criterion, seeds, validation
        ({str(γ): mean validation loss}), chosen, and short_runs ({str(γ): each seed's kept
        short run, `short_runs.KeptShortRun.citation`}; absent where none is kept: a dry run).
    """
    grid, extend = _grid(table)
    seeds = table.selection_seeds
    model_path = pretrained_models.model_dir(pinned_model(experiment))
    train, valid = read_pairs(data, "train"), read_pairs(data, "valid")
    cited = {}

    def validation_loss(gamma: float) -> float:
        losses = []
        for seed in seeds:
            job = _job(table, experiment, data, mapping, seed, gamma, select=True)
            loss, kept = _short_run(table, job, model_path, train, valid)
            losses.append(loss)
            if kept is not None:
                cited.setdefault(str(gamma), []).append(kept.citation())
        return round(sum(losses) / len(losses), 4)

    def beyond_the_edge(tried, beyond):
        _say(f"[gamma] {mapping}: the grid's edge won; γ = {beyond} is tried beyond it")

    validation, extended, chosen = search_grid(grid, extend, validation_loss, beyond_the_edge)
    _say(f"[gamma] {mapping}: validation loss {validation} -> γ = {chosen}")
    selection = {
        "grid": grid,
        "extend": extend,
        "extended": extended,
        "criterion": _criterion(experiment, table.scale),
        "seeds": seeds,
        "validation": validation,
        "chosen": chosen,
    }
    return {**selection, "short_runs": cited} if cited else selection


def _short_run(table, job: Job, model_path: Path, train, valid, share: bool = False):
    """A short run's best validation loss, and its kept record (`short_runs.KeptShortRun`): the
    kept one, else trained now and kept as it ends, under the run's lock (a process that waited
    for the lock reads what its holder kept). A dry run's short runs are not kept (their
    numbers mean nothing): its record is None. Sharing the table's jobs (``share``), a short
    run that another process holds is left to it.

    Returns
    -------
    tuple or None
        (best validation loss, `short_runs.KeptShortRun` or None); None when it was left to
        another process.
    """
    settings = _settings(job, select=True)
    keeps = not table.args.dry_run.active and not table.args.retrain
    kept = _kept_short_run(table, job, settings) if keeps else None
    if kept is not None:
        return kept.best_valid_loss, kept
    # trained and kept under the run's lock: a process that waited for it finds it kept
    with run_lock(job.run_dir, job.label, wait=not share) as waited:
        if waited is None:
            return None
        kept = _kept_short_run(table, job, settings) if keeps and waited else None
        if kept is not None:
            return kept.best_valid_loss, kept
        _started(job.run_dir)
        run = fine_tune(settings, model_path, train, valid, job.run_dir, _say)
        if not keeps:
            return run.curve["best_valid_loss"], None
        folder = short_runs.keep(table.results_dir, table.spec.table, job, settings)
    _say(f"[gamma] {job.label}: kept in {folder}")
    # read back from the folder: the number the choice uses is the one committed
    kept = short_runs.recorded(table.results_dir, table.spec.table, job, settings)
    return kept.best_valid_loss, kept


def _kept_short_run(table, job: Job, settings: FineTuneSettings):
    """The short run's kept record (`short_runs.recorded`), said when there is one."""
    kept = short_runs.recorded(table.results_dir, table.spec.table, job, settings)
    if kept is not None:
        loss = kept.best_valid_loss
        _say(f"[gamma] {job.label}: validation loss {loss}, kept from an earlier short run")
    return kept


def _train_free_short_runs(table, experiment, data, mapping: str, model_path: Path, splits) -> bool:
    """Sharing the table's jobs (``--workers``): train the short runs of `mapping`'s γ grid
    that no other process holds, without choosing (`choose_gamma` chooses once all are kept;
    the values beyond the grid's edge depend on the choice and are trained then).

    Returns
    -------
    bool
        True when none was left to another process: the choice can be made now.
    """
    grid, _ = _grid(table)
    free = True
    for gamma in grid:
        for seed in table.selection_seeds:
            job = _job(table, experiment, data, mapping, seed, gamma, select=True)
            ran = _short_run(table, job, model_path, splits["train"], splits["valid"], share=True)
            free &= ran is not None
    return free


def _criterion(experiment, scale: str) -> str:
    """How γ is chosen, with what the short runs change, as the rows record it."""
    select = experiment.gamma_select[scale]
    return f"{CRITERION} of short runs ({', '.join(f'{k}={v}' for k, v in select.items())})"


def _recorded_choice(table, experiment, mapping: str) -> dict | None:
    """The γ choice recorded in the table's rows for this mapping, grid, selection seeds and
    short runs (`_criterion`), if any: a choice made on other short runs is made again."""
    grid, extend = _grid(table)
    for row in reversed(table.rows()):
        selection = gamma_selection(row) or {}
        if (
            row["experiment"] == experiment.name
            and row["mapping"] == mapping
            and row["scale"] == table.scale
            and selection.get("grid") == grid
            and selection.get("extend") == extend
            and selection.get("seeds") == table.selection_seeds
            and selection.get("criterion") == _criterion(experiment, table.scale)
        ):
            return selection
    return None


def gamma_of(table, experiment, data, mapping: str, choose: bool):
    """(γ, selection) a mapping's seeds train at: the recorded choice, a new one (`choose`),
    or (None, None) while none is made."""
    args = table.args
    if mapping not in GAMMA_MAPPINGS or not args.gamma:
        return None, None
    if args.gamma != "auto":
        return float(args.gamma), None
    selection = None if args.retrain else _recorded_choice(table, experiment, mapping)
    if selection is None and choose:
        selection = choose_gamma(table, experiment, data, mapping)
    return (selection["chosen"], selection) if selection else (None, None)


def _choice_pending(table, mapping: str, gamma) -> bool:
    """Whether `mapping`'s γ is to be chosen on short runs (GAMMA=auto, no choice recorded)."""
    return gamma is None and mapping in GAMMA_MAPPINGS and table.args.gamma == "auto"


def choose_gammas(table, experiment, data: PreparedData) -> None:
    """--gamma-select-only: each mapping's γ chosen on its short runs where no choice is
    recorded (`gamma_of`)."""
    for mapping in table.mappings_of(experiment):
        gamma_of(table, experiment, data, mapping, choose=True)


@functools.cache
def _train_size_of(root: Path) -> int:
    return len((root / "raw" / "train.premise").read_text(encoding="utf-8").splitlines())


def _train_size(data: PreparedData) -> int:
    return _train_size_of(data.root)


def _kept_short_runs(table, experiment, data: PreparedData, mapping: str, grid) -> int:
    """How many of the grid's short runs are kept (`short_runs`): none to train again."""
    if table.args.dry_run.active or table.args.retrain:
        return 0
    return sum(
        short_runs.recorded(table.results_dir, table.spec.table, job, _settings(job, True))
        is not None
        for gamma in grid
        for seed in table.selection_seeds
        for job in [_job(table, experiment, data, mapping, seed, gamma, select=True)]
    )


def plan_jobs(table, experiment, data: PreparedData) -> tuple[list, float]:
    """Each job of the experiment, done or to do (`fairseq_trainer.plan_jobs`' counterpart), and
    the estimated seconds of the γ grids left."""
    rows = table.rows()
    jobs, grids = [], 0.0
    for mapping in table.mappings_of(experiment):
        gamma, _ = gamma_of(table, experiment, data, mapping, choose=False)
        note = ""
        if _choice_pending(table, mapping, gamma):
            grid, _ = _grid(table)
            kept = _kept_short_runs(table, experiment, data, mapping, grid)
            note = f"γ chosen first on {len(grid)} short runs"
            if kept:
                note += f", {kept} of them kept from earlier"
            # a short run: its epochs on its share of the training pairs
            select = experiment.gamma_select[table.scale]
            pairs = _train_size(data)
            share = min(pairs, select.get("train_pairs") or pairs) / pairs
            epochs = select.get("max_epoch", 1)
            left = len(grid) * len(table.selection_seeds) - kept
            kin = stand_ins(table.spec, experiment)
            grid_s = grid_seconds(rows, table.scale, experiment.name, mapping, left, epochs, kin)
            grids += share * (grid_s or 0)
        estimate, _ = table.estimate(rows, experiment, mapping)  # its own trainer: no kin
        for seed in table.seeds:
            done = False
            if gamma is not None or mapping not in GAMMA_MAPPINGS or not table.args.gamma:
                job = _job(table, experiment, data, mapping, seed, gamma)
                done = bool(job.finished(rows)) and not (table.args.rescore or table.args.retrain)
            jobs.append(
                PlannedJob(experiment.name, mapping, seed, done, None if done else estimate, note)
            )
    return jobs, grids


def run_experiment(table, experiment, data: PreparedData, progress=None) -> list[Path]:
    """Fine-tune and score every mapping and seed of the experiment whose rows are missing
    (`jobs.run_job`).

    Returns
    -------
    list of Path
        the attention exports of the first seed, one per mapping (the figure's panels).
    """
    model_path = pretrained_models.model_dir(pinned_model(experiment))
    splits = {split: read_pairs(data, split) for split in ("train", "valid")}
    outputs = table_outputs(table)

    def train_step(job: Job):
        if table.args.retrain and job.run_dir.exists():
            shutil.rmtree(job.run_dir)
        job.run_dir.mkdir(parents=True, exist_ok=True)
        started = _started(job.run_dir)
        run = fine_tune(
            _settings(job), model_path, splits["train"], splits["valid"], job.run_dir, _say
        )
        return run, started

    def score_step(job: Job, trained):
        run, started = trained
        return finetuned_rows(job, table.spec.table, table.results_dir, run, started)

    starting = progress.starting if progress is not None else None
    if table.args.workers > 1:
        # the first pass of a worker sharing the table: the short runs of a γ still to choose
        # and then the seeds that no other worker holds; a mapping whose short runs are partly
        # another worker's is chosen and trained in the next pass
        for mapping in table.mappings_of(experiment):
            gamma, selection = gamma_of(table, experiment, data, mapping, choose=False)
            if _choice_pending(table, mapping, gamma):
                if not _train_free_short_runs(table, experiment, data, mapping, model_path, splits):
                    continue
                gamma, selection = gamma_of(table, experiment, data, mapping, choose=True)
            for seed in table.seeds:
                job = _job(table, experiment, data, mapping, seed, gamma, selection)
                run_job(job, outputs, train_step, score_step, share=True, started=starting)
    exports = []
    for mapping in table.mappings_of(experiment):
        gamma, selection = gamma_of(table, experiment, data, mapping, choose=True)
        for seed in table.seeds:
            job = _job(table, experiment, data, mapping, seed, gamma, selection)
            rows = run_job(job, outputs, train_step, score_step, started=starting)
            if seed == table.seeds[0] and attention_stats(rows[0]).get("export"):
                exports.append(Path(attention_stats(rows[0])["export"]))
    return exports


def _started(folder: Path) -> dict:
    """The provenance of the code that started the run in `folder` (`record_training_start`,
    kept across resumes); empty for a run started before it was recorded."""
    record_training_start(folder)
    path = folder / STARTED_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def finetuned_rows(job: Job, table: str, results_dir: Path, run, started: dict) -> list[ResultRow]:
    """Score a fine-tuned model on every evaluation set of the experiment (`hf_classify`), and
    assemble the job's rows (`rows.build.job_rows`)."""
    model, tokenizer = load_finetuned(run.best_dir)
    context = provenance()
    fingerprint = checksums.verify(job.data)
    run_id = uuid.uuid4().hex[:12]
    settings = run.settings
    scored = []
    for name in job.evaluations:
        subset = job.data.evaluation(name)["subset"]
        result = classify(
            model,
            tokenizer,
            read_pairs(job.data, subset),
            settings,
            run.best_dir.parent / "decode" / f"{name}.attention.jsonl.gz",
            {"name": job.mapping, "params": settings.params, "backend": settings.backend},
        )
        decode = {"wall_s": result["decode_wall_s"], "batch_size": 2 * settings.batch_size}
        items = write_items(results_dir, run_id, name, result["items"])
        scored.append(Scored(name, result["metrics"], None, items, decode, result["attention"]))
    train = {
        "wall_s": run.wall_s,
        "pairs_per_s": run.pairs_per_s,
        "tokens_per_s": run.tokens_per_s,
        "epochs": run.epochs,
        "learning_curve": run.curve,
        "resumes": run.resumes,
        "checkpoint": str(run.best_dir),
        "started": started,
        "config": settings.config(),
        "pretrained": pinned_model(job.experiment).record(),
        "precision": "bf16 autocast" if settings.bf16 else "float32",
        "optimizer": run.optimizer,
    }
    rows = job_rows(job, table, run_id, train, scored, fingerprint, context)
    checksums.verify(job.data)
    return rows


TRAINER = ExperimentTrainer(
    name="huggingface",
    gamma_mappings=GAMMA_MAPPINGS,
    check_mapping=_check_run_mapping,
    plan_jobs=plan_jobs,
    choose_gammas=choose_gammas,
    run=run_experiment,
)
