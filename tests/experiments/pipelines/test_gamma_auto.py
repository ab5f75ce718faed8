"""GAMMA=auto (`scripts/reproduce.py --gamma auto`): every γ of the grid is trained, the best
validation loss picks one, test is reported at it and the choice is recorded in the row."""

import json
import sys

import children
import pytest
from omegaconf import OmegaConf

from regattn import mappings
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets
from regattn_fairseq.experiments.pipelines import (
    fairseq_trainer,
    gamma_edge,
    gamma_select,
    plan,
    reproduce,
    table_jobs,
)
from regattn_fairseq.experiments.report.figures import (
    FigureSetup,
    cells_without_attention,
    figure_panels,
    figure_sidecar_name,
    gamma_suffix,
)
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.train import train as runs


def _table(spec, args, seeds, work_dir) -> plan.TableRun:
    """A table run of `args` (at their scale) with `seeds`, its runs under `work_dir`."""
    return plan.TableRun(spec, args, seeds, list(spec.mappings), work_dir, work_dir / "results")


def test_gamma_grid_arguments():
    args = reproduce.parse_args(["inflection", "--gamma", "auto", "--gamma-grid", "1,4"])
    assert args.gamma_grid == [1.0, 4.0]
    for bad in (["--gamma-grid", "1,4"], ["--gamma", "warm"], ["--gamma", "-1"]):
        with pytest.raises(SystemExit):
            reproduce.parse_args(["inflection", "--scale", "smoke", *bad])
    # at the small scale the table's recipe chooses γ on validation: a grid is its grid
    assert reproduce.parse_args(["inflection", "--gamma-grid", "1,4"]).gamma == "auto"


@pytest.mark.parametrize("table", ["table1", "table2", "nmt", "inflection"])
def test_every_discrete_mapping_of_a_table_has_its_gamma_tuned(table):
    """GAMMA=auto tunes the temperature of every discrete mapping of the paper tables (1.5-entmax
    included: entmax(s / γ)); a mapping left at γ = 1 would not be compared fairly. The
    attention-free control has no scores to scale (1/n whatever they are): no γ."""
    spec = reproduce.load_config("reproduce", table)
    assert spec.control in spec.mappings and spec.control in mappings.CONTROL_NAMES
    assert mappings.parameters_of(spec.control) == ()
    for mapping in spec.mappings:
        if mapping == spec.control:
            continue
        attention = OmegaConf.load(REPO_ROOT / "configs" / "attention" / f"{mapping}.yaml")
        assert "gamma" in mappings.parameters_of(attention.attention), mapping
        assert mapping in gamma_select.GAMMA_MAPPINGS, mapping


