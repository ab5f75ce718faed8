"""The default command is the committed recipe: `make reproduce-<table>` with no variables takes
the table's recipe, prints its plan before any training (jobs done and to do, CPU-hours left
from the committed rows' wall times), finds every committed cell done, and prints a progress
line per job."""

import json

import pytest

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.pipelines import fairseq_trainer, plan, reproduce, table_jobs


def test_the_recipe_fills_what_the_command_line_leaves_unset():
    args = reproduce.parse_args(["nmt"])
    assert (args.gamma, args.gamma_seeds, args.gamma_select_epochs, args.threads) == (
        "auto",
        "first",
        3,
        1,
    )
    # the command line wins; γ's options follow only a γ chosen on validation
    args = reproduce.parse_args(["nmt", "--gamma", "4", "--threads", "2"])
    assert (args.gamma, args.gamma_seeds, args.gamma_select_epochs, args.threads) == (
        "4",
        "all",
        None,
        2,
    )
    args = reproduce.parse_args(["nmt", "--gamma-seeds", "all"])
    assert (args.gamma, args.gamma_seeds) == ("auto", "all")
    # no recipe at the smoke scale: the options' own defaults
    args = reproduce.parse_args(["nmt", "--scale", "smoke"])
    assert (args.gamma, args.gamma_seeds, args.threads) == (None, "all", 1)


def test_an_unknown_recipe_key_is_refused():
    spec = reproduce.load_config("reproduce", "nmt")
    spec.recipe.small.gamma_grid = [1, 4]
    args = reproduce.parse_args(["nmt", "--scale", "smoke"])
    args.scale, args.gamma = "small", None
    with pytest.raises(ReproError, match="recipe.small has unknown gamma_grid"):
        plan.apply_recipe(args, spec)


def test_the_plan_finds_every_committed_cell_of_table2_done(tmp_path, monkeypatch, capsys):
    """`make reproduce-table2` on a fresh clone: with no variables, every committed cell's
    job is found done from the committed rows, and only the jobs not committed are left (here
    the attention-free control's seed 3, whose rows the copy leaves out). Nothing is trained:
    the data stand-in has the committed rows' source, and any training or scoring would fail
    the test."""
    results = tmp_path / "results"
    (results / "raw").mkdir(parents=True)
    committed = (RESULTS_DIR / "raw" / "table2.jsonl").read_text().splitlines()
    kept = [
        line
        for line in committed
        if (json.loads(line)["mapping"], json.loads(line)["seed"]) != ("uniform", 3)
    ]
    assert len(kept) < len(committed)  # the committed control has a seed 3 to leave out
    (results / "raw" / "table2.jsonl").write_text("\n".join(kept) + "\n")
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()

    def never(*args, **kwargs):
        raise AssertionError("--plan-only trained or scored")

    monkeypatch.setattr(reproduce, "_prepare", lambda table, experiment: data)
    monkeypatch.setattr(reproduce, "_leave_out_missing_evaluations", lambda *a: None)
    monkeypatch.setattr(table_jobs, "train", never)
    monkeypatch.setattr(reproduce, "run_baselines", never)
    monkeypatch.setattr(fairseq_trainer, "run_table_job", never)
    argv = ["table2", "--plan-only", "--allow-dirty", "--work-dir", str(tmp_path)]
    reproduce.run([*argv, "--results-dir", str(results)])
    out = capsys.readouterr().out
    assert "[recipe] from configs/reproduce/table2.yaml: gamma=auto, gamma_seeds=first" in out
    lines = {
        line.split(":")[0].split()[-1]: line
        for line in out.splitlines()
        if line.startswith("[plan]   summarization ")
    }
    for mapping in ("softmax", "sparsemax", "fusedmax", "oscarmax", "sq_pnorm_max"):
        assert lines[mapping].endswith(f"{mapping}: seeds 1,2,3 done"), lines[mapping]
    assert "seeds 1,2 done; seeds 3 to do (~" in lines["uniform"]
    total = next(line for line in out.splitlines() if line.startswith("[plan] table2"))
    assert "18 jobs, 17 done, 1 to do; estimated" in total and "CPU-hours left" in total


