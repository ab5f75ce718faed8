"""A fine-tuned table's γ-selection short runs are kept in the results folder as each one ends
(pipelines/short_runs.py), read back instead of trained again, and merged from a worktree."""

import gzip
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from pipelines.test_pipeline_reliability import holding

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.dry_run import DryRun
from regattn_fairseq.experiments.pipelines import pretrained, short_runs
from regattn_fairseq.experiments.pipelines.merge_rows import merge_short_runs
from regattn_fairseq.experiments.train.hf_finetune import LOG_FILE, log_curve

TABLE = "table1_pretrained"
REPO = Path(__file__).resolve().parents[3]


def _table(tmp_path, dry_run=None, retrain=False):
    spec = load_config("reproduce", TABLE)
    args = SimpleNamespace(dry_run=dry_run or DryRun(), retrain=retrain, gamma_grid=None)
    table = SimpleNamespace(spec=spec, args=args, scale="small", results_dir=tmp_path / "results")
    table.run_dir = lambda experiment, data, mapping, seed, gamma=None: (
        tmp_path / "work" / mapping / f"gamma{gamma}" / f"seed{seed}"
    )
    return table, spec.experiments[0]


def _job(table, experiment, gamma=4.0, seed=1):
    data = SimpleNamespace(manifest={"source": "offline"})
    return pretrained._job(table, experiment, data, "oscarmax", seed, gamma, select=True)


def _loss(table, job, model_path):
    loss, _ = pretrained._short_run(table, job, model_path, [], [])
    return loss


class FakeFineTune:
    """`fine_tune` as a finished one-epoch short run leaves its folder: settings and log."""

    def __init__(self, valid_loss=0.6123):
        self.calls, self.valid_loss = 0, valid_loss

    def __call__(self, settings, model_path, train, valid, run_dir, progress):
        self.calls += 1
        (run_dir / "settings.json").write_text(json.dumps(settings.record()))
        record = {"epoch": 1, "train_loss": 0.9, "valid_loss": self.valid_loss}
        log = json.dumps({**record, "valid_accuracy": 74.1}) + "\n"
        (run_dir / LOG_FILE).write_text(log)
        return SimpleNamespace(curve=log_curve(log, settings))


@pytest.fixture
def fake_fine_tune(monkeypatch):
    fake = FakeFineTune()
    monkeypatch.setattr(pretrained, "fine_tune", fake)
    return fake