def test_interrupted_grid_run_is_resumed_not_taken_as_finished(tmp_path, monkeypatch):
    """A grid run with a checkpoint_best.pt but no finished training goes back through fairseq
    (which resumes from checkpoint_last.pt); its best validation loss is read afterwards."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}})()
    # the grid alone (its edge rule is tested apart)
    args = reproduce.parse_args(
        [
            "inflection",
            "--scale",
            "smoke",
            "--gamma",
            "auto",
            "--gamma-grid",
            "1,4",
            "--gamma-grid-extend",
            "0",
        ]
    )
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        gamma = float(extra[-1].split("=")[1])
        trained.append(gamma)
        # the "resumed" run ends with a better loss for γ = 4
        (run_dir / "train.log").write_text(
            json.dumps({"epoch": 30, "valid_loss": 2.0 if gamma == 1.0 else 1.5}) + "\n"
        )

    for gamma in (1.0, 4.0):
        run_dir = plan.run_dir(tmp_path, spec, experiment, "smoke", data, "sparsemax", 1, gamma)
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "checkpoint_best.pt").write_bytes(b"interrupted")
    monkeypatch.setattr(table_jobs, "train", fake_train)
    selection = gamma_select.choose_gamma(
        _table(spec, args, [1], tmp_path), experiment, data, "sparsemax"
    )
    assert trained == [1.0, 4.0]
    assert selection["chosen"] == 4.0 and selection["grid"] == [1.0, 4.0]
    assert selection["validation"] == {"1.0": 2.0, "4.0": 1.5}


@pytest.mark.slow
def test_gamma_auto_end_to_end_smoke(shared_data, tmp_path):
    """Smoke scale, sparsemax, grid {1, 4}: two grid runs, one test row at the chosen γ, and a
    second invocation that trains nothing (the recorded choice is reused, the row skipped)."""
    command = [
        sys.executable,
        "scripts/reproduce.py",
        "inflection",
        "--scale",
        "smoke",
        "--mappings",
        "sparsemax",
        "--gamma",
        "auto",
        "--gamma-grid",
        "1,4",
        # the grid alone: the table's edge rule (7227571) would train values beyond it
        "--gamma-grid-extend",
        "0",
        "--data-dir",
        str(shared_data),
        "--work-dir",
        str(tmp_path / "work"),
        "--results-dir",
        str(tmp_path / "results"),
    ]
    first = children.run(command, cwd=REPO_ROOT, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    raw = tmp_path / "results" / "raw" / "inflection.jsonl"
    rows = [json.loads(line) for line in raw.read_text().splitlines()]
    # the table's baseline (rows.baselines, scored before training) and one model row
    assert sorted(row["mapping"] for row in rows) == ["baseline: copy lemma", "sparsemax"]
    [row] = [row for row in rows if not rowkeys.is_baseline(row)]
    selection = row["gamma_selection"]
    assert selection["grid"] == [1.0, 4.0] and set(selection["validation"]) == {"1.0", "4.0"}
    chosen = min(selection["grid"], key=lambda g: selection["validation"][str(g)])
    assert selection["chosen"] == chosen
    assert row["train"]["config"]["model"]["attention_gamma"] == chosen
    grid_runs = list((tmp_path / "work" / "checkpoints").rglob("gamma*/seed1/checkpoints"))
    assert len(grid_runs) == 2
    second = children.run(command, cwd=REPO_ROOT, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "[skip]" in second.stdout and "[train]" not in second.stdout
    assert "the grid is not trained again" in second.stdout
    assert len(raw.read_text().splitlines()) == 2  # nothing scored again


def test_gamma_chosen_on_the_first_seed_trains_the_grid_once(tmp_path, monkeypatch):
    """--gamma-seeds first: the grid is trained for the first seed only, and the choice records
    which seeds decided it."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}})()
    argv = [
        "inflection",
        "--scale",
        "smoke",
        "--gamma",
        "auto",
        "--gamma-grid",
        "1,4",
        "--gamma-grid-extend",
        "0",
    ]
    args = reproduce.parse_args([*argv, "--gamma-seeds", "first"])
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        trained.append((seed, extra[-1]))
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "train.log").write_text(json.dumps({"epoch": 1, "valid_loss": 1.0}) + "\n")

    monkeypatch.setattr(table_jobs, "train", fake_train)
    selection = gamma_select.choose_gamma(
        _table(spec, args, [1, 2, 3], tmp_path), experiment, data, "sparsemax"
    )
    assert trained == [(1, "model.attention_gamma=1.0"), (1, "model.attention_gamma=4.0")]
    assert selection["seeds"] == [1]
    with pytest.raises(SystemExit):
        reproduce.parse_args(["inflection", "--scale", "smoke", "--gamma-seeds", "first"])
    # seeds run by separate processes: seed 2 alone trains at the γ of seed 1's grid, the
    # same choice, recorded the same way as `first` with seeds 1, 2, 3
    trained.clear()
    args.gamma_seeds = reproduce.parse_args([*argv, "--gamma-seeds", "1"]).gamma_seeds
    assert gamma_select.choose_gamma(
        _table(spec, args, [2], tmp_path), experiment, data, "sparsemax"
    ) == {**selection}
    assert trained == [(1, "model.attention_gamma=1.0"), (1, "model.attention_gamma=4.0")]
    for bad in ("none", "1,x", ""):
        with pytest.raises(SystemExit):
            reproduce.parse_args([*argv, "--gamma-seeds", bad])


def _selection_log(run_dir, losses):
    """A selection run's train.log: one validation record per epoch, as fairseq logs it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "[2026-11-26 15:00:00,000][valid][INFO] - "
        + json.dumps({"epoch": epoch, "valid_loss": str(loss)})
        for epoch, loss in enumerate(losses, start=1)
    ]
    (run_dir / "train.log").write_text("\n".join(lines) + "\n")


def test_finished_selection_run_is_read_from_its_log_without_its_checkpoints(tmp_path, monkeypatch):
    """A shortened selection run (--gamma-select-epochs) whose log holds its last epoch is
    not trained again, checkpoints or not (made on another machine); one whose log stops
    earlier (interrupted) goes through fairseq."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}})()
    args = reproduce.parse_args(
        [
            "inflection",
            "--scale",
            "smoke",
            "--gamma",
            "auto",
            "--gamma-grid",
            "1,4,16",
            "--gamma-select-epochs",
            "3",
        ]
    )
    folders = {
        gamma: plan.run_dir(tmp_path, spec, experiment, "smoke", data, "sparsemax", 1, gamma)
        for gamma in (1.0, 4.0, 16.0)
    }
    folders = {g: d.with_name(f"{d.name}-select3epochs") for g, d in folders.items()}
    _selection_log(folders[1.0], [3.0, 2.5, 2.25])  # finished on another machine
    _selection_log(folders[4.0], [2.9, 2.0])  # interrupted after epoch 2
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        trained.append((run_dir, extra[-2:]))
        _selection_log(run_dir, [2.8, 1.75, 1.5] if "=4.0" in extra[-3] else [3.0, 2.6, 2.4])

    monkeypatch.setattr(table_jobs, "train", fake_train)
    selection = gamma_select.choose_gamma(
        _table(spec, args, [1], tmp_path), experiment, data, "sparsemax"
    )
    assert [run_dir for run_dir, _ in trained] == [folders[4.0], folders[16.0]]
    assert trained[0][1] == ["optimization.max_epoch=3", "checkpoint.patience=-1"]
    assert selection["validation"] == {"1.0": 2.25, "4.0": 1.5, "16.0": 2.4}
    assert selection["chosen"] == 4.0
    # --retrain trains every grid run again, finished or not
    trained.clear()
    args.retrain = True
    gamma_select.choose_gamma(_table(spec, args, [1], tmp_path), experiment, data, "sparsemax")
    assert len(trained) == 3


