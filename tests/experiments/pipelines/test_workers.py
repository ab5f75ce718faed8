"""Processes sharing a table's jobs (`--workers`, `pipelines.workers`): a job whose folder
another process holds is left to it in a first pass (`run_lock(wait=False)`, `run_job(share=True)`)
and waited for in the second; the first worker starts the others and fails, naming the log,
when one of them fails; the options that would train a job twice are refused."""

import contextlib
import os
import sys
from types import SimpleNamespace

import children
import pytest
from omegaconf import OmegaConf
from pipelines.test_jobs import _job, _scorer
from pipelines.test_pipeline_reliability import holding, nmt_smoke_command
from pipelines.test_short_runs import FakeFineTune
from pipelines.test_short_runs import _table as short_run_table
from rows.test_rigor import SPEC

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core import run_lock
from regattn_fairseq.experiments.pipelines import fairseq_trainer, jobs, plan, pretrained, workers
from regattn_fairseq.experiments.pipelines.reproduce import parse_args
from regattn_fairseq.experiments.pipelines.table_jobs import MappingSetup
from regattn_fairseq.experiments.rows.store import load_rows


def test_a_held_folder_is_claimed_by_no_one_else(tmp_path, capsys):
    run_dir = tmp_path / "softmax" / "seed1"
    with holding(run_dir, "5") as holder:
        with run_lock.run_lock(run_dir, "nmt softmax seed 1", wait=False) as waited:
            assert waited is None  # held elsewhere: left to its holder
            assert run_lock.inherited_fds() == ()  # nothing held
        holder.kill()
    out = capsys.readouterr().out
    assert f"[share] nmt softmax seed 1: {run_dir} is run by pid {holder.pid} on " in out
    # free now (its holder was killed): taken, held as a waiting run_lock holds it, released
    with run_lock.run_lock(run_dir, "nmt softmax seed 1", wait=False) as waited:
        assert waited is False and len(run_lock.inherited_fds()) == 1
        said = capsys.readouterr().out  # the killed holder's record is taken over, and said
        assert f"[lock] nmt softmax seed 1: taking over {run_dir} from pid {holder.pid}" in said
        # a second try, from another open file of this same process, finds it held by this one
        with run_lock.run_lock(run_dir, "again", wait=False) as other:
            assert other is None
        assert f"[share] again: {run_dir} is run by pid {os.getpid()} on " in (
            capsys.readouterr().out
        )
    assert run_lock.inherited_fds() == ()
    with run_lock.run_lock(run_dir, "once more", wait=False) as waited:
        assert waited is False


def test_a_shared_job_held_elsewhere_is_left_then_trained_once_free(tmp_path):
    results = tmp_path / "results"
    job, trained, begun = _job(tmp_path, 1), [], []
    outputs = jobs.Outputs(SPEC, results, again=False)

    def train(job):
        trained.append(job.seed)
        return "model"

    with run_lock.run_lock(job.run_dir, "the other worker"):
        result = jobs.run_job(job, outputs, train, _scorer([]), share=True, started=begun.append)
    assert result is jobs.HELD_ELSEWHERE and trained == [] and begun == []
    rows = jobs.run_job(job, outputs, train, _scorer([]), share=True, started=begun.append)
    assert trained == [1] and begun == [job] and len(rows) == 1
    # finished: skipped, sharing or not, with no progress line
    for share in (True, False):
        jobs.run_job(job, outputs, train, _scorer([]), share=share, started=begun.append)
    assert trained == [1] and begun == [job] and len(load_rows(results, "nmt")) == 1


def test_progress_lines_come_from_the_jobs_that_train(tmp_path, capsys):
    planned = [plan.PlannedJob("e", "softmax", seed, False, 3600.0, "") for seed in (1, 2)]
    progress = plan.Progress(planned, started=0.0, workers=2)
    job = SimpleNamespace(
        experiment=OmegaConf.create({"name": "e"}),
        mapping="softmax",
        seed=2,
        run_dir=tmp_path / "seed2",
    )
    progress.starting(job)
    line = capsys.readouterr().out
    # the job's place in the plan; the jobs left, over the workers sharing them
    assert line.startswith("[job 2/2] e softmax seed 2: elapsed ")
    assert "ETA 30 min (shared by 2 workers)" in line


def test_the_plan_says_how_long_the_workers_take_together(capsys):
    planned = [plan.PlannedJob("e", "softmax", seed, False, 7200.0, "") for seed in (1, 2)]
    plan.print_plan("nmt", "small", planned, workers=2)
    first = capsys.readouterr().out.splitlines()[0]
    assert "estimated 4.0 CPU-hours left" in first and first.endswith("about 2.0 h for 2 workers")
    plan.print_plan("nmt", "small", planned)
    assert "workers" not in capsys.readouterr().out


