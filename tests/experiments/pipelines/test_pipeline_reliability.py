"""Issue #26: prepared data verified before use, one writer per run folder, arguments checked
before any work, interrupts and plugin errors as messages."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import children
import pytest
from data.test_prepare_cache import make_sigmorphon  # the data stage tests' helper
from omegaconf import OmegaConf
from rows.test_rigor import SPEC, make_row

from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core import run_lock
from regattn_fairseq.experiments.data import checksums as data_checksums
from regattn_fairseq.experiments.data import fingerprint as data_fingerprint_module
from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.pipelines import jobs
from regattn_fairseq.experiments.pipelines.prepare_data import main as prepare_data_main
from regattn_fairseq.experiments.pipelines.reproduce import main as reproduce_main
from regattn_fairseq.experiments.pipelines.sweep import main as sweep_main
from regattn_fairseq.experiments.report.views import write_outputs
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.store import DuplicateRow, load_rows
from regattn_fairseq.experiments.train import train as runs

TOY = {"languages": ["toy"]}
# `rowkeys.data_fingerprint` of the toy data (test_prepare_cache.make_sigmorphon) and of
# multi30k at smoke scale, prepared by the code before the checksums (commit 95ab1cd): rows of
# unchanged data keep their fingerprint
FINGERPRINT_BEFORE = {
    "toy": "a9061cc419280ad2aad06fe62b8df1c6706ea1df1c377eeec8ba85979ed52fb1",
    "multi30k": "650937ccd4a1e4629de78edfa80cfc395606528b0dfc65b3bd4d180488fb4f01",
}


def prepare_toy(tmp_path):
    data_dir = tmp_path / "shared"
    if not data_dir.exists():
        make_sigmorphon(data_dir)
    return prepare("sigmorphon", "smoke", data_dir=data_dir, work_dir=tmp_path, overrides=TOY)


def a_bin_file(prepared) -> Path:
    return sorted(prepared.bin_dir.glob("train*.bin"))[0]


# --- checksums of prepared data --------------------------------------------------------------


def test_stamp_records_every_binarized_file_and_dictionary(tmp_path):
    prepared = prepare_toy(tmp_path)
    recorded = prepared.manifest[data_checksums.STAMP_KEY]
    files = {p.relative_to(prepared.bin_dir).as_posix() for p in prepared.bin_dir.iterdir()}
    assert set(recorded) == {f for f in files if f.endswith((".bin", ".idx", ".txt"))}
    assert any(name.startswith("dict") for name in recorded)
    path = a_bin_file(prepared)
    entry = recorded[path.name]
    assert entry["size"] == path.stat().st_size and len(entry["sha256"]) == 64


def test_fingerprint_is_unchanged_for_the_same_data(tmp_path):
    prepared = prepare_toy(tmp_path)
    assert data_checksums.verify(prepared) == FINGERPRINT_BEFORE["toy"]
    assert data_fingerprint_module.data_fingerprint(prepared.bin_dir) == FINGERPRINT_BEFORE["toy"]


def test_multi30k_fingerprint_is_unchanged(shared_data, tmp_path):
    prepared = prepare("multi30k", "smoke", data_dir=shared_data, work_dir=tmp_path)
    assert data_checksums.verify(prepared) == FINGERPRINT_BEFORE["multi30k"]


@pytest.mark.parametrize("damage", ["zeroed", "truncated"])
def test_damaged_prepared_file_is_detected_and_rebuilt(tmp_path, capsys, damage):
    prepared = prepare_toy(tmp_path)
    path = a_bin_file(prepared)
    original = path.read_bytes()
    if damage == "zeroed":  # the same size: only the content hash sees it
        path.write_bytes(bytes(len(original) // 2) + original[len(original) // 2 :])
    else:
        path.write_bytes(original[: len(original) // 2])
    capsys.readouterr()
    rebuilt = prepare_toy(tmp_path)
    out = capsys.readouterr().out
    expected = "content differs" if damage == "zeroed" else f"bytes, recorded {len(original)}"
    assert f"bin/{path.name}: " in out and expected in out, out
    assert "[prepare] building" in out and "is up to date" not in out
    assert path.read_bytes() == original
    assert data_checksums.verify(rebuilt) == FINGERPRINT_BEFORE["toy"]


def test_damaged_file_whose_inputs_are_gone_is_an_error_naming_both(tmp_path):
    prepared = prepare_toy(tmp_path)
    path = a_bin_file(prepared)
    path.write_bytes(path.read_bytes()[:10])
    (tmp_path / "shared" / "sigmorphon2018_task1" / "all" / "toy-dev").unlink()
    with pytest.raises(
        data_checksums.DamagedData,
        match=rf"bin/{path.name}: 10 bytes.*cannot be rebuilt.*toy-dev is gone.*Restore",
    ):
        prepare_toy(tmp_path)
    assert path.is_file()  # nothing deleted: the user decides


def test_no_training_and_no_row_from_damaged_data(tmp_path, monkeypatch):
    prepared = prepare_toy(tmp_path)
    path = a_bin_file(prepared)
    original = path.read_bytes()
    path.write_bytes(bytes(len(original)))  # after prepare() verified it
    monkeypatch.setattr(runs, "run_logged", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(jobs, "evaluate", lambda *a, **k: pytest.fail("decoded"))
    experiment = OmegaConf.create({"name": "toy", "scale_group": "lstm_seq2seq"})
    with pytest.raises(data_checksums.DamagedData, match=rf"bin/{path.name}: content differs"):
        runs.train(experiment, "smoke", "softmax", 1, prepared, tmp_path / "run", [])
    model = runs.TrainedModel(tmp_path / "c.pt", {}, None, None, None, tmp_path / "none")
    experiment = OmegaConf.create({"name": "toy", "test_sets": ["inflection-medium"]})
    job = Job(
        experiment, "smoke", prepared, "softmax", 1, tmp_path, (), ("inflection-medium",), "toy"
    )
    with pytest.raises(data_checksums.DamagedData, match="run the same command again"):
        jobs.score_model(job, model, "t", {}, None)


# --- one writer per run folder ---------------------------------------------------------------

HOLDER = """
import os, sys, time
from pathlib import Path
from regattn_fairseq.experiments.core.run_lock import run_lock
with run_lock(Path(sys.argv[1]), "holder"):
    print("held", flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), 9)
    time.sleep(float(sys.argv[2]))