def test_gamma_select_only_trains_the_grid_and_nothing_else(tmp_path, monkeypatch):
    """--gamma-select-only: the grid of every mapping is trained and its choice printed; no
    baseline is scored, no converged run trained, no row written."""
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        trained.append((mapping, seed, run_dir.name, extra[-3]))
        _selection_log(run_dir, [2.0 if "=1.0" in extra[-3] else 1.0])

    def never(*args, **kwargs):
        raise AssertionError("--gamma-select-only scored or trained beyond the grid")

    data = type("Prepared", (), {"manifest": {"source": "offline", "evaluations": {}}})()
    monkeypatch.setattr(table_jobs, "train", fake_train)
    monkeypatch.setattr(reproduce, "_prepare", lambda table, experiment: data)
    monkeypatch.setattr(reproduce, "_leave_out_missing_evaluations", lambda *a: None)
    monkeypatch.setattr(reproduce, "run_baselines", never)
    monkeypatch.setattr(fairseq_trainer, "run_table_job", never)
    argv = ["inflection", "--scale", "smoke", "--mappings", "sparsemax", "entmax15"]
    argv += ["--seeds", "1,2", "--gamma", "auto", "--gamma-grid", "1,4", "--gamma-seeds"]
    argv += ["first", "--gamma-select-epochs", "1", "--gamma-select-only"]
    argv += ["--gamma-grid-extend", "0"]
    argv += ["--work-dir", str(tmp_path), "--results-dir", str(tmp_path / "results")]
    reproduce.run(argv)
    # medium's two mappings, then the sparse-output experiment's 1.5-entmax (its own γ; it
    # has no sparsemax cell)
    assert [(m, seed, gamma) for m, seed, _, gamma in trained] == [
        (mapping, 1, f"model.attention_gamma={gamma}")
        for mapping in ("sparsemax", "entmax15", "entmax15")
        for gamma in (1.0, 4.0)
    ]
    assert {folder for _, _, folder, _ in trained} == {"seed1-select1epochs"}
    assert not (tmp_path / "results" / "raw").exists()
    with pytest.raises(SystemExit):
        reproduce.parse_args(["inflection", "--scale", "smoke", "--gamma-select-only"])


def _finished_rows_at(spec, experiment, data, args, tmp_path, seed, gamma, selection):
    """The rows a finished job at γ would have left, recording ``selection``."""
    run_dir = plan.run_dir(tmp_path, spec, experiment, "smoke", data, "sparsemax", seed, gamma)
    extra = [*args.override, f"model.attention_gamma={gamma}"]
    settings = runs.compose_settings(
        experiment.train_config,
        table_jobs.train_overrides(experiment, "smoke", data, "sparsemax", seed, run_dir, extra),
    )
    return [
        {
            "experiment": experiment.name,
            "scale": "smoke",
            "data_source": "offline",
            "mapping": "sparsemax",
            "evaluation": evaluation,
            "seed": seed,
            "run_id": f"run{seed}",
            "train": {"config": settings},
            "gamma_selection": selection,
        }
        for evaluation in experiment_test_sets(experiment)
    ]


