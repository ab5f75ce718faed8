"""A table run's recipe, plan and progress: what `make reproduce-<table>` runs with no variables,
which of its jobs are done and which are left, how long the rest should take, and where it is.

- **Recipe.** A table's config holds, per scale, the settings its committed cells were made
  with (``recipe:``: γ mode, selection seeds and epochs, threads). `apply_recipe` fills every
  option the command line left unset from it, so that a plain `make reproduce-table2` on a
  fresh clone runs exactly the recipe of the committed cells: their jobs have the same keys,
  are found finished, and only what is missing is trained.
- **Plan.** Before any training, `print_plan` lists each (experiment, mapping) with its seeds
  done and to do, and the CPU-hours the jobs left should take, estimated from the committed
  rows' wall times (`estimate_seconds`).
- **Progress.** `Progress` prints one line per job: k of N, elapsed, ETA.
- **Table run.** `TableRun` is what one invocation's steps share: the table, the checked
  arguments, the seeds and mappings, the folders; `run_dir` is where each job's run lives.
- **Trainer.** `ExperimentTrainer` is how one kind of experiment (its config's ``trainer:``) is
  checked, planned, tuned and run; `pipelines.trainers` holds one per kind.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import experiment_mappings, load_config
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.core.result_row import ResultRow, decode_record, train_record
from regattn_fairseq.experiments.report.convergence import converged
from regattn_fairseq.experiments.rows.keys import is_baseline, split_current
from regattn_fairseq.experiments.rows.store import load_rows

RECIPE_KEYS = ("gamma", "gamma_seeds", "gamma_select_epochs", "threads")
# a γ grid's run costs its epochs at the seconds per epoch of the mapping's converged runs
GRID_WORDS = "γ grid first"


def apply_recipe(args, spec) -> dict:
    """Fill the options the command line left unset (None) from the table's recipe for the
    scale; options given on the command line win. γ's options apply only with ``--gamma auto``.

    Parameters
    ----------
    args : argparse.Namespace
        `reproduce.parse_args`'s arguments, before their γ options are checked together.
    spec : DictConfig
        the table's config.

    Returns
    -------
    dict
        the settings taken from the recipe (empty without one).

    Raises
    ------
    ReproError
        a recipe key that is not one of RECIPE_KEYS.
    """
    recipe = dict((spec.get("recipe") or {}).get(args.scale) or {})
    unknown = sorted(set(recipe) - set(RECIPE_KEYS))
    if unknown:
        raise ReproError(
            f"configs/reproduce/{spec.table}.yaml: recipe.{args.scale} has unknown "
            f"{', '.join(unknown)}; known: {', '.join(RECIPE_KEYS)}"
        )
    taken = {}
    for key in RECIPE_KEYS:
        if key not in recipe or getattr(args, key) is not None:
            continue
        if key.startswith("gamma_") and args.gamma != "auto":
            continue
        value = recipe[key]
        setattr(args, key, str(value) if key == "gamma" else value)
        taken[key] = value
    return taken


@dataclass(frozen=True)
class PlannedJob:
    """One training job of a table run: done (its rows exist), or to do with its estimate."""

    experiment: str
    mapping: str
    seed: int
    done: bool
    seconds: float | None = None  # the estimate of a job to do (None: no row to estimate from)
    note: str = ""


# where an estimate is taken from, most specific first: (same experiment?, same mapping?); the
# other experiments are only the stand-ins (`stand_ins`)
ESTIMATE_SCOPES = ((True, True), (True, False), (False, True), (False, False))

# what makes another experiment of the same table stand in for an estimate: a model of the same
# group on the same data (inflection's sparse-output cell and its medium cell). The continuous
# table's snli classifier is no stand-in for its NMT model: its 5 minutes once estimated a
# converged NMT job, an hour or more
STAND_IN_FIELDS = ("scale_group", "dataset", "dataset_options")


def stand_ins(spec: DictConfig, experiment) -> frozenset[str]:
    """The other experiments of `spec`'s table whose runs may stand in for `experiment`'s in an
    estimate (`STAND_IN_FIELDS`)."""
    own = [experiment.get(field) for field in STAND_IN_FIELDS]
    return frozenset(
        other.name
        for other in spec.experiments
        if other.name != experiment.name and [other.get(f) for f in STAND_IN_FIELDS] == own
    )


def _scoped(rows: list[ResultRow], scale: str, experiment: str, mapping: str, kin: frozenset):
    """The non-baseline, non-dry rows at `scale` of each `ESTIMATE_SCOPES` scope in turn: this
    experiment's (of the mapping, then all), then its stand-ins' `kin` (the same)."""
    current = [
        row
        for row in split_current(rows)[0]
        if not is_baseline(row) and not row.get("dry_run") and row["scale"] == scale
    ]
    for same_experiment, same_mapping in ESTIMATE_SCOPES:
        yield [
            row
            for row in current
            if (row["experiment"] == experiment if same_experiment else row["experiment"] in kin)
            and (not same_mapping or row["mapping"] == mapping)
        ]


def estimate_seconds(
    rows: list[ResultRow], scale: str, experiment: str, mapping: str, kin: frozenset = frozenset()
) -> float | None:
    """The wall time one job of `mapping` at `scale` should take: the median of training plus
    decoding (each run once) over the converged runs at that scale of the first of
    ESTIMATE_SCOPES that has any (the mapping in this experiment, the experiment, the mapping
    in the stand-in experiments `kin`, those experiments); None when none has any. Another
    scale's runs never stand in: a paper-scale job is not a small one's hour."""
    for scoped in _scoped(rows, scale, experiment, mapping, kin):
        runs: dict[str, list[dict]] = {}
        for row in scoped:
            runs.setdefault(row["run_id"], []).append(row)
        kept, _ = converged([run_rows[0] for run_rows in runs.values()])
        values = [
            float(train_record(row)["wall_s"])
            + sum(float(decode_record(r).get("wall_s") or 0) for r in runs[row["run_id"]])
            for row in kept
            if train_record(row).get("wall_s")
        ]
        if values:
            return statistics.median(values)
    return None


def grid_seconds(
    rows: list[ResultRow],
    scale: str,
    experiment: str,
    mapping: str,
    runs: int,
    epochs: int,
    kin: frozenset = frozenset(),
):
    """A γ grid's estimate: `runs` runs of `epochs` epochs at the median seconds per epoch of
    the first of ESTIMATE_SCOPES with rows at `scale` (the stand-ins `kin`, as in
    `estimate_seconds`); None when none has any."""
    for scoped in _scoped(rows, scale, experiment, mapping, kin):
        per_epoch = [
            train["wall_s"] / train["epochs"]
            for row in scoped
            if (train := train_record(row)).get("wall_s") and train.get("epochs")
        ]
        if per_epoch:
            return runs * epochs * statistics.median(per_epoch)
    return None


# what makes another table's experiment train the same model on the same data
KINSHIP = ("train_config", "scale_group", "dataset", "dataset_options")


def kindred_rows(spec: DictConfig, experiment, results_dir: Path):
    """The committed runs of the other tables' experiments that train `experiment`'s model on
    its data (the same `KINSHIP` fields: the continuous table's snli and Table 1's, its
    multi30k_en_de and the NMT table's), for a table with no converged run of its own yet.

    Yields
    ------
    tuple
        (table, experiment name, its rows), the tables in name order.
    """
    if not experiment.get("train_config"):  # a trainer of its own (a pretrained encoder)
        return
    kin = {field: experiment.get(field) for field in KINSHIP}
    for path in sorted((CONFIG_DIR / "reproduce").glob("*.yaml")):
        if path.stem == spec.table:
            continue
        other = load_config("reproduce", path.stem)
        for candidate in other.experiments:
            if all(candidate.get(field) == value for field, value in kin.items()):
                rows = load_rows(results_dir, other.table)
                yield (
                    other.table,
                    candidate.name,
                    [r for r in rows if r["experiment"] == candidate.name],
                )


def hours(seconds: float | None) -> str:
    """'1.4 h', '12 min' or 'unknown'."""
    if seconds is None:
        return "unknown"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def print_plan(
    table: str, scale: str, jobs: list[PlannedJob], extra_seconds: float = 0.0, workers: int = 1
):
    """The plan, before any training: per (experiment, mapping), the seeds done and to do,
    then the count and the CPU-hours left (one process at a time: each job uses the cores
    THREADS gives it), and with `workers` processes sharing the jobs, about how long they take
    together."""
    todo = [job for job in jobs if not job.done]
    known = [job.seconds for job in todo if job.seconds is not None]
    total = sum(known) + extra_seconds
    if todo and not known and not extra_seconds:
        # "0.0 CPU-hours" would read as nothing left to do
        estimate = (
            "no estimate yet (neither the table nor another training its model on its data "
            "has a converged committed run to estimate from)"
        )
    else:
        estimate = (
            f"estimated {total / 3600:.1f} CPU-hours left"
            + (f" ({len(todo) - len(known)} without an estimate)" if len(known) < len(todo) else "")
            + " (medians of the committed rows' training + decoding wall times)"
            + (f"; about {hours(total / workers)} for {workers} workers" if workers > 1 else "")
        )
    print(
        f"[plan] {table} at scale {scale}: {len(jobs)} jobs, {len(jobs) - len(todo)} done, "
        f"{len(todo)} to do; {estimate}",
        flush=True,
    )
    groups: dict[tuple[str, str], list[PlannedJob]] = {}
    for job in jobs:
        groups.setdefault((job.experiment, job.mapping), []).append(job)
    for (experiment, mapping), group in groups.items():
        done = [str(j.seed) for j in group if j.done]
        left = [j for j in group if not j.done]
        parts = []
        if done:
            parts.append(f"seeds {','.join(done)} done")
        if left:
            each = left[0].seconds
            cost = "no estimate" if each is None else f"~{hours(each)} each"
            parts.append(
                f"seeds {','.join(str(j.seed) for j in left)} to do ({cost}"
                + (f"; {left[0].note}" if left[0].note else "")
                + ")"
            )
        print(f"[plan]   {experiment} {mapping}: {'; '.join(parts)}", flush=True)
    return total


@dataclass
class Progress:
    """One line per job of a table run: '[job 3/8] summarization uniform seed 2: elapsed
    1.2 h, ETA 2.3 h' (the ETA from the plan's estimates of the jobs left).

    The estimates are the committed rows' wall times, so they carry the speed of the machines
    that trained those rows. Once a job with an estimate has ended, the estimates left are
    scaled by this run's pace: the median, over its ended jobs, of the time each took over its
    estimate (a machine three times faster than the rows' makes it about 0.33), and the line
    says so. A job's time runs from its line to the next one's, so a mapping's γ grid, chosen
    before its first seed, counts in the job before it: the median keeps such a job from
    moving the pace much.

    A job the plan could not estimate (a table or cell with no committed run yet) is counted at
    the median wall time of this run's jobs so far, and the line says so; before any job has
    finished, the ETA of such jobs is unknown, never left out of the sum.

    A job that resumes a run cut earlier (``resumed``) takes here only what was left of it: it
    is kept out of the pace and the median, which would otherwise read the machine as that much
    faster (a run resumed after 5 of its 7 epochs once put the pace at 0.22).

    With ``workers`` processes sharing the jobs (``--workers``), each prints the lines of the
    jobs it trains, and the ETA is the jobs left over the workers.
    """

    jobs: list[PlannedJob]
    started: float = field(default_factory=time.monotonic)
    count: int = 0
    durations: list[float] = field(default_factory=list)  # this run's jobs, as they end
    paces: list[float] = field(default_factory=list)  # of those with an estimate: took/estimate
    job_started: float | None = None
    current: PlannedJob | None = None
    current_resumed: bool = False
    workers: int = 1

    def starting(self, job) -> None:
        """`jobs.run_job`'s ``started``: the line of a job (`rows.job.Job`) about to train."""
        self.start(job.experiment.name, job.mapping, job.seed, resumed=has_files(job.run_dir))

    def start(self, experiment: str, mapping: str, seed: int, resumed: bool = False) -> None:
        todo = [job for job in self.jobs if not job.done]
        index = next(
            (
                i
                for i, job in enumerate(todo)
                if (job.experiment, job.mapping, job.seed) == (experiment, mapping, seed)
            ),
            None,
        )
        if index is None:  # done already: the skip line says so
            return
        now = time.monotonic()
        # the job before this one has ended; a resumed one took only what was left of it
        if self.job_started is not None and not self.current_resumed:
            took = now - self.job_started
            self.durations.append(took)
            if self.current is not None and self.current.seconds:
                self.paces.append(took / self.current.seconds)
        self.job_started, self.current, self.current_resumed = now, todo[index], resumed
        self.count += 1
        print(
            f"[job {index + 1}/{len(todo)}] {experiment} {mapping} seed {seed}"
            + (" (resumed: not counted in the pace)" if resumed else "")
            + f": elapsed {hours(now - self.started)}, ETA {self.eta(todo[index:])}",
            flush=True,
        )

    def eta(self, left: list[PlannedJob]) -> str:
        """The time the jobs `left` should take: their estimates at this run's pace, and the
        run's median job for those without one."""
        known = [job.seconds for job in left if job.seconds is not None]
        unknown = len(left) - len(known)
        pace = statistics.median(self.paces) if self.paces else 1.0
        notes = []
        if self.paces and known:
            notes.append(
                f"estimates × {pace:.2f}, this run's pace over {len(self.paces)} ended "
                f"job{'s' if len(self.paces) > 1 else ''}"
            )
        if unknown and not self.durations:
            return f"unknown ({unknown} of {len(left)} jobs left without an estimate)"
        typical = statistics.median(self.durations) if unknown else 0.0
        if unknown:
            notes.append(
                f"{unknown} of {len(left)} jobs counted at this run's median job, {hours(typical)}"
            )
        if self.workers > 1:
            notes.append(f"shared by {self.workers} workers")
        total = hours((pace * sum(known) + unknown * typical) / self.workers)
        return total + (f" ({'; '.join(notes)})" if notes else "")


def has_files(folder: Path) -> bool:
    """Whether a job's run folder holds anything: a run cut earlier, which it resumes."""
    return folder.is_dir() and any(folder.iterdir())


def run_dir(
    work_dir, spec, experiment, scale, data, mapping, seed, gamma=None, dry_run=None
) -> Path:
    """Where a job's run lives: ``<work_dir>/checkpoints/<table>/<experiment>/<scale>-<source>
    [dry-run suffix]/<mapping>[/gamma<γ>]/seed<N>``; stable, so that an interrupted job
    resumes there."""
    suffix = dry_run.folder_suffix() if dry_run is not None else ""
    folder = (
        work_dir
        / "checkpoints"
        / spec.table
        / experiment.name
        / f"{scale}-{data.manifest['source']}{suffix}"
    )
    folder = folder / mapping
    if gamma is not None:
        folder = folder / f"gamma{gamma}"
    return folder / f"seed{seed}"


@dataclass(frozen=True)
class TableRun:
    """One invocation of a table: what `reproduce.run`'s steps share.

    Attributes
    ----------
    spec : DictConfig
        the table (configs/reproduce/<table>.yaml).
    args : argparse.Namespace
        the checked arguments (`reproduce.parse_args`).
    seeds : list of int
        the seeds to train.
    mappings : list of str
        the mappings to train.
    work_dir, results_dir : Path
        where the runs and the rows go.
    """

    spec: DictConfig
    args: argparse.Namespace
    seeds: list[int]
    mappings: list[str]
    work_dir: Path
    results_dir: Path

    @property
    def scale(self) -> str:
        return self.args.scale

    @property
    def selection_seeds(self) -> list[int]:
        """The seeds whose γ-grid runs choose γ (--gamma-seeds): ``first``, the first seed the
        table declares for the scale (this run's first where the table declares none for it),
        whichever seeds this run trains (seeds added to a cell later, by --seeds, train at the
        γ its first seed chose, as every other seed of the cell); ``all``, this run's seeds;
        else the seeds given."""
        how = self.args.gamma_seeds
        if how == "first":
            return list(self.spec.seeds.get(self.scale) or self.seeds)[:1]
        if how == "all":
            return list(self.seeds)
        return list(how)

    def rows(self) -> list[dict]:
        """The table's raw rows as they are now."""
        return load_rows(self.results_dir, self.spec.table)

    def estimate(self, rows: list[ResultRow], experiment, mapping: str) -> tuple[float | None, str]:
        """A job's estimate (`estimate_seconds`) from this table's `rows` of `experiment` and its
        `stand_ins`, else from the first of `kindred_rows` that has a converged run at the
        scale, and a note naming those.

        Returns
        -------
        tuple
            (seconds or None, "" or "estimated from <table>'s <experiment> runs").
        """
        kin = stand_ins(self.spec, experiment)
        seconds = estimate_seconds(rows, self.scale, experiment.name, mapping, kin)
        if seconds is not None:
            return seconds, ""
        for table, name, kin in kindred_rows(self.spec, experiment, self.results_dir):
            seconds = estimate_seconds(kin, self.scale, name, mapping)
            if seconds is not None:
                return seconds, f"estimated from {table}'s {name} runs"
        return None, ""

    def run_dir(self, experiment, data, mapping: str, seed: int, gamma=None) -> Path:
        """The folder of one of this run's jobs (`run_dir`)."""
        return run_dir(
            self.work_dir,
            self.spec,
            experiment,
            self.scale,
            data,
            mapping,
            seed,
            gamma,
            self.args.dry_run,
        )

    def mappings_of(self, experiment) -> list[str]:
        """The run's mappings that `experiment` trains (`config.experiment_mappings`)."""
        return experiment_mappings(experiment, self.mappings)


@dataclass(frozen=True)
class ExperimentTrainer:
    """How a table's experiments of one kind are checked, planned, tuned and run: the one place
    `reproduce` learns what kind an experiment is (its config's ``trainer:``,
    `pipelines.trainers.trainer_of`).

    Attributes
    ----------
    name : str
        the ``trainer:`` value of the experiments it runs.
    gamma_mappings : tuple of str
        the mappings a γ (``--gamma``) applies to.
    check_mapping : callable
        ``(experiment, args, mapping, gamma)``: refuse, before any data is read, a mapping's
        options that its jobs would refuse (`UsageError`); ``gamma`` stands for the run's γ
        grid, and applies only to ``gamma_mappings``.
    plan_jobs : callable
        ``(table, experiment, data) -> (list of PlannedJob, float)``: each job, done or to do,
        without training anything, and the estimated seconds of the γ grids left.
    choose_gammas : callable
        ``(table, experiment, data)``: run the γ grids of the mappings that have no recorded
        choice (``--gamma-select-only``).
    run : callable
        ``(table, experiment, data, progress) -> list of Path``: train and score every job whose
        rows are missing; the attention exports of the first seed (the figure's panels).
    """

    name: str
    gamma_mappings: tuple[str, ...]
    check_mapping: Callable[..., None]
    plan_jobs: Callable[..., tuple[list[PlannedJob], float]]
    choose_gammas: Callable[..., None]
    run: Callable[..., list[Path]]