def _table(tmp_path, gamma=None):
    args = SimpleNamespace(workers=2, gamma=gamma)
    return SimpleNamespace(
        args=args, seeds=[1, 2], mappings_of=lambda e: ["softmax", "sparsemax"], rows=list
    )


def test_a_worker_trains_the_free_jobs_first_then_waits_for_the_rest(tmp_path, monkeypatch):
    calls = []

    def run_table_job(table, experiment, data, setup, seed, share=False, started=None):
        calls.append((setup.mapping, seed, share))

    def mapping_setup(table, experiment, data, mapping):
        setups.append(mapping)
        return MappingSetup(mapping, None, None)

    setups = []
    monkeypatch.setattr(fairseq_trainer, "run_table_job", run_table_job)
    monkeypatch.setattr(fairseq_trainer, "mapping_setup", mapping_setup)
    fairseq_trainer.run_experiment(_table(tmp_path), None, None)
    every = [(m, s) for m in ("softmax", "sparsemax") for s in (1, 2)]
    assert calls == [(*job, True) for job in every] + [(*job, False) for job in every]
    # each mapping's setup (its γ choice) is made once, in the first pass, not again
    assert setups == ["softmax", "sparsemax"]


def test_a_mapping_whose_grid_another_worker_holds_waits_for_the_second_pass(tmp_path, monkeypatch):
    calls, grids = [], []

    def run_table_job(table, experiment, data, setup, seed, share=False, started=None):
        calls.append((setup.mapping, seed, share))

    def train_free_grid_runs(table, experiment, data, mapping, rows=()):
        grids.append(mapping)
        return mapping != "sparsemax"  # part of sparsemax's grid is held elsewhere

    def mapping_setup(table, experiment, data, mapping):
        setups.append(mapping)
        return MappingSetup(mapping, 1.0, None)

    setups = []
    monkeypatch.setattr(fairseq_trainer, "run_table_job", run_table_job)
    monkeypatch.setattr(fairseq_trainer, "train_free_grid_runs", train_free_grid_runs)
    monkeypatch.setattr(fairseq_trainer, "mapping_setup", mapping_setup)
    monkeypatch.setattr(fairseq_trainer, "GAMMA_MAPPINGS", {"sparsemax": None})
    fairseq_trainer.run_experiment(_table(tmp_path, gamma="auto"), None, None)
    assert grids == ["sparsemax"]  # softmax takes no γ
    first = [("softmax", 1, True), ("softmax", 2, True)]
    second = [(m, s, False) for m in ("softmax", "sparsemax") for s in (1, 2)]
    assert calls == first + second
    assert setups == ["softmax", "sparsemax"]  # sparsemax's choice: in the second pass only


@pytest.mark.parametrize("free", [True, False])
def test_a_pretrained_worker_chooses_a_gamma_in_the_first_pass_once_its_short_runs_are_in(
    tmp_path, monkeypatch, free
):
    calls, short_runs = [], []

    def run_job(job, outputs, train, score, share=False, started=None):
        calls.append((job.mapping, job.seed, share))
        return [{"attention": {}}]

    def gamma_of(table, experiment, data, mapping, choose):
        # sparsemax's γ is chosen on short runs (none recorded): only when asked to choose
        return (4.0, {"chosen": 4.0}) if mapping == "softmax" or choose else (None, None)

    def train_free_short_runs(table, experiment, data, mapping, model_path, splits):
        short_runs.append(mapping)
        return free  # False: one of them is another worker's

    monkeypatch.setattr(pretrained, "run_job", run_job)
    monkeypatch.setattr(pretrained, "gamma_of", gamma_of)
    monkeypatch.setattr(pretrained, "_train_free_short_runs", train_free_short_runs)
    monkeypatch.setattr(pretrained, "GAMMA_MAPPINGS", {"sparsemax": None})
    monkeypatch.setattr(pretrained, "pinned_model", lambda experiment: None)
    monkeypatch.setattr(pretrained.pretrained_models, "model_dir", lambda pinned: tmp_path)
    monkeypatch.setattr(pretrained, "read_pairs", lambda data, split: [])
    monkeypatch.setattr(pretrained, "table_outputs", lambda table: None)
    monkeypatch.setattr(
        pretrained,
        "_job",
        lambda t, e, d, mapping, seed, g, s=None: SimpleNamespace(mapping=mapping, seed=seed),
    )
    pretrained.run_experiment(_table(tmp_path, gamma="auto"), None, None)
    assert short_runs == ["sparsemax"]  # softmax takes no γ
    claimed = ("softmax", "sparsemax") if free else ("softmax",)
    first = [(m, s, True) for m in claimed for s in (1, 2)]
    second = [(m, s, False) for m in ("softmax", "sparsemax") for s in (1, 2)]
    assert calls == first + second