def test_recorded_gamma_choice_is_taken_without_training_the_grid(tmp_path, monkeypatch):
    """A choice recorded by a finished row (its checkpoints gone: another machine) is taken as
    it is; a row recording another grid, or whose config is not the job's at the γ it records,
    is not, and the grid is trained."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    args = reproduce.parse_args(
        [
            "inflection",
            "--scale",
            "smoke",
            "--gamma",
            "auto",
            "--gamma-grid",
            "1,4",
            "--gamma-seeds",
            "first",
        ]
        + ["--gamma-grid-extend", "0"]
    )
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        trained.append(extra[-1])
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "train.log").write_text(json.dumps({"epoch": 1, "valid_loss": 1.0}) + "\n")

    monkeypatch.setattr(table_jobs, "train", fake_train)
    recorded = {
        "grid": [1.0, 4.0],
        "criterion": "best validation loss (min of valid_loss over epochs), mean over seeds",
        "seeds": [1],
        "validation": {"1.0": 2.0, "4.0": 1.5},
        "chosen": 4.0,
    }

    def choose(rows):
        trained.clear()
        return gamma_select.choose_gamma(
            _table(spec, args, [1, 2, 3], tmp_path), experiment, data, "sparsemax", rows
        )

    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 4.0, recorded)
    assert choose(rows) == recorded and trained == []
    # the row of seed 2 records the same choice: it is found as well
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 2, 4.0, recorded)
    assert choose(rows) == recorded and trained == []
    other_grid = {**recorded, "grid": [1.0, 4.0, 16.0]}
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 4.0, other_grid)
    assert choose(rows)["grid"] == [1.0, 4.0] and len(trained) == 2
    # the row records γ = 4 chosen but was trained at γ = 1: not this job's choice
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 1.0, recorded)
    choose(rows)
    assert len(trained) == 2
    # --retrain trains the grid whatever is recorded
    args.retrain = True
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 4.0, recorded)
    choose(rows)
    assert len(trained) == 2


def _export(path, mapping, gamma, lengths=(4, 9, 30, 12, 10)):
    """An attention export of sentences with these source lengths (9, 12, 10 are readable)."""
    with path.open("w") as out:
        for index, length in enumerate(lengths):
            record = {
                "id": index,
                "src_tokens": [f"w{i}" for i in range(length)],
                "tgt_tokens": ["a", "b"],
                "attention": [[1.0 / length] * length] * 2,
                "mapping": {"name": mapping, "params": {"gamma": gamma}},
            }
            out.write(json.dumps(record) + "\n")
    return path


def _panel_row(folder, experiment, evaluation, mapping, gamma, tuned, seed, exists=True):
    """A result row of `mapping` at `seed` whose attention export is in `folder` (written when
    `exists`), its run id ``<mapping><γ>`` (``s<seed>`` added after the first seed)."""
    run_id = f"{mapping}{gamma}" + (f"s{seed}" if seed > 1 else "")
    export = folder / f"{run_id}.jsonl"
    if exists:
        _export(export, mapping, gamma)
    return {
        "experiment": experiment,
        "scale": "small",
        "data_source": "offline",
        "mapping": mapping,
        "evaluation": evaluation,
        "seed": seed,
        "run_id": run_id,
        "git_commit": "c" * 40,
        "date": "2026-11-25T00:00:00+00:00",
        "train": {"config": {"model": {"attention": mapping, "attention_gamma": gamma}}},
        "gamma_selection": {"chosen": gamma} if tuned else None,
        "attention": {"export": str(export)},
    }


def test_one_figure_gathers_the_mappings_run_by_separate_processes(tmp_path):
    """A table run one mapping per process: the figure of the last one holds every cell set up
    the same way (γ auto here), from its export, or from its committed figure sidecar where the
    export is gone (decoded on another machine)."""
    from regattn_fairseq.experiments.decode.attention_format import read_export

    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    evaluation = next(iter(experiment_test_sets(experiment)))
    args = reproduce.parse_args(["inflection", "--scale", "smoke", "--gamma", "auto"])
    dry = args.dry_run.record()
    results = tmp_path / "results"

    def row(mapping, gamma, tuned, exists=True):
        return _panel_row(tmp_path, experiment.name, evaluation, mapping, gamma, tuned, 1, exists)

    def sidecar(run_id):
        return results / figure_sidecar_name(run_id, evaluation)

    rows = [
        row("softmax", 4.0, True),
        row("softmax", 1.0, False),  # another setup: its own figure
        row("sparsemax", 16.0, True, exists=False),  # decoded elsewhere, export and sidecar gone
        row("entmax15", 16.0, True),
    ]
    own = [tmp_path / "entmax1516.0.jsonl"]
    setup = FigureSetup(experiment, "small", 1, args.gamma, dry, mappings.gamma_configs())
    # the cell whose attention is nowhere on disk is named (a baseline, which has no
    # attention, is not), and naming it writes nothing
    baseline = {**row("copy lemma", None, False, exists=False), "baseline": {"rule": "copy"}}
    assert cells_without_attention([*rows, baseline], setup, results) == ["sparsemax (γ=16)"]
    assert not (results / "raw").exists()
    panels = figure_panels(own, rows, setup, results)
    assert [path for path, _ in panels] == [
        tmp_path / "entmax1516.0.jsonl",
        tmp_path / "softmax4.0.jsonl",
    ]
    assert panels[0][1] == {  # what the figure's manifest records of the run
        "run_id": "entmax1516.0",
        "attention": "entmax15 (γ=16)",
        "seed": 1,
        "config_sha256": panels[0][1]["config_sha256"],
        "git_commit": "c" * 40,
        "trained_at": None,
    }
    # the exports on disk left their readable sentences in sidecars; the other setup did not
    kept = read_export(sidecar("softmax4.0"))
    assert [r["id"] for r in kept] == [1, 3, 4]
    assert kept == [r for r in read_export(tmp_path / "softmax4.0.jsonl") if r["id"] in (1, 3, 4)]
    assert sidecar("entmax1516.0").is_file() and not sidecar("softmax1.0").exists()
    first = sidecar("softmax4.0").read_bytes()
    # on another machine every export is gone: the figure is drawn from the sidecars
    for path in tmp_path.glob("*.jsonl"):
        path.unlink()
    panels = figure_panels([], rows, setup, results)
    assert [path for path, _ in panels] == [sidecar("softmax4.0"), sidecar("entmax1516.0")]
    assert cells_without_attention(rows, setup, results) == ["sparsemax (γ=16)"]
    assert [run["run_id"] for _, run in panels] == ["softmax4.0", "entmax1516.0"]
    assert sidecar("softmax4.0").read_bytes() == first
    assert gamma_suffix("auto") == "_gamma-auto"
    assert gamma_suffix("1") == "_gamma1.0" and gamma_suffix(None) == ""


def test_a_cell_whose_first_seed_is_gone_is_drawn_from_its_lowest_seed_on_disk(
    tmp_path, monkeypatch
):
    """A cell whose first seed's attention is on disk neither as an export nor as a sidecar
    (decoded on a machine that is gone) keeps its panel: the lowest seed whose attention is,
    and the panels' titles say their seeds; a cell with its first seed keeps it, and a cell
    with no attention on disk has no panel."""
    from regattn_fairseq.experiments.report import figures

    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    evaluation = next(iter(experiment_test_sets(experiment)))
    results = tmp_path / "results"

    def row(mapping, gamma, seed, exists=True):
        return _panel_row(
            tmp_path, experiment.name, evaluation, mapping, gamma, False, seed, exists
        )

    rows = [
        row("softmax", 4.0, 1),
        row("softmax", 4.0, 2),
        row("sparsemax", 16.0, 1, exists=False),  # gone, no sidecar
        row("sparsemax", 16.0, 3),
        row("sparsemax", 16.0, 2),
        row("entmax15", 16.0, 1, exists=False),  # no seed of it on disk
        row("entmax15", 16.0, 2, exists=False),
    ]
    setup = FigureSetup(experiment, "small", 1, None, None, mappings.gamma_configs())
    panels = figure_panels([], rows, setup, results)
    assert [run["run_id"] for _, run in panels] == ["softmax4.0", "sparsemax16.0s2"]
    assert [run["seed"] for _, run in panels] == [1, 2]
    # the drawn rows' sentences are kept; seed 3 of sparsemax, not drawn, keeps none
    assert results.joinpath(figure_sidecar_name("sparsemax16.0s2", evaluation)).is_file()
    assert not results.joinpath(figure_sidecar_name("sparsemax16.0s3", evaluation)).exists()
    # a later run whose first seed is 2: softmax's seed 2 stands for its cell
    panels = figure_panels([], rows, setup._replace(seed=2), results)
    assert [run["run_id"] for _, run in panels] == ["softmax4.0s2", "sparsemax16.0s2"]

    drawn = {}
    monkeypatch.setattr(
        figures,
        "plot_sentence",
        lambda *args, notes=None, **kwargs: drawn.update(notes=notes) or [],
    )
    paths = [path for path, _ in panels]
    figures.plot_attention_figure(
        tmp_path / "figures", "mixed", paths, runs=[{"seed": 1}, {"seed": 2}]
    )
    assert drawn["notes"] == ["seed 1", "seed 2"]  # seeds differ: each title says its own
    figures.plot_attention_figure(tmp_path / "figures", "same", paths, runs=[{"seed": 1}] * 2)
    assert drawn["notes"] is None


def test_a_mapping_that_takes_no_gamma_joins_every_figure(tmp_path):
    """A run of a mapping whose γ the trainer neither sets nor tunes (a pretrained model's own
    softmax, the attention-free control, learned α) is the same run under every γ mode: its
    panel joins the γ-auto figure beside the tuned cells; a γ-mapping's run at a fixed γ does
    not."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    evaluation = next(iter(experiment_test_sets(experiment)))
    rows = [
        _panel_row(tmp_path, experiment.name, evaluation, "softmax", None, False, 1),
        _panel_row(tmp_path, experiment.name, evaluation, "sparsemax", 16.0, True, 1),
        _panel_row(tmp_path, experiment.name, evaluation, "sparsemax", 1.0, False, 1),
        _panel_row(tmp_path, experiment.name, evaluation, "uniform", None, False, 1),
    ]
    pretrained_like = FigureSetup(experiment, "small", 1, "auto", None, ("sparsemax",))
    panels = figure_panels([], rows, pretrained_like, tmp_path / "results")
    assert [run["run_id"] for _, run in panels] == ["softmaxNone", "sparsemax16.0", "uniformNone"]
    fixed = pretrained_like._replace(gamma="1")
    panels = figure_panels([], rows, fixed, tmp_path / "results")
    assert [run["run_id"] for _, run in panels] == ["softmaxNone", "sparsemax1.0", "uniformNone"]
    # where the trainer tunes softmax too, its untuned run is of another setup
    fairseq_like = pretrained_like._replace(gamma_mappings=("softmax", "sparsemax"))
    panels = figure_panels([], rows, fairseq_like, tmp_path / "results")
    assert [run["run_id"] for _, run in panels] == ["sparsemax16.0", "uniformNone"]