def test_experiments_prepares_and_plans_only_the_experiments_named(tmp_path, monkeypatch, capsys):
    """`EXPERIMENTS=snli make reproduce-continuous`: the continuous table's SNLI half alone,
    its data the only data prepared and its jobs the only ones planned."""
    results = tmp_path / "results"
    (results / "raw").mkdir(parents=True)
    data = type("Prepared", (), {"manifest": {"source": "offline"}, "bin_dir": tmp_path})()
    prepared = []

    def prepare(table, experiment):
        prepared.append(experiment.name)
        return data

    monkeypatch.setattr(reproduce, "_prepare", prepare)
    monkeypatch.setattr(reproduce, "_leave_out_missing_evaluations", lambda *a: None)
    argv = ["continuous", "--experiments", "snli", "--plan-only", "--allow-dirty"]
    reproduce.run([*argv, "--work-dir", str(tmp_path), "--results-dir", str(results)])
    out = capsys.readouterr().out
    assert prepared == ["snli"]
    cells = [line.split()[1] for line in out.splitlines() if line.startswith("[plan]   ")]
    assert set(cells) == {"snli"} and len(cells) == 6, out  # its 6 mappings, nothing else
    assert "[plan] continuous at scale small: 18 jobs, 0 done, 18 to do" in out
    # without the option, both experiments, in the table's order
    args = reproduce.parse_args(["continuous"])
    spec = reproduce.load_config("reproduce", "continuous")
    assert [e.name for e in reproduce.table_experiments(spec, args)] == ["multi30k_en_de", "snli"]


def test_estimates_come_from_converged_runs_and_progress_counts_the_jobs_left(capsys, monkeypatch):
    def row(run_id, mapping, wall, decode, stop="patience"):
        return {
            "run_id": run_id,
            "experiment": "e",
            "scale": "small",
            "data_source": "offline",
            "evaluation": "test",
            "mapping": mapping,
            "seed": int(run_id[-1]),
            "date": "2026-11-28",
            "config_sha256": "c",
            "train": {
                "config": {"model": {}},
                "wall_s": wall,
                "epochs": 10,
                "learning_curve": {"stop": stop},
            },
            "decode": {"wall_s": decode},
        }

    rows = [row("a1", "softmax", 600, 60), row("a2", "softmax", 800, 60)]
    rows.append(row("a3", "softmax", 9000, 60, stop="max_epoch"))  # not converged: not used
    assert plan.estimate_seconds(rows, "small", "e", "softmax") == pytest.approx(760)
    # no uniform run: the experiment's
    assert plan.estimate_seconds(rows, "small", "e", "uniform") == pytest.approx(760)
    rows.append({**row("b1", "uniform", 100, 20), "experiment": "f"})
    # the table's stand-in experiments: the mapping's runs there, else all their runs
    kin = frozenset({"e", "f"})
    assert plan.estimate_seconds(rows, "small", "other", "softmax", kin) == pytest.approx(760)
    assert plan.estimate_seconds(rows, "small", "other", "uniform", kin) == pytest.approx(120)
    assert plan.estimate_seconds(rows, "small", "other", "fusedmax", kin) == pytest.approx(660)
    # an experiment that is no stand-in never estimates another's jobs
    assert plan.estimate_seconds(rows, "small", "other", "softmax", frozenset({"f"})) == 120
    assert plan.estimate_seconds(rows, "small", "other", "softmax") is None
    assert plan.grid_seconds(rows, "small", "other", "softmax", 3, 2) is None
    assert plan.grid_seconds(rows, "small", "other", "uniform", 3, 2, kin) == pytest.approx(60)
    assert plan.estimate_seconds([], "small", "e", "softmax") is None
    # another scale's runs never stand in: a paper-scale job is not a small one's minutes
    assert plan.estimate_seconds(rows, "paper", "e", "softmax") is None
    paper = {**row("p1", "softmax", 90000, 600), "scale": "paper"}
    assert plan.estimate_seconds([*rows, paper], "paper", "e", "softmax") == pytest.approx(90600)
    assert plan.estimate_seconds([*rows, paper], "small", "e", "softmax") == pytest.approx(760)
    assert plan.grid_seconds(rows, "paper", "e", "softmax", 3, 2) is None
    assert plan.grid_seconds([*rows, paper], "paper", "e", "softmax", 3, 2) == pytest.approx(54000)
    jobs = [
        plan.PlannedJob("e", "softmax", 1, True),
        plan.PlannedJob("e", "softmax", 2, False, 600.0),
        plan.PlannedJob("e", "uniform", 1, False, 1200.0),
    ]
    total = plan.print_plan("t", "small", jobs)
    assert total == 1800.0
    clock = iter([0.0, 600.0])  # each job's start
    monkeypatch.setattr(plan.time, "monotonic", lambda: next(clock))
    progress = plan.Progress(jobs, started=0.0)
    progress.start("e", "softmax", 1)  # done: the skip line says so
    progress.start("e", "softmax", 2)
    progress.start("e", "uniform", 1)
    out = capsys.readouterr().out
    assert "[plan] t at scale small: 3 jobs, 1 done, 2 to do; estimated 0.5 CPU-hours" in out
    assert "[plan]   e softmax: seeds 1 done; seeds 2 to do (~10 min each)" in out
    assert "[job 1/2] e softmax seed 2: elapsed 0 min, ETA 30 min\n" in out
    # softmax seed 2 took its estimate: the pace is 1, and the line shows it
    assert (
        "[job 2/2] e uniform seed 1: elapsed 10 min, ETA 20 min (estimates × 1.00, this run's "
        "pace over 1 ended job)" in out
    )