"""


@contextmanager
def holding(run_dir: Path, how: str) -> Iterator[subprocess.Popen]:
    """A child process that holds `run_dir`'s lock, once it has taken it."""
    command = [sys.executable, "-c", HOLDER, str(run_dir), how]
    with children.started(command, stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout.readline().strip() == "held"
        yield holder


def test_a_second_process_waits_for_the_run_folder(tmp_path, capsys):
    run_dir = tmp_path / "softmax" / "seed1"
    with holding(run_dir, "2") as holder:
        start = time.monotonic()
        with run_lock.run_lock(run_dir, "nmt softmax seed 1") as waited:
            elapsed = time.monotonic() - start
        holder.wait()
    out = capsys.readouterr().out
    assert waited and elapsed > 0.5
    assert f"[wait] nmt softmax seed 1: {run_dir} is locked by pid {holder.pid} on " in out
    assert "taking over" not in out  # the holder released it


def test_a_killed_runs_lock_is_taken_over(tmp_path, capsys):
    run_dir = tmp_path / "softmax" / "seed1"
    with holding(run_dir, "kill") as holder:
        assert holder.wait() == -signal.SIGKILL
    with run_lock.run_lock(run_dir, "nmt softmax seed 1") as waited:
        pass
    out = capsys.readouterr().out
    assert not waited
    assert f"[lock] nmt softmax seed 1: taking over {run_dir} from pid {holder.pid}" in out
    # released cleanly this time: the next holder takes it without a word
    with run_lock.run_lock(run_dir, "again"):
        pass
    assert "taking over" not in capsys.readouterr().out


@contextmanager
def orchestrator_killed_once_echoed(statement: str, path: Path, marker: bytes) -> Iterator[None]:
    """Run `statement` (which calls `run_logged`, with `path` as sys.argv[1]) in a child Python
    and kill that orchestrator as soon as the tool's output shows `marker`; the tool runs on
    until the block is left."""
    script = (
        "import sys; from pathlib import Path\n"
        "from regattn_fairseq.experiments.core.run_lock import run_lock\n"
        "from regattn_fairseq.experiments.core.tools import run_logged\n" + statement
    )
    command = [sys.executable, "-c", script, str(path)]
    with children.started(command, stderr=subprocess.PIPE) as parent:
        for line in parent.stderr:  # run_logged echoes the tool's output on stderr
            if marker in line:
                break
        parent.kill()  # the orchestrator alone: its tool runs on in the group
        parent.wait()
        yield


def test_the_training_process_inherits_the_lock(tmp_path):
    """An orchestrator killed while fairseq trains on leaves the folder locked until the
    training ends (`common.run_logged` passes the lock on)."""
    run_dir = tmp_path / "seed1"
    with orchestrator_killed_once_echoed(
        "with run_lock(Path(sys.argv[1]), 'x'):\n"
        "    run_logged(['sh', '-c', 'echo started; sleep 3'], Path(sys.argv[1]).parent / 'log')\n",
        run_dir,
        b"started",
    ):
        start = time.monotonic()
        with run_lock.run_lock(run_dir, "next") as waited:
            assert waited and time.monotonic() - start > 1


def test_the_training_log_keeps_every_line_when_the_orchestrator_is_killed(tmp_path):
    """A resumed run replays its early stopping and learning curve from train.log, so the lines
    the tool wrote before its orchestrator died must be in it (a block-buffered log lost epoch
    7 of NMT fusedmax seed 2, and one or two epochs of 16 other committed rows' runs)."""
    log = tmp_path / "train.log"
    with orchestrator_killed_once_echoed(
        "run_logged(['sh', '-c', 'echo epoch 1; echo epoch 2; sleep 3'], Path(sys.argv[1]))\n",
        log,
        b"epoch 2",
    ):
        pass
    assert log.read_text().splitlines()[1:] == ["epoch 1", "epoch 2"]


def test_the_row_store_refuses_a_second_row_for_a_finished_job(tmp_path):
    write_outputs(tmp_path, SPEC, [make_row(run_id="first")])
    with pytest.raises(DuplicateRow, match=r"already has a row \(run first\).*RESCORE"):
        write_outputs(tmp_path, SPEC, [make_row(run_id="second")])
    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["first"]
    write_outputs(tmp_path, SPEC, [make_row(run_id="second")], again=True)  # RESCORE / RETRAIN
    write_outputs(tmp_path, SPEC, [make_row(run_id="seed2", seed=2)])  # another job
    assert len(load_rows(tmp_path, "nmt")) == 3


# --- arguments before any work ---------------------------------------------------------------


def reproduce(tmp_path, *args, timeout=120) -> subprocess.CompletedProcess:
    return children.run(
        [sys.executable, "scripts/reproduce.py", *args, "--work-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        timeout=timeout,
    )


def error_lines(stderr: str) -> list[str]:
    """The lines of `stderr` that report an error; the last line must be one of them."""
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    assert errors and lines[-1] == errors[-1], stderr
    return errors


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["table2", "--gamma", "auto", "--gamma-grid", "0"], "γ grid is numbers > 0"),
        (["table2", "--seeds", "a"], "seeds are whole numbers"),
        (["table2", "--threads", "a"], "--threads: must be a whole number >= 1, got 'a'"),
        (["table2", "--gpus", "-1"], "GPUS must be >= 0"),
        (["table2", "--gamma-select-epochs", "0"], "whole number >= 1, got '0'"),
        (["table2", "--scale", "huge"], "unknown scale 'huge'"),
        (["table2", "--mappings", "supermax"], "unknown attention mapping(s) ['supermax']"),
        (
            ["continuous", "--experiments", "imdb"],
            "--experiments imdb: none of continuous's experiments at scale smoke "
            "(multi30k_en_de, snli;",
        ),
        (["table2", "--source", "usb"], "invalid choice: 'usb'"),
        (
            ["table2", "--mappings", "fusedmax", "--override", "model.attention_lambda=-1"],
            "lam must be a finite number >= 0, got -1.0",
        ),
        (
            ["table2", "--mappings", "softmax", "--override", "model.attention_lambda=1"],
            "--attention-lambda (attention_lambda) does not apply to --attention softmax",
        ),
    ],
)
def test_bad_arguments_are_one_line_before_any_work(tmp_path, monkeypatch, capsys, args, named):
    # in this process, through the entry point's own `main` (its error handling included): a
    # process per case would spend its time importing torch and fairseq; the real process is
    # the next test's
    argv = [*args, *([] if "--scale" in args else ["--scale", "smoke"])]
    monkeypatch.setattr(sys, "argv", ["reproduce.py", *argv, "--work-dir", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        reproduce_main()
    stderr = capsys.readouterr().err
    errors = error_lines(stderr)
    assert exited.value.code == 2, stderr
    assert len(errors) == 1 and named in errors[0], stderr
    assert "Traceback" not in stderr and "_seed_list" not in stderr
    assert not (tmp_path / "data").exists()  # refused before any data was built


def test_a_bad_argument_is_one_line_from_the_command_as_a_user_runs_it(tmp_path):
    result = reproduce(tmp_path, "table2", "--seeds", "a", "--scale", "smoke")
    # importing fairseq logs to stderr: the error is the one line that says error, and the last
    errors = error_lines(result.stderr)
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and "seeds are whole numbers" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("main", "target"), [(prepare_data_main, "multi30k"), (sweep_main, "lambda")]
)
def test_prepare_data_and_sweep_refuse_a_bad_scale_in_one_line(monkeypatch, capsys, main, target):
    # in this process, as the bad arguments of reproduce above
    monkeypatch.setattr(sys, "argv", ["script", target, "--scale", "huge"])
    with pytest.raises(SystemExit) as exited:
        main()
    stderr = capsys.readouterr().err
    assert exited.value.code == 2 and len(error_lines(stderr)) == 1, stderr
    assert "huge" in stderr


def test_make_refuses_a_flag_value_it_would_ignore():
    result = children.run(
        ["make", "-n", "reproduce-nmt", "RESCORE=maybe"],
        cwd=REPO_ROOT,
    )
    assert result.returncode == 2 and "RESCORE=maybe" in result.stderr


# --- plugin errors and interrupts --------------------------------------------------------------


def test_invalid_attention_option_to_fairseq_train_is_one_line(tmp_path):
    prepared = prepare_toy(tmp_path)
    result = children.run(
        [
            os.path.join(os.path.dirname(sys.executable), "fairseq-train"),
            str(prepared.bin_dir),
            "--user-dir",
            str(REPO_ROOT / "regattn_fairseq"),
            "--arch",
            "regattn_lstm",
            "--attention",
            "fusedmax",
            "--attention-lambda",
            "-1",
            "--cpu",
            "--batch-size",
            "8",
            "--max-epoch",
            "1",
            "--save-dir",
            str(tmp_path / "checkpoints"),
        ],
        timeout=300,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert error_lines(result.stderr) == [
        "fairseq-train: error: invalid attention options for --attention fusedmax "
        "(--attention-lambda (attention_lambda)=-1.0): lam must be a finite number >= 0, "
        "got -1.0"
    ]


def interrupt_once_training(command: list[str], work_dir: Path) -> subprocess.CompletedProcess:
    """Start `command`, send SIGINT to its process group (Ctrl-C) once it trains. Its stderr
    goes to a file: stdout, read here, is its only pipe."""
    errors = work_dir / "reproduce.stderr"
    with (
        open(errors, "w") as sink,
        children.started(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=sink, text=True
        ) as process,
    ):
        for line in process.stdout:
            if line.startswith("[train]"):
                break
        # as soon as fairseq has started (its log exists): a smoke training may finish in
        # seconds, so the interrupt can land in training or in the scoring right after it
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and next(work_dir.rglob("train.log"), None) is None:
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        stdout, _ = process.communicate(timeout=120)
    return subprocess.CompletedProcess(command, process.returncode, stdout, errors.read_text())


@pytest.mark.slow
def test_ctrl_c_says_where_it_stopped_and_how_to_resume(shared_data, tmp_path):
    command = [
        sys.executable,
        "scripts/reproduce.py",
        "nmt",
        "--scale",
        "smoke",
        "--mappings",
        "softmax",
        "--data-dir",
        str(shared_data),
        "--work-dir",
        str(tmp_path),
        "--results-dir",
        str(tmp_path / "results"),
    ]
    result = interrupt_once_training(command, tmp_path)
    assert result.returncode == 130, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert re.search(r"interrupted while (training|scoring) \S+ softmax seed 1 ", result.stderr)
    assert "to resume, run the same command again" in result.stderr
    assert "scripts/reproduce.py nmt --scale smoke --mappings softmax" in result.stderr
    # the baseline was scored before training; no row of the interrupted softmax job
    raw = tmp_path / "results" / "raw" / "nmt.jsonl"
    assert not raw.exists() or '"mapping": "softmax"' not in raw.read_text()
    # resuming is right: the same command finishes the job, one row per cell
    resumed = children.run(command, cwd=REPO_ROOT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = load_rows(tmp_path / "results", "nmt")
    assert len({rowkeys.row_key(row) for row in rows}) == len(rows) > 0


def nmt_smoke_command(shared_data: Path, tmp_path: Path, *options: str) -> list[str]:
    """`scripts/reproduce.py nmt --scale smoke` on softmax and sparsemax with `options`, its
    work and results in `tmp_path`."""
    return [
        sys.executable,
        "scripts/reproduce.py",
        "nmt",
        "--scale",
        "smoke",
        "--mappings",
        "softmax",
        "sparsemax",
        *options,
        "--data-dir",
        str(shared_data),
        "--work-dir",
        str(tmp_path),
        "--results-dir",
        str(tmp_path / "results"),
    ]


@pytest.mark.slow
def test_two_identical_tables_at_once_write_one_row_per_cell(shared_data, tmp_path):
    command = nmt_smoke_command(shared_data, tmp_path)
    # output to files: one process blocked on a full pipe, holding the locks, blocks the other
    logs = [tmp_path / f"reproduce{i}.log" for i in range(2)]
    with contextlib.ExitStack() as running:
        processes = [
            running.enter_context(children.started(command, cwd=REPO_ROOT, output=log))
            for log in logs
        ]
        for process, log in zip(processes, logs, strict=True):
            process.wait(timeout=900)
            assert process.returncode == 0, log.read_text()[-3000:]
    rows = load_rows(tmp_path / "results", "nmt")
    keys = [rowkeys.row_key(row) for row in rows]
    # one row per cell: the two mappings and the table's baseline (scored before training)
    assert len(keys) == len(set(keys)) and {row["mapping"] for row in rows} == {
        "baseline: copy source",
        "softmax",
        "sparsemax",
    }
    joined = "".join(log.read_text() for log in logs)
    assert "[wait]" in joined and "[skip]" in joined
    raw = (tmp_path / "results" / "raw" / "nmt.jsonl").read_text().splitlines()
    assert len(raw) == len(rows) and all(json.loads(line)["run_id"] for line in raw)