def test_a_panel_title_carries_its_note():
    """`sentence_figure`'s notes go into the panels' titles, after the mapping's label."""
    from regattn_fairseq.experiments.report.attention_plots import sentence_figure

    records = [
        [
            {
                "id": 0,
                "src_tokens": ["a", "b"],
                "tgt_tokens": ["x"],
                "attention": [[0.5, 0.5]],
                "mapping": {"name": name, "params": {}},
            }
        ]
        for name in ("softmax", "sparsemax")
    ]
    figure = sentence_figure(records, "0", notes=["seed 1", "seed 2"])
    assert [ax.get_title() for ax in figure.axes[:2]] == ["softmax (seed 1)", "sparsemax (seed 2)"]
    figure = sentence_figure(records, "0")
    assert [ax.get_title() for ax in figure.axes[:2]] == ["softmax", "sparsemax"]


def test_a_pretrained_encoders_figure_says_it_shows_a_layers_self_attention():
    """An export of a pretrained encoder (a layer's self-attention, mean over heads, as
    score.hf_classify writes it) is titled as such, not as output steps over a source."""
    from regattn_fairseq.experiments.report.attention_plots import sentence_figure

    def records(**where):
        return [
            [
                {
                    "id": 0,
                    "src_tokens": ["a", "b"],
                    "tgt_tokens": ["a", "b"],
                    "attention": [[0.5, 0.5], [1.0, 0.0]],
                    "mapping": {"name": "sparsemax", "params": {}, **where},
                }
            ]
        ]

    figure = sentence_figure(records(layer=5, heads="mean"), "0")
    assert figure.get_suptitle() == (
        "sentence 0: self-attention of layer 6, mean over its heads: each token (rows) over "
        "the pair's tokens (columns)"
    )
    figure = sentence_figure(records(), "0")
    assert "each output step (rows) over the source tokens" in figure.get_suptitle()