def test_the_eta_scales_the_estimates_by_this_runs_pace(capsys, monkeypatch):
    """Estimates are the committed rows' wall times, made on other machines: on one three times
    faster, the first jobs take a third of their estimates, and the ETA of the rest follows
    (the median of took/estimate over the ended jobs), jobs without an estimate still counted
    at the run's median job."""
    clock = iter([0.0, 1200.0, 2400.0, 6000.0])  # each job's start
    monkeypatch.setattr(plan.time, "monotonic", lambda: next(clock))
    jobs = [
        plan.PlannedJob("e", "softmax", 1, False, 3600.0),
        plan.PlannedJob("e", "softmax", 2, False, 3600.0),
        plan.PlannedJob("e", "uniform", 1, False),  # no estimate
        plan.PlannedJob("e", "uniform", 2, False, 7200.0),
    ]
    progress = plan.Progress(jobs, started=0.0)
    for mapping, seed in (("softmax", 1), ("softmax", 2), ("uniform", 1), ("uniform", 2)):
        progress.start("e", mapping, seed)
    out = capsys.readouterr().out
    # before any job ended: the plain estimates, and the one without is unknown
    assert "[job 1/4] e softmax seed 1: elapsed 0 min, ETA unknown (1 of 4 jobs left" in out
    # softmax seed 1 took 20 min of its 1 h: pace 0.33, so 0.33 × 3 h for the two estimated
    # jobs left, and uniform seed 1 at the median job (20 min)
    assert (
        "[job 2/4] e softmax seed 2: elapsed 20 min, ETA 1.3 h (estimates × 0.33, this run's "
        "pace over 1 ended job; 1 of 3 jobs counted at this run's median job, 20 min)" in out
    )
    # uniform seed 1 (no estimate) took 1 h: no pace from it; uniform seed 2 at 0.33 × 2 h
    assert "[job 4/4] e uniform seed 2: elapsed 1.7 h, ETA 40 min (estimates × 0.33, this " in out


