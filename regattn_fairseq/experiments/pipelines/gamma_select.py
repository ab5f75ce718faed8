"""GAMMA=auto for the fairseq tables: each mapping's temperature γ chosen on validation, then
every seed trained at it.

Every γ of the table's grid (``gamma_grid``, or ``--gamma-grid``) is trained on the selection
seeds (``--gamma-seeds``), in the scale's full trainings or in short runs of their own
(``--gamma-select-epochs``), and the lowest best validation loss, mean over those seeds, picks
γ; a best γ at the grid's edge extends the grid by the edge rule (`gamma_edge`). The choice is
recorded in the rows (``gamma_selection``), and a choice already recorded is taken instead of
training the grid again (`choose_gamma`). The plan reads the same records without training
(`planned_gamma`). The pretrained-encoder table chooses its own way (`pretrained`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from regattn import mappings
from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.result_row import gamma_selection, train_record
from regattn_fairseq.experiments.core.run_lock import run_lock
from regattn_fairseq.experiments.pipelines.gamma_edge import search_grid, selection_settled
from regattn_fairseq.experiments.pipelines.plan import TableRun, grid_seconds, stand_ins
from regattn_fairseq.experiments.pipelines.table_jobs import (
    fairseq_job,
    gamma_overrides,
    train_fresh,
)
from regattn_fairseq.experiments.train.train import learning_curve

# the table mappings that take a temperature γ (model.attention_gamma), from the mappings'
# declarations; 1.5-entmax's is entmax(s / γ), the Tsallis regularizer scaled by γ
GAMMA_MAPPINGS = mappings.gamma_configs()


@dataclass(frozen=True)
class SelectionHow:
    """How GAMMA=auto chooses (`_selection_how`).

    Attributes
    ----------
    grid : list of float
        the γ grid.
    extend : int
        the edge rule's most values beyond each end of the grid.
    criterion : str
        what the choice minimises, as the rows record it.
    seeds : list of int
        the seeds whose grid runs choose.
    epochs : int or None
        the selection runs' epochs (--gamma-select-epochs; None: the scale's full trainings).
    overrides : list of str
        the selection runs' extra overrides (their epochs, early stopping off).
    """

    grid: list
    extend: int
    criterion: str
    seeds: list
    epochs: int | None
    overrides: list

    @property
    def matched(self) -> dict:
        """What a recorded choice must share with this one to be taken for it."""
        return {"grid": self.grid, "criterion": self.criterion, "seeds": self.seeds}


def choose_gamma(table: TableRun, experiment, data, mapping: str, rows=()) -> dict:
    """GAMMA=auto: train every γ of the grid and pick the best validation loss.

    The grid is trained for every seed (``--gamma-seeds all``, the mean loss decides) or for
    the first seed only (``--gamma-seeds first``; the caller trains the other seeds at the
    chosen γ).

    A best γ at the grid's edge says only that the optimum may lie beyond it, so the grid is
    extended there (`gamma_edge.gamma_beyond_edge`): the next γ at the grid's own factor is
    trained, and again while the new edge wins, at most ``gamma_grid_extend`` values on each
    side (the table's config, or ``--gamma-grid-extend``). Those values are recorded apart from
    the grid (``extended``), so choices made on the same grid stay comparable.

    A choice already recorded in the table's rows is taken instead of training the grid again
    (its checkpoints may be gone: another machine, a cleaned work dir): a finished row of one
    of ``seeds`` whose config is the job's at the γ it records as chosen, with the same grid,
    criterion and selection seeds, and a choice the edge rule settles
    (`gamma_edge.selection_settled`). ``--retrain`` always trains the grid.

    Parameters
    ----------
    table : TableRun
        the table run: its spec, arguments, seeds (``seeds`` above) and folders.
    rows : list of dict, optional
        the table's raw rows (`store.load_rows`), searched for a recorded choice.

    Returns
    -------
    dict
        ``{"grid", "extend", "extended", "criterion", "seeds", "validation": {γ: mean best
        validation loss}, "chosen"}``.
    """
    args = table.args
    how = _selection_how(table.spec, args, table.selection_seeds)
    if not args.retrain:
        recorded = _recorded_gamma_choice(table, experiment, data, mapping, rows, how)
        if recorded is not None:
            selection, run_id = recorded
            print(
                f"[gamma] {mapping}: the choice recorded by run {run_id} (validation loss "
                f"{selection['validation']}) -> γ = {selection['chosen']}; the grid is not "
                "trained again (--retrain to train it)",
                flush=True,
            )
            return selection

    def validation_loss(gamma):
        """The selection seeds' mean best validation loss at γ, trained where it is not."""
        losses = []
        for seed in how.seeds:
            run_dir = _selection_dir(
                table.run_dir(experiment, data, mapping, seed, gamma), how.epochs
            )
            losses.append(
                _selection_loss(table, experiment, data, mapping, seed, gamma, run_dir, how)
            )
        return round(sum(losses) / len(losses), 4)

    def beyond_the_edge(tried, beyond):
        print(
            f"[gamma] {mapping}: the best γ is the edge of {tried}: γ = {beyond} is tried "
            "beyond it",
            flush=True,
        )

    validation, extended, chosen = search_grid(
        how.grid, how.extend, validation_loss, beyond_the_edge
    )
    print(f"[gamma] {mapping}: validation loss {validation} -> γ = {chosen}", flush=True)
    return {
        "grid": how.grid,
        "extend": how.extend,
        "extended": extended,
        "criterion": how.criterion,
        "seeds": how.seeds,
        "validation": validation,
        "chosen": chosen,
    }


def _selection_loss(table: TableRun, experiment, data, mapping, seed, gamma, run_dir, how):
    """The best validation loss of one grid run of the choice in `run_dir`, trained there
    first (`_train_selection_run`).

    Raises
    ------
    ReproError
        the run's log holds no validation loss.
    """
    _train_selection_run(table, experiment, data, mapping, seed, gamma, run_dir, how)
    # the best epoch's loss, the one checkpoint_best.pt was kept for (fairseq logs
    # valid_best_loss only from the second validation on)
    curve = _selection_curve(run_dir)
    if not curve:
        raise ReproError(f"no validation loss in {run_dir / 'train.log'}")
    return curve["best_valid_loss"]


def _train_selection_run(
    table: TableRun, experiment, data, mapping, seed, gamma, run_dir, how, share=False
) -> bool:
    """Train one grid run of the choice in `run_dir` (`table_jobs.train_fresh` of its job)
    unless it is a shortened selection run whose log holds its last epoch. Sharing the table's
    jobs (``share``), a run another process holds is left to it.

    Returns
    -------
    bool
        False when it was left to another process.
    """
    args = table.args
    extra = [*gamma_overrides(args.override, gamma), *how.overrides]
    job = fairseq_job(
        experiment,
        table.scale,
        data,
        mapping,
        seed,
        run_dir,
        extra,
        args.dry_run,
        gamma,
        writes_rows=False,
    )
    job = replace(job, label=f"{experiment.name} {mapping} γ={gamma} seed {seed}")
    # Only the validation losses of a shortened selection run are used: once its log holds
    # its last epoch's, it is not trained again, whether or not its checkpoints are here
    # (deleted, or the run made on another machine).
    if how.epochs and not args.retrain and _selection_run_finished(run_dir, how.epochs):
        print(
            f"[gamma] {job.label}: its {how.epochs} epochs are in {run_dir / 'train.log'}; not "
            "trained again",
            flush=True,
        )
        return True
    # Otherwise through fairseq: a finished run stops at once, an interrupted one resumes
    # from checkpoint_last.pt (checkpoint_best.pt alone does not mean it finished).
    with run_lock(job.run_dir, job.label, wait=not share) as waited:
        if waited is None:
            return False
        train_fresh(job, args.retrain, args.launch)
    return True


def train_free_grid_runs(table: TableRun, experiment, data, mapping: str, rows=()) -> bool:
    """Sharing the table's jobs (``--workers``): train the runs of `mapping`'s γ grid that no
    other process holds, without choosing (`choose_gamma` chooses once all are done; the
    values beyond the grid's edge depend on the choice and are trained then).

    Returns
    -------
    bool
        True when no grid run was left to another process (or a choice is recorded in
        `rows`): the choice can be made now.
    """
    how = _selection_how(table.spec, table.args, table.selection_seeds)
    if _recorded_gamma_choice(table, experiment, data, mapping, rows, how) is not None:
        return True
    free = True
    for gamma in how.grid:
        for seed in how.seeds:
            run_dir = _selection_dir(
                table.run_dir(experiment, data, mapping, seed, gamma), how.epochs
            )
            free &= _train_selection_run(
                table, experiment, data, mapping, seed, gamma, run_dir, how, share=True
            )
    return free


def _selection_how(spec, args, selection_seeds: list[int]) -> SelectionHow:
    """How GAMMA=auto chooses, from the arguments and the table's config.

    Raises
    ------
    ReproError
        no grid, or a γ of it not > 0.
    """
    grid = list(args.gamma_grid or spec.get("gamma_grid") or [])
    if not grid:
        raise ReproError(
            f"--gamma auto: configs/reproduce/{spec.table}.yaml has no gamma_grid (or pass "
            "--gamma-grid)"
        )
    if any(gamma <= 0 for gamma in grid):
        raise ReproError(f"--gamma auto: every γ of the grid must be > 0, got {grid}")
    extend = (
        args.gamma_grid_extend
        if args.gamma_grid_extend is not None
        else spec.get("gamma_grid_extend", 0)
    )
    criterion = "best validation loss (min of valid_loss over epochs), mean over seeds"
    select_epochs = args.gamma_select_epochs
    # shorter selection runs: their own folders and configs (no early stopping), so that the
    # converged run at the chosen γ is trained apart from them
    selection_overrides = []
    if select_epochs:
        criterion = (
            f"best validation loss within the first {select_epochs} epochs (early stopping "
            "off), mean over seeds"
        )
        selection_overrides = [f"optimization.max_epoch={select_epochs}", "checkpoint.patience=-1"]
    return SelectionHow(
        grid, extend, criterion, list(selection_seeds), select_epochs, selection_overrides
    )


def _selection_dir(run_dir: Path, epochs: int | None) -> Path:
    """The folder of a grid run: the job's own (`plan.run_dir`), or beside it for a shortened
    selection run (--gamma-select-epochs), so that the converged run at the chosen γ is
    trained apart from it."""
    return run_dir.with_name(f"{run_dir.name}-select{epochs}epochs") if epochs else run_dir


def _selection_curve(run_dir: Path) -> dict:
    """The validation curve of a selection run (`train.learning_curve`: each epoch's last
    record, the lowest loss); empty without a log or a validation."""
    log = run_dir / "train.log"
    return learning_curve(log.read_text()) if log.is_file() else {}


def _selection_run_finished(run_dir: Path, epochs: int) -> bool:
    """Whether a selection run's train.log holds the validation of its last epoch (`epochs`):
    an interrupted run's does not."""
    return epochs in _selection_curve(run_dir).get("epochs", [])


def _recorded_gamma_choice(table: TableRun, experiment, data, mapping, rows, how: SelectionHow):
    """A γ choice recorded in ``rows`` for this job, made the way ``how`` says.

    Parameters
    ----------
    rows : list of dict
        the table's raw rows.
    how : SelectionHow
        the choice to make: a recorded one has its grid, criterion and seeds
        (`SelectionHow.matched`), and the edge rule with its ``extend`` settles it
        (`gamma_edge.selection_settled`).

    Returns
    -------
    tuple or None
        (the recorded selection, the run id of the row that records it), or None when no
        finished row of the experiment and scale, of any seed, has the job's config at its
        recorded γ, the same ``how`` and a choice the edge rule settles: seeds added to a cell
        later reuse its choice, and a choice another experiment made for the same mapping (its
        validation losses are of its own data) is never taken.
    """
    candidates = [
        row
        for row in rows
        if (row["experiment"], row["scale"], row["mapping"])
        == (experiment.name, table.scale, mapping)
        and all((gamma_selection(row) or {}).get(k) == v for k, v in how.matched.items())
        and selection_settled(gamma_selection(row), how.extend)
    ]
    for row in reversed(candidates):  # the newest first
        selection = gamma_selection(row)
        gamma = selection["chosen"]
        run_dir = table.run_dir(experiment, data, mapping, row["seed"], gamma)
        args = table.args
        extra = gamma_overrides(args.override, gamma)
        job = fairseq_job(
            experiment, table.scale, data, mapping, row["seed"], run_dir, extra, args.dry_run, gamma
        )
        if job.finished(rows):
            return selection, row["run_id"]
    return None


def planned_gamma(
    table: TableRun, experiment, data, mapping: str, rows: list[dict]
) -> tuple[float | None, str, float]:
    """The γ a mapping's jobs are planned at, without training anything (`reproduce`'s plan).

    Returns
    -------
    tuple
        (γ: the fixed one, the recorded choice, else None: the mapping's config, or a choice
        still to make; the plan's note; the estimated seconds of its γ grid left).
    """
    args = table.args
    if mapping not in GAMMA_MAPPINGS or args.gamma is None:
        return None, "", 0.0
    if args.gamma != "auto":
        return float(args.gamma), "", 0.0
    how = _selection_how(table.spec, args, table.selection_seeds)
    recorded = None
    if not args.retrain:
        recorded = _recorded_gamma_choice(table, experiment, data, mapping, rows, how)
    if recorded is not None:
        return recorded[0]["chosen"], "", 0.0
    return _grid_left(table, experiment, data, mapping, rows, how)


def _grid_left(table: TableRun, experiment, data, mapping, rows, how: SelectionHow):
    """(γ, note, seconds) of a mapping whose choice is not recorded: its grid runs are read
    from their logs where they finished (`_selection_run_finished`), the others estimated."""
    missing = [
        (gamma, seed)
        for gamma in how.grid
        for seed in how.seeds
        if not _read_from_log(table, experiment, data, mapping, seed, gamma, how.epochs)
    ]
    # this experiment's rows of the mapping at this scale (another experiment of the table
    # chooses its own γ: inflection's entmax-output cell; another scale, on its own runs)
    cell = (experiment.name, table.scale, mapping)
    same_cell = [r for r in rows if (r["experiment"], r["scale"], r["mapping"]) == cell]
    runs = len(how.grid) * len(how.seeds)
    note = (
        f"γ chosen on its grid first: {runs - len(missing)} of its {runs} runs read from their "
        f"logs, {len(missing)} to train"
    )
    epochs = how.epochs or max([train_record(r).get("epochs") or 0 for r in same_cell] or [10])
    kin = stand_ins(table.spec, experiment)
    seconds = grid_seconds(rows, table.scale, experiment.name, mapping, len(missing), epochs, kin)
    seconds = seconds or 0.0
    # a choice recorded before the edge rule settled it: most likely the grid's again, so the
    # jobs at it are counted as done (the run confirms it)
    unsettled = [
        gamma_selection(r)["chosen"]
        for r in same_cell
        if all((gamma_selection(r) or {}).get(k) == v for k, v in how.matched.items())
    ]
    gamma = None
    if unsettled:
        gamma = unsettled[-1]
        note += f" (recorded γ = {gamma:g}, to be confirmed)"
    return gamma, note, seconds


def _read_from_log(table: TableRun, experiment, data, mapping, seed, gamma, epochs) -> bool:
    """Whether a grid run's validation loss is read from its log, not trained: a shortened
    selection run (`epochs`) whose log holds its last epoch."""
    if not epochs:
        return False
    run_dir = table.run_dir(experiment, data, mapping, seed, gamma)
    return _selection_run_finished(_selection_dir(run_dir, epochs), epochs)