def test_a_figure_is_never_replaced_by_one_with_fewer_panels(tmp_path):
    """Rows whose attention is gone (no export, no sidecar) cannot be drawn again: the figure
    that shows them is kept, and the smaller drawing goes to a name of its own."""
    from regattn_fairseq.experiments.report.figures import plot_attention_figure

    figures = tmp_path / "figures"
    softmax = _export(tmp_path / "softmax.jsonl", "softmax", 4.0)
    sparsemax = _export(tmp_path / "sparsemax.jsonl", "sparsemax", 16.0)
    name = "inflection_medium_small_gamma-auto_attention"
    runs = [{"run_id": "r1", "git_commit": "c" * 40}, {"run_id": "r2", "git_commit": "d" * 40}]
    both = plot_attention_figure(figures, name, [softmax, sparsemax], runs=runs)
    assert [p.name for p in both] == [f"{name}_1.png", f"{name}_1.pdf"]
    manifest = json.loads((figures / f"{name}.json").read_text())
    assert manifest["panels"] == ["softmax (γ=4)", "sparsemax (γ=16)"]  # the panel titles
    assert manifest["runs"] == runs  # the figure's provenance
    drawn = both[0].read_bytes()
    alone = plot_attention_figure(figures, name, [sparsemax])
    assert [p.name for p in alone] == [f"{name}_sparsemax_1.png", f"{name}_sparsemax_1.pdf"]
    assert both[0].read_bytes() == drawn  # kept
    assert json.loads((figures / f"{name}.json").read_text()) == manifest
    # a drawing with every panel (and more) replaces it
    entmax = _export(tmp_path / "entmax.jsonl", "entmax15", 16.0)
    again = plot_attention_figure(figures, name, [softmax, sparsemax, entmax])
    assert again == both and len(json.loads((figures / f"{name}.json").read_text())["panels"]) == 3
    # a figure drawn before manifests is kept too: which panels it shows is unknown
    (figures / f"{name}.json").unlink()
    legacy = plot_attention_figure(figures, name, [softmax, sparsemax, entmax])
    assert [p.name for p in legacy][0] == f"{name}_entmax15-softmax-sparsemax_1.png"