def test_progress_never_leaves_a_job_without_an_estimate_out_of_the_eta(capsys, monkeypatch):
    """A new table's jobs have no estimate: the ETA says so until a job of the run has ended,
    then counts them at the run's median job (before, it summed the known estimates alone)."""
    clock = iter([0.0, 1800.0, 5400.0])  # each job's start
    monkeypatch.setattr(plan.time, "monotonic", lambda: next(clock))
    jobs = [
        plan.PlannedJob("e", "softmax", 1, False),
        plan.PlannedJob("e", "softmax", 2, False),
        plan.PlannedJob("e", "uniform", 1, False, 600.0),
    ]
    progress = plan.Progress(jobs, started=0.0)
    progress.start("e", "softmax", 1)
    progress.start("e", "softmax", 2)
    progress.start("e", "uniform", 1)
    out = capsys.readouterr().out
    assert "[job 1/3] e softmax seed 1: elapsed 0 min, ETA unknown (2 of 3 jobs left" in out
    # softmax seed 1 took 30 min: seed 2 is counted at it, uniform at its estimate
    assert (
        "[job 2/3] e softmax seed 2: elapsed 30 min, ETA 40 min (1 of 2 jobs counted at this "
        "run's median job, 30 min)" in out
    )
    assert "[job 3/3] e uniform seed 1: elapsed 1.5 h, ETA 10 min" in out


def test_a_plan_with_no_estimate_says_so_rather_than_zero_hours(capsys):
    """A table with no converged committed run (e2_transformer has none; continuous only
    unconverged ones) has no estimate: the plan says so, never "0.0 CPU-hours left"."""
    jobs = [plan.PlannedJob("e", "softmax", seed, False) for seed in (1, 2)]
    assert plan.print_plan("t", "small", jobs) == 0.0
    out = capsys.readouterr().out
    assert "2 to do; no estimate yet (neither the table nor another training its model" in out
    assert "[plan]   e softmax: seeds 1,2 to do (no estimate)" in out  # not "~unknown each"
    assert "CPU-hours" not in out


def test_a_table_with_no_converged_run_is_estimated_from_one_that_trains_its_model(
    tmp_path, monkeypatch
):
    """The continuous table's snli trains Table 1's model on Table 1's data: until it has a
    converged run of its own, its jobs are estimated from Table 1's snli runs at the scale, and
    the plan says so. E2's Transformer has no kin: no estimate."""

    def row(table, experiment, mapping, seed, wall, scale="small"):
        return {
            "table": table,
            "run_id": f"{table}-{mapping}-{seed}-{scale}",
            "experiment": experiment,
            "scale": scale,
            "data_source": "offline",
            "evaluation": "test",
            "mapping": mapping,
            "seed": seed,
            "date": "2026-11-28",
            "config_sha256": "c",
            "train": {"config": {}, "wall_s": wall, "learning_curve": {"stop": "patience"}},
            "decode": {"wall_s": 10.0},
        }

    stored = {
        "table1": [
            row("table1", "snli", "softmax", 1, 590.0),
            row("table1", "snli", "softmax", 2, 790.0),
            row("table1", "snli", "sparsemax", 1, 1990.0),
            row("table1", "snli", "softmax", 3, 99990.0, scale="paper"),
        ],
        "nmt": [row("nmt", "multi30k_en_de", "softmax", 1, 3590.0)],
    }
    monkeypatch.setattr(plan, "load_rows", lambda results_dir, table: stored.get(table, []))

    def estimate(table, experiment, mapping, scale="small"):
        spec = reproduce.load_config("reproduce", table)
        args = reproduce.parse_args([table, "--scale", scale])
        run = plan.TableRun(spec, args, [1], list(spec.mappings), tmp_path, tmp_path)
        chosen = next(e for e in spec.experiments if e.name == experiment)
        return run.estimate([], chosen, mapping)

    from_table1 = "estimated from table1's snli runs"
    assert estimate("continuous", "snli", "softmax") == (pytest.approx(700.0), from_table1)
    # a mapping Table 1 has not: any of its mappings' runs
    assert estimate("continuous", "snli", "continuous_softmax") == (
        pytest.approx(800.0),
        from_table1,
    )
    assert estimate("continuous", "multi30k_en_de", "softmax") == (
        pytest.approx(3600.0),
        "estimated from nmt's multi30k_en_de runs",
    )
    assert estimate("e2_transformer", "multi30k_en_de_transformer", "softmax") == (None, "")
    assert estimate("continuous", "snli", "softmax", scale="paper") == (
        pytest.approx(100000.0),
        from_table1,
    )
    # the table's own converged runs come first
    spec = reproduce.load_config("reproduce", "continuous")
    run = plan.TableRun(spec, reproduce.parse_args(["continuous"]), [1], [], tmp_path, tmp_path)
    own = [row("continuous", "snli", "softmax", 1, 290.0)]
    assert run.estimate(own, spec.experiments[1], "softmax") == (pytest.approx(300.0), "")
    # but its snli classifier never estimates its NMT model: the NMT table's runs do (the
    # 5-minute classifier once put 18 converged NMT jobs at 1.6 CPU-hours)
    assert [e.name for e in spec.experiments] == ["multi30k_en_de", "snli"]
    assert run.estimate(own, spec.experiments[0], "softmax") == (
        pytest.approx(3600.0),
        "estimated from nmt's multi30k_en_de runs",
    )