def test_a_short_run_is_kept_as_it_ends_and_not_trained_again(tmp_path, fake_fine_tune):
    table, experiment = _table(tmp_path)
    job = _job(table, experiment)
    assert _loss(table, job, tmp_path) == 0.6123
    settings = pretrained._settings(job, select=True)
    folder = short_runs.record_dir(table.results_dir, TABLE, job, settings)
    assert folder.parent == table.results_dir / "gamma_grids" / "finetune" / TABLE
    assert folder.name.startswith("snli_minilm-oscarmax-gamma4.0-seed1-")
    kept = json.loads((folder / "settings.json").read_text())
    assert kept["settings"] == settings.record()
    # the provenance is in the same file: the work folder's started.json, whole
    assert kept["provenance"] == json.loads((job.run_dir / "started.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", kept["provenance"]["git_commit"])
    assert sorted(f.name for f in folder.iterdir()) == ["settings.json", "train.log.gz"]
    logged = gzip.decompress((folder / "train.log.gz").read_bytes()).decode()
    assert json.loads(logged)["valid_loss"] == 0.6123
    # the machine is lost: the work folder with it; the kept run is read, not trained again
    for path in sorted((tmp_path / "work").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    assert _loss(table, job, tmp_path) == 0.6123
    assert fake_fine_tune.calls == 1
    # another γ is another short run
    assert _loss(table, _job(table, experiment, gamma=16.0), tmp_path)
    assert fake_fine_tune.calls == 2


def test_a_kept_folder_is_never_replaced(tmp_path, fake_fine_tune):
    table, experiment = _table(tmp_path)
    job = _job(table, experiment)
    _loss(table, job, tmp_path)
    settings = pretrained._settings(job, select=True)
    folder = short_runs.record_dir(table.results_dir, TABLE, job, settings)
    kept = {f.name: f.read_bytes() for f in folder.iterdir()}
    # --retrain trains it again, and leaves what was kept as it was
    again, _ = _table(tmp_path, retrain=True)
    fake_fine_tune.valid_loss = 0.7
    assert _loss(again, job, tmp_path) == 0.7
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == kept
    # so does keeping the retrained run's log (0.7 in the work folder now)
    assert short_runs.keep(table.results_dir, TABLE, job, settings) == folder
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == kept


def test_a_short_run_waited_for_is_read_from_what_its_holder_kept(tmp_path, fake_fine_tune):
    """Two processes choosing the same γ (two workers): the one that waited for a short run's
    lock reads the run its holder trained and kept, and trains nothing."""
    table, experiment = _table(tmp_path)
    job = _job(table, experiment)
    settings = pretrained._settings(job, select=True)
    with holding(job.run_dir, "3"):
        waiting = ThreadPoolExecutor(1).submit(_loss, table, job, tmp_path)
        time.sleep(1)  # it found nothing kept and waits for the lock
        assert not waiting.done()
        # meanwhile the holder trains the run and keeps it, before it lets go of the lock
        pretrained._started(job.run_dir)
        FakeFineTune(valid_loss=0.55)(settings, tmp_path, [], [], job.run_dir, None)
        short_runs.keep(table.results_dir, TABLE, job, settings)
        assert waiting.result(timeout=30) == 0.55
    assert fake_fine_tune.calls == 0


def test_a_dry_runs_short_runs_are_not_kept(tmp_path, fake_fine_tune):
    table, experiment = _table(tmp_path, dry_run=DryRun(max_train=8, max_eval=8, max_update=2))
    _loss(table, _job(table, experiment), tmp_path)
    assert not (table.results_dir / "gamma_grids").exists()


def test_a_kept_folder_of_other_settings_or_an_unfinished_log_is_refused(tmp_path):
    table, experiment = _table(tmp_path)
    job = _job(table, experiment)
    settings = pretrained._settings(job, select=True)
    folder = short_runs.record_dir(table.results_dir, TABLE, job, settings)
    folder.mkdir(parents=True)
    (folder / "train.log.gz").write_bytes(gzip.compress(b""))
    provenance = {"git_commit": "0" * 40, "date": "2026-12-02T00:00:00+00:00"}

    def kept(record):
        (folder / "settings.json").write_text(json.dumps(record))

    kept({"settings": {**settings.record(), "finetune": {"seed": 7}}, "provenance": provenance})
    with pytest.raises(ReproError, match="not the settings of snli_minilm oscarmax γ=4.0"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)
    # the settings alone, as folders were kept before 2026-12-02: the code is unknown
    kept(settings.record())
    with pytest.raises(ReproError, match=r"settings.json: not a kept short run's record"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)
    kept({"settings": settings.record(), "provenance": {"git_commit": None}})
    with pytest.raises(ReproError, match="settings.json: its provenance names no git commit"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)
    kept({"settings": settings.record(), "provenance": None})
    with pytest.raises(ReproError, match="settings.json: its provenance names no git commit"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)
    kept({"settings": settings.record(), "provenance": "0" * 40})
    with pytest.raises(ReproError, match="settings.json: its provenance names no git commit"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)
    # a file cut short: the error names it, not a bare JSONDecodeError
    (folder / "settings.json").write_text(json.dumps({"settings": settings.record()})[:20])
    with pytest.raises(ReproError, match=r"settings.json: not JSON .*cannot be read"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)
    # only the settings part is compared: another machine's provenance is the same run
    kept({"settings": settings.record(), "provenance": provenance})
    with pytest.raises(ReproError, match="the log of an unfinished run"):
        short_runs.recorded(table.results_dir, TABLE, job, settings)


def test_a_run_without_its_provenance_is_not_kept(tmp_path, fake_fine_tune):
    table, experiment = _table(tmp_path)
    job = _job(table, experiment)
    settings = pretrained._settings(job, select=True)
    job.run_dir.mkdir(parents=True)
    fake_fine_tune(settings, tmp_path, [], [], job.run_dir, print)
    with pytest.raises(ReproError, match="started.json: missing"):
        short_runs.keep(table.results_dir, TABLE, job, settings)
    assert not short_runs.record_dir(table.results_dir, TABLE, job, settings).exists()
    assert (job.run_dir / LOG_FILE).is_file()  # the run is still there, to keep once mended


def test_the_gamma_choice_cites_each_short_run_by_folder_and_commit(
    tmp_path, fake_fine_tune, monkeypatch
):
    table, experiment = _table(tmp_path)
    table.selection_seeds = [1]
    monkeypatch.setattr(pretrained, "read_pairs", lambda data, split: [])
    monkeypatch.setattr(pretrained.pretrained_models, "model_dir", lambda model: tmp_path)
    data = SimpleNamespace(manifest={"source": "offline"})
    losses = iter([0.9, 0.6, 0.5, 0.7])  # the grid's order: 0.25, 1, 4, 16

    def fine_tune(settings, *args):
        fake_fine_tune.valid_loss = next(losses)
        return fake_fine_tune(settings, *args)

    monkeypatch.setattr(pretrained, "fine_tune", fine_tune)
    selection = pretrained.choose_gamma(table, experiment, data, "oscarmax")
    assert selection["chosen"] == 4.0
    assert selection["validation"] == {"0.25": 0.9, "1.0": 0.6, "4.0": 0.5, "16.0": 0.7}
    assert set(selection["short_runs"]) == set(selection["validation"])
    for gamma, [cited] in selection["short_runs"].items():
        folder = table.results_dir / short_runs.FOLDER / TABLE / cited["folder"]
        started = json.loads((folder / "settings.json").read_text())["provenance"]
        assert cited["folder"].startswith(f"snli_minilm-oscarmax-gamma{gamma}-seed1-")
        assert cited["git_commit"] == started["git_commit"]
        assert cited["best_valid_loss"] == selection["validation"][gamma]
    # read again from the kept folders, the same choice and the same citations
    monkeypatch.setattr(pretrained, "fine_tune", None)
    assert pretrained.choose_gamma(table, experiment, data, "oscarmax") == selection


def test_every_committed_short_run_is_read_back_with_its_provenance(tmp_path):
    """The committed folders are what the next run reuses: each must match the settings that
    today's code builds for its job, show a finished log, and name the commit that trained it."""
    table, experiment = _table(tmp_path)
    table.results_dir = REPO / "results"
    committed = sorted((table.results_dir / short_runs.FOLDER / TABLE).iterdir())
    assert committed, "no committed short run to check"
    for folder in committed:
        name = re.fullmatch(r"snli_minilm-(\w+)-gamma([\d.]+)-seed(\d+)-[0-9a-f]{12}", folder.name)
        mapping, gamma, seed = name[1], float(name[2]), int(name[3])
        data = SimpleNamespace(manifest={"source": "offline"})
        job = pretrained._job(table, experiment, data, mapping, seed, gamma, select=True)
        settings = pretrained._settings(job, select=True)
        assert short_runs.record_dir(table.results_dir, TABLE, job, settings) == folder
        kept = short_runs.recorded(table.results_dir, TABLE, job, settings)
        assert re.fullmatch(r"[0-9a-f]{40}", kept.citation()["git_commit"])
        assert 0 < kept.best_valid_loss < 2
        assert sorted(f.name for f in folder.iterdir()) == ["settings.json", "train.log.gz"]


def test_kept_short_runs_are_merged_once_and_a_conflict_is_refused(tmp_path, fake_fine_tune):
    table, experiment = _table(tmp_path)
    _loss(table, _job(table, experiment), tmp_path)
    target = tmp_path / "committed"
    [copied] = merge_short_runs(table.results_dir, target, TABLE)
    assert sorted(f.name for f in copied.iterdir()) == ["settings.json", "train.log.gz"]
    assert merge_short_runs(table.results_dir, target, TABLE) == []
    (copied / "train.log.gz").write_bytes(gzip.compress(b"other"))
    with pytest.raises(ReproError, match="exists with other content"):
        merge_short_runs(table.results_dir, target, TABLE)


def test_a_short_run_without_its_provenance_is_not_merged(tmp_path, fake_fine_tune):
    table, experiment = _table(tmp_path)
    _loss(table, _job(table, experiment), tmp_path)
    [kept] = (table.results_dir / short_runs.FOLDER / TABLE).iterdir()
    record = json.loads((kept / "settings.json").read_text())
    (kept / "settings.json").write_text(json.dumps(record["settings"]))  # the provenance lost
    target = tmp_path / "committed"
    with pytest.raises(ReproError, match="not a kept short run's record .*; nothing copied"):
        merge_short_runs(table.results_dir, target, TABLE)
    assert not target.exists()