def test_a_short_run_another_worker_holds_is_left_to_it(tmp_path, monkeypatch):
    table, experiment = short_run_table(tmp_path)
    data = SimpleNamespace(manifest={"source": "offline"})
    job = pretrained._job(table, experiment, data, "oscarmax", 1, 4.0, select=True)
    monkeypatch.setattr(pretrained, "fine_tune", FakeFineTune())
    with run_lock.run_lock(job.run_dir, "the other worker"):
        assert pretrained._short_run(table, job, tmp_path, [], [], share=True) is None
    assert pretrained._short_run(table, job, tmp_path, [], [], share=True)[0] == 0.6123
    assert pretrained.fine_tune.calls == 1


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--retrain"], "--retrain"),
        (["--rescore"], "--rescore"),
        (["--baselines-only"], "--baselines-only"),
        (["--gpus", "1"], "--gpus"),
        (["--cpu-processes", "2"], "--cpu-processes"),
    ],
)
def test_workers_refuse_the_options_that_would_run_a_job_twice(capsys, extra, named):
    with pytest.raises(SystemExit):
        parse_args(["nmt", "--workers", "2", *extra])
    assert f"--workers 2 cannot be combined with {named}" in capsys.readouterr().err


def test_a_worker_number_beyond_the_workers_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["nmt", "--workers", "2", "--worker", "2"])
    assert "--worker 2 is not one of the 2 workers" in capsys.readouterr().err


def _python(code: str):
    return lambda argv, number: [sys.executable, "-c", code, str(number)]


def test_the_first_worker_starts_the_others_and_waits_for_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(workers, "worker_command", _python("import sys; print('hi', sys.argv[1])"))
    with workers.other_workers([], 3, tmp_path, "nmt", "small") as started:
        assert [w.number for w in started] == [1, 2]
    for number in (1, 2):
        log = workers.worker_log(tmp_path, "nmt", "small", number).read_text()
        assert log.startswith(f"--- worker {number} of 3, started ") and f"hi {number}" in log
    assert "[workers] 3 workers share the jobs: this process (worker 0) and worker 1: pid" in (
        capsys.readouterr().out
    )
    with workers.other_workers([], 1, tmp_path, "nmt", "small") as started:
        assert started == []  # one worker: no other process


def test_a_failed_worker_fails_the_first_naming_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "worker_command", _python("raise SystemExit(3)"))
    log = workers.worker_log(tmp_path, "nmt", "small", 1)
    with pytest.raises(ReproError, match=f"worker 1 exited with status 3: see {log}"):
        with workers.other_workers([], 2, tmp_path, "nmt", "small"):
            pass
    # the first worker's own error is the one raised; the other's failure is said
    with pytest.raises(ValueError, match="its own"):
        with workers.other_workers([], 2, tmp_path, "nmt", "small"):
            raise ValueError("its own")


def test_the_workers_command_is_this_command_told_its_number():
    command = workers.worker_command(["nmt", "--workers", "2"], 1)
    assert command[1:] == [
        "-m",
        "regattn_fairseq.experiments.pipelines.reproduce",
        "nmt",
        "--workers",
        "2",
        "--worker",
        "1",
    ]
    # the module runs its command line as scripts/reproduce.py does
    result = children.run([*command[:3], "--help"], cwd=REPO_ROOT)
    assert result.returncode == 0 and "--workers" in result.stdout


@pytest.mark.slow
def test_two_workers_train_each_job_once(shared_data, tmp_path):
    command = nmt_smoke_command(shared_data, tmp_path, "--seeds", "1", "2", "--workers", "2")
    log = tmp_path / "worker0.log"
    with contextlib.ExitStack() as running:
        process = running.enter_context(children.started(command, cwd=REPO_ROOT, output=log))
        process.wait(timeout=900)
    first = log.read_text()
    assert process.returncode == 0, first[-3000:]
    other = workers.worker_log(tmp_path, "nmt", "smoke", 1).read_text()
    # every job trained once, and by both workers between them
    started = [line for text in (first, other) for line in text.splitlines() if "[job " in line]
    assert len(started) == 4 and "[job " in first and "[job " in other, (first, other)
    rows = load_rows(tmp_path / "results", "nmt")
    cells = {(row["mapping"], row["seed"]) for row in rows}
    assert len(rows) == len(cells) == 5  # four jobs and the table's baseline, once each
    assert "[workers] 2 workers share the jobs" in first