def _edge_rule_run(tmp_path, monkeypatch, losses, extend="2", rows=(), seeds=(1, 2)):
    """choose_gamma on the grid 1, 4 for `seeds` with a fake training whose validation loss at
    γ is ``losses[γ]``; returns (the selection, the γ trained in order)."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    argv = [
        "inflection",
        "--scale",
        "smoke",
        "--gamma",
        "auto",
        "--gamma-grid",
        "1,4",
        "--gamma-seeds",
        "first",
    ]
    args = reproduce.parse_args([*argv, "--gamma-grid-extend", extend])
    trained = []

    def fake_train(experiment, scale, mapping, seed, data, run_dir, extra, launch=None):
        gamma = float(extra[-1].split("=")[1])
        trained.append(gamma)
        _selection_log(run_dir, [losses[gamma]])

    monkeypatch.setattr(table_jobs, "train", fake_train)
    selection = gamma_select.choose_gamma(
        _table(spec, args, list(seeds), tmp_path), experiment, data, "sparsemax", rows
    )
    return selection, trained


def test_a_choice_at_the_grid_edge_extends_the_grid_while_the_edge_wins(tmp_path, monkeypatch):
    """The best γ at the grid's largest value: γ x 4 is trained, and again while the new edge
    wins, at most gamma_grid_extend values; the values added are recorded apart from the
    grid (so that choices made on the same grid stay comparable)."""
    losses = {1.0: 3.0, 4.0: 2.0, 16.0: 1.5, 64.0: 1.75, 256.0: 0.5}
    selection, trained = _edge_rule_run(tmp_path / "up", monkeypatch, losses)
    assert trained == [1.0, 4.0, 16.0, 64.0]  # 64 loses to 16: 256 is never trained
    assert selection["grid"] == [1.0, 4.0] and selection["extended"] == [16.0, 64.0]
    assert selection["chosen"] == 16.0 and selection["extend"] == 2
    assert selection["validation"] == {"1.0": 3.0, "4.0": 2.0, "16.0": 1.5, "64.0": 1.75}
    # at the low edge, γ / 4; the cap stops it with the choice still at the edge
    losses = {1.0: 1.0, 4.0: 2.0, 0.25: 0.9, 0.0625: 0.8}
    selection, trained = _edge_rule_run(tmp_path / "down", monkeypatch, losses)
    assert trained == [1.0, 4.0, 0.25, 0.0625]
    assert selection["chosen"] == 0.0625 and selection["extended"] == [0.25, 0.0625]
    # no extension inside the grid, or with --gamma-grid-extend 0
    losses = {1.0: 2.0, 4.0: 1.0}
    assert _edge_rule_run(tmp_path / "off", monkeypatch, losses, "0")[1] == [1.0, 4.0]
    # a tie with the value beyond the edge goes to the grid's value, which ends the extension
    # (else the rule would go on from a γ it does not choose)
    losses = {1.0: 1.0, 4.0: 2.0, 0.25: 1.0}
    selection, trained = _edge_rule_run(tmp_path / "tie", monkeypatch, losses)
    assert trained == [1.0, 4.0, 0.25] and selection["chosen"] == 1.0
    interior = {"1.0": 2, "4.0": 1, "16.0": 3}
    assert gamma_edge.gamma_beyond_edge([1.0, 4.0, 16.0], [], interior, 2) is None


def test_a_recorded_choice_at_the_grid_edge_is_not_reused_until_extended(tmp_path, monkeypatch):
    """A choice recorded before the edge rule, at the grid's edge, is not taken: the grid is
    read again and extended. A choice the rule settles (inside the grid, or recorded with its
    extension) is taken without training."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    argv = [
        "inflection",
        "--scale",
        "smoke",
        "--gamma",
        "auto",
        "--gamma-grid",
        "1,4",
        "--gamma-seeds",
        "first",
    ]
    args = reproduce.parse_args(argv)
    criterion = "best validation loss (min of valid_loss over epochs), mean over seeds"
    base = {"grid": [1.0, 4.0], "criterion": criterion, "seeds": [1]}
    at_edge = {**base, "validation": {"1.0": 3.0, "4.0": 2.0}, "chosen": 4.0}
    inside = {**base, "validation": {"1.0": 1.0, "4.0": 2.0, "0.25": 1.5}, "chosen": 1.0}
    inside["extended"] = [0.25]
    losses = {1.0: 3.0, 4.0: 2.0, 16.0: 1.5, 64.0: 1.75}
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 4.0, at_edge)
    selection, trained = _edge_rule_run(tmp_path, monkeypatch, losses, rows=rows)
    assert trained == [1.0, 4.0, 16.0, 64.0] and selection["chosen"] == 16.0
    # recorded with its extension: settled, taken as it is
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 16.0, selection)
    assert _edge_rule_run(tmp_path, monkeypatch, losses, rows=rows) == (selection, [])
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 1.0, inside)
    assert _edge_rule_run(tmp_path, monkeypatch, losses, rows=rows) == (inside, [])
    assert gamma_edge.selection_settled(at_edge, 0)
    assert not gamma_edge.selection_settled(at_edge, 2)
    # a record whose extension the rule would not make (another cap) is not this choice
    assert not gamma_edge.selection_settled(selection, 1)


