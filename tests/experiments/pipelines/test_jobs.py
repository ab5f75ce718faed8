"""The one job lifecycle (`pipelines.jobs`): a finished job is skipped without training, asked
again it runs again, a machine that does not score writes nothing; a sweep's jobs trained
together are each locked, and only those not finished are trained and scored."""

from omegaconf import OmegaConf
from rows.test_rigor import SPEC, make_row

from regattn_fairseq.experiments.pipelines import jobs
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.store import load_rows


def _job(tmp_path, seed: int) -> Job:
    row = make_row(seed=seed)
    return Job(
        experiment=OmegaConf.create({"name": row["experiment"]}),
        scale=row["scale"],
        data=None,
        mapping=row["mapping"],
        seed=seed,
        run_dir=tmp_path / "runs" / f"seed{seed}",
        key=(*rowkeys.cell_key(row), seed, rowkeys.row_config_sha256(row)),
        evaluations=(row["evaluation"],),
        label=f"{row['experiment']} {row['mapping']} seed {seed}",
    )


def _scorer(run_ids: list[str]):
    """A score step whose rows are `make_row`'s for the job's seed, with fresh run ids."""

    def score(job: Job, trained) -> list[dict]:
        run_ids.append(f"run{len(run_ids) + 1}")
        return [make_row(seed=job.seed, run_id=run_ids[-1])]

    return score


def test_a_finished_job_is_skipped_and_runs_again_when_asked(tmp_path, capsys):
    results = tmp_path / "results"
    job, trained, run_ids = _job(tmp_path, 1), [], []

    def train(job: Job):
        trained.append(job.seed)
        return "model"

    outputs = jobs.Outputs(SPEC, results, again=False)
    rows = jobs.run_job(job, outputs, train, _scorer(run_ids))
    assert trained == [1] and [r["run_id"] for r in rows] == ["run1"]
    assert "[results] multi30k_en_de sparsemax seed 1: test2016" in capsys.readouterr().out
    # finished: its rows are found, nothing is trained
    rows = jobs.run_job(job, outputs, train, _scorer(run_ids))
    assert trained == [1] and [r["run_id"] for r in rows] == ["run1"]
    out = capsys.readouterr().out
    assert f"[skip] multi30k_en_de sparsemax seed 1: finished (config {job.key[-1]}" in out
    # asked again (--rescore, --retrain): trained and scored again, a second row
    again = jobs.Outputs(SPEC, results, again=True)
    rows = jobs.run_job(job, again, train, _scorer(run_ids))
    assert trained == [1, 1] and [r["run_id"] for r in load_rows(results, "nmt")] == [
        "run1",
        "run2",
    ]


def test_a_machine_that_does_not_score_writes_no_rows(tmp_path):
    results = tmp_path / "results"
    outputs = jobs.Outputs(SPEC, results, again=False)
    assert jobs.run_job(_job(tmp_path, 1), outputs, lambda job: None, _scorer([])) is None
    assert load_rows(results, "nmt") == []


def test_jobs_trained_together_train_and_score_only_the_unfinished(tmp_path, capsys):
    results = tmp_path / "results"
    outputs = jobs.Outputs(SPEC, results, again=False, rerun_hint="--rescore")
    first, second = _job(tmp_path, 1), _job(tmp_path, 2)
    jobs.run_job(first, outputs, lambda job: "model", _scorer(["run0"]))
    handed = []

    def train_all(todo):
        handed.append([job.seed for job in todo])
        return True

    todo = jobs.run_jobs_together([first, second], outputs, train_all, _scorer([]))
    assert [job.seed for job in todo] == [2] and handed == [[2]]
    assert sorted(r["seed"] for r in load_rows(results, "nmt")) == [1, 2]
    assert "[skip] multi30k_en_de sparsemax seed 1: finished" in capsys.readouterr().out
    # every job finished: nothing is trained
    assert jobs.run_jobs_together([first, second], outputs, train_all, _scorer([])) == []
    assert handed == [[2]]
    # a machine that does not score: trained, nothing written
    third = _job(tmp_path, 3)
    assert jobs.run_jobs_together([third], outputs, lambda todo: False, _scorer([])) == [third]
    assert sorted(r["seed"] for r in load_rows(results, "nmt")) == [1, 2]