def test_an_experiment_stands_in_for_another_of_its_table_on_the_same_model_and_data():
    def kin(table, experiment):
        spec = reproduce.load_config("reproduce", table)
        chosen = next(e for e in spec.experiments if e.name == experiment)
        return plan.stand_ins(spec, chosen)

    assert kin("inflection", "medium_entmax_output") == {"medium"}
    assert kin("inflection", "medium") == {"medium_entmax_output"}
    assert kin("inflection", "high") == set()  # other data: ten times the pairs
    assert kin("continuous", "multi30k_en_de") == set()
    assert kin("ner", "dutch") == set()
    assert kin("nmt", "iwslt14_de_en") == set()


def test_a_resumed_job_is_kept_out_of_the_pace(monkeypatch, capsys):
    """A job that resumes a cut run takes here only what was left of it: counted in the pace,
    it would read the machine as faster (softmax seed 1, resumed after 5 of 7 epochs, once put
    the pace at 0.22 and the ETA of the 5 jobs left at 3.3 h)."""
    jobs = [plan.PlannedJob("e", "softmax", seed, False, 3600.0) for seed in (1, 2, 3)]
    clock = iter([0.0, 600.0, 4200.0])  # seed 1 resumed: 10 min; seed 2: its full hour
    monkeypatch.setattr(plan.time, "monotonic", lambda: next(clock))
    progress = plan.Progress(jobs, started=0.0)
    progress.start("e", "softmax", 1, resumed=True)
    progress.start("e", "softmax", 2)
    assert progress.paces == [] and progress.durations == []
    progress.start("e", "softmax", 3)
    assert progress.paces == [1.0]
    out = capsys.readouterr().out
    assert "[job 1/3] e softmax seed 1 (resumed: not counted in the pace): elapsed" in out
    assert "[job 2/3] e softmax seed 2: elapsed 10 min, ETA 2.0 h\n" in out


def test_a_run_folder_with_files_is_a_resumed_job(tmp_path):
    assert not plan.has_files(tmp_path / "seed1")
    (tmp_path / "seed1").mkdir()
    assert not plan.has_files(tmp_path / "seed1")
    (tmp_path / "seed1" / "train.log").write_text("{}\n")
    assert plan.has_files(tmp_path / "seed1")