def test_seeds_added_later_train_at_the_first_seeds_choice(tmp_path, monkeypatch):
    """--gamma-seeds first means the table's first declared seed: seeds added to a cell later
    (--seeds 4 5) take the choice recorded by seed 1's row, without training a grid (it was
    the first of the seeds run, seed 4, whose grid chose again, possibly another γ)."""
    spec = reproduce.load_config("reproduce", "inflection")
    experiment = spec.experiments[0]
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    args = reproduce.parse_args(
        ["inflection", "--scale", "smoke", "--gamma", "auto", "--gamma-grid", "1,4"]
        + ["--gamma-seeds", "first"]
    )
    criterion = "best validation loss (min of valid_loss over epochs), mean over seeds"
    inside = {"grid": [1.0, 4.0], "criterion": criterion, "seeds": [1], "chosen": 1.0}
    inside |= {"validation": {"1.0": 1.0, "4.0": 2.0, "0.25": 1.5}, "extended": [0.25]}
    rows = _finished_rows_at(spec, experiment, data, args, tmp_path, 1, 1.0, inside)
    losses = {1.0: 3.0, 4.0: 2.0, 16.0: 2.5}
    run = _edge_rule_run(tmp_path, monkeypatch, losses, rows=rows, seeds=[4, 5])
    assert run == (inside, [])
    assert _table(spec, args, [4, 5], tmp_path).selection_seeds == [1]
    # a choice recorded by another experiment's rows (its validation losses are of its own
    # data) is not taken, though this experiment's job at that γ is finished
    own = _finished_rows_at(
        spec, experiment, data, args, tmp_path, 1, 1.0, {**inside, "seeds": [2]}
    )
    other = [{**row, "experiment": "another_experiment", "gamma_selection": inside} for row in own]
    selection, trained = _edge_rule_run(tmp_path, monkeypatch, losses, rows=own + other)
    assert trained and selection != inside
    args.gamma_seeds = "all"
    assert _table(spec, args, [4, 5], tmp_path).selection_seeds == [4, 5]


def test_a_gamma_choice_recorded_at_another_scale_is_not_this_scales(tmp_path):
    """The plan of a mapping whose choice is not settled at this scale: a choice its rows
    record at another scale is neither shown as this scale's nor its epochs and seconds used."""
    spec = reproduce.load_config("reproduce", "nmt")
    args = reproduce.parse_args(["nmt", "--scale", "smoke", "--gamma", "auto"])
    table = _table(spec, args, [1], tmp_path)
    how = gamma_select.SelectionHow([1.0, 4.0], 0, "best valid loss", [1], None, [])
    small = {
        "experiment": "multi30k_en_de",
        "scale": "small",
        "mapping": "sparsemax",
        "seed": 1,
        "evaluation": "test2016",
        "run_id": "r1",
        "config_sha256": "c",
        "date": "2026-11-28",
        "train": {"config": {}, "wall_s": 3600.0, "epochs": 20},
        "gamma_selection": {"chosen": 4.0, **how.matched},
    }
    experiment = spec.experiments[0]
    gamma, note, seconds = gamma_select._grid_left(
        table, experiment, None, "sparsemax", [small], how
    )
    assert (gamma, seconds) == (None, 0.0) and "to be confirmed" not in note
    # at its own scale the same row is the unsettled choice, its epochs and seconds the grid's
    table.args.scale = "small"
    gamma, note, seconds = gamma_select._grid_left(
        table, experiment, None, "sparsemax", [small], how
    )
    assert gamma == 4.0 and "(recorded γ = 4, to be confirmed)" in note
    assert seconds == pytest.approx(2 * 20 * 180.0)


def test_a_continuous_panel_is_named_for_its_density_not_its_discrete_mapping(tmp_path):
    """A continuous run's export records the discrete softmax its density is fitted to; the
    manifest's panels, and the name of a drawing beside a kept figure, say the density, as the
    panel's title does (the continuous table's figure read 'softmax (γ=1)' five times)."""
    from regattn_fairseq.experiments.report.figures import plot_attention_figure

    softmax = _export(tmp_path / "softmax.jsonl", "softmax", 1.0)
    continuous = []
    for density, combine in (("gaussian", "none"), ("truncated_parabola", "sum")):
        path = _export(tmp_path / f"{density}.jsonl", "softmax", 1.0)
        options = {"density": density, "num_basis": 64, "combine": combine}
        records = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "continuous": options}) + "\n" for r in records))
        continuous.append(path)
    figures, name = tmp_path / "figures", "continuous_snli_small_attention"
    plot_attention_figure(figures, name, [softmax, *continuous])
    assert json.loads((figures / f"{name}.json").read_text())["panels"] == [
        "softmax (γ=1)",
        "gaussian density (N=64)",
        "truncated parabola density (N=64) + discrete softmax (γ=1)",
    ]
    fewer = plot_attention_figure(figures, name, continuous)
    assert fewer[0].name == f"{name}_gaussian-truncated_parabola_sum_1.png"
