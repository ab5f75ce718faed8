"""The row files survive a crash mid-write and a full disk, and a bad line is named (issue #46):
a torn last line is moved aside by the next append (which lands whole), a writer killed in the
middle of its write leaves nothing the next run trips on, a corrupted line is an error naming
the file, the line and the way out (one line from the commands, never a traceback), and a
write that the disk refuses leaves the earlier rows as they were."""

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap

import children
import pytest
from rows.test_rigor import make_row

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.report.views import regenerate, write_outputs
from regattn_fairseq.experiments.rows.store import append_rows, load_rows, raw_file

TORN = b'{"row_version": 2, "experiment": "snli", "scale": "sm'


def _two_rows(results):
    """A table with two whole rows; returns its raw file and its bytes."""
    append_rows(results, "nmt", [make_row(run_id="one"), make_row(run_id="two", seed=2)])
    raw = raw_file(results, "nmt")
    return raw, raw.read_bytes()


def _quarantined(raw):
    return sorted(raw.parent.glob(f"{raw.name}.torn-*"))


def test_a_torn_last_line_is_moved_aside_and_the_next_row_lands_whole(tmp_path, capsys):
    raw, before = _two_rows(tmp_path)
    with open(raw, "ab") as handle:  # what a writer killed mid-row, or a full disk, leaves
        handle.write(TORN)
    # readers leave the torn text out (it never was a row), with a warning
    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["one", "two"]
    assert "torn last line" in capsys.readouterr().err

    write_outputs(tmp_path, load_config("reproduce", "nmt"), [make_row(run_id="three", seed=3)])

    assert raw.read_bytes().startswith(before)
    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["one", "two", "three"]
    [quarantine] = _quarantined(raw)
    assert quarantine.read_bytes() == TORN
    warning = capsys.readouterr().err
    assert str(raw) in warning and str(quarantine) in warning
    # the report runs on the repaired file
    assert regenerate(tmp_path, ["nmt"]) == [tmp_path / "nmt.md"]
    assert (tmp_path / "nmt.md").read_text().count("| multi30k_en_de |") >= 1


def test_a_whole_last_row_without_its_line_end_is_kept(tmp_path):
    raw, before = _two_rows(tmp_path)
    raw.write_bytes(before.rstrip(b"\n"))  # e.g. an editor that drops the final newline
    append_rows(tmp_path, "nmt", [make_row(run_id="three", seed=3)])
    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["one", "two", "three"]
    assert not _quarantined(raw)


# a child that appends one row with the store's own code and is killed half way through its
# write: its os.write writes half the bytes, says so, and waits for the SIGKILL
KILLED_MID_WRITE = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from regattn_fairseq.experiments.rows import store

    real_write = os.write
    def half_then_wait(handle, data):
        real_write(handle, bytes(data[: len(data) // 2]))
        print("written", flush=True)
        time.sleep(600)
    os.write = half_then_wait
    store.append_rows(Path(sys.argv[1]), "nmt", [json.loads(sys.argv[2])])
    """
)


def test_a_writer_killed_mid_write_costs_no_row(tmp_path):
    raw, before = _two_rows(tmp_path)
    writer = [
        sys.executable,
        "-c",
        KILLED_MID_WRITE,
        str(tmp_path),
        json.dumps(make_row(run_id="x")),
    ]
    # killed as the block is left, once it has written half a row
    with children.started(writer, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout.readline() == "written\n"
    assert child.returncode == -signal.SIGKILL
    torn = raw.read_bytes()[len(before) :]
    assert torn and not torn.endswith(b"\n")  # the child really died mid-row

    write_outputs(tmp_path, load_config("reproduce", "nmt"), [make_row(run_id="next", seed=3)])

    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["one", "two", "next"]
    [quarantine] = _quarantined(raw)
    assert quarantine.read_bytes() == torn


def test_a_corrupted_middle_line_is_named_with_the_way_out(tmp_path):
    raw, before = _two_rows(tmp_path)
    append_rows(tmp_path, "nmt", [make_row(run_id="three", seed=3)])
    lines = raw.read_bytes().split(b"\n")
    lines[1] = lines[1][:100]  # the middle row cut short
    raw.write_bytes(b"\n".join(lines))
    with pytest.raises(ReproError) as caught:
        load_rows(tmp_path, "nmt")
    message = str(caught.value)
    assert f"{raw}, line 2: not valid JSON" in message
    assert repr(lines[1][:80].decode())[1:-1] in message  # the line's first characters
    assert f"git -C {raw.parent} checkout HEAD -- {raw.name}" in message
    assert f"sed -i '2d' {raw}" in message
    assert "\n" not in message


def test_a_row_without_its_fields_is_named(tmp_path):
    raw, _ = _two_rows(tmp_path)
    with open(raw, "a") as handle:
        handle.write(json.dumps({"run_id": "stray", "metrics": {}}) + "\n")
    with pytest.raises(ReproError, match=r"line 3: not a result row: no 'table', 'experiment'"):
        load_rows(tmp_path, "nmt")


COMMANDS = {
    "views": [sys.executable, "-m", "regattn_fairseq.experiments.report.views", "--results-dir"],
    "summary": [
        sys.executable,
        "-m",
        "regattn_fairseq.experiments.report.summary",
        "--readme",
        os.devnull,
        "--results-dir",
    ],
    "rerun_row": [sys.executable, "scripts/rerun_row.py", "--no-record", "RAW", "one"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_the_commands_say_which_line_is_bad_in_one_line(tmp_path, command):
    raw, before = _two_rows(tmp_path)
    raw.write_bytes(before.replace(b'"run_id": "two"', b'"run_id": two"'))
    argv = [str(raw) if arg == "RAW" else arg for arg in COMMANDS[command]]
    if argv[-1] == "--results-dir":
        argv.append(str(tmp_path))
    done = children.run(argv, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {raw}, line 2: not valid JSON")
    assert raw.read_bytes() == before.replace(b'"run_id": "two"', b'"run_id": two"')


# a child that appends a row under a file-size limit just above the file's size (a full disk
# as `ulimit -f` makes it; SIGXFSZ ignored, so that the write fails with EFBIG instead)
FULL_DISK = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from regattn_fairseq.experiments.core.cli import run_main
    from regattn_fairseq.experiments.rows import store

    run_main(lambda: store.append_rows(Path(sys.argv[1]), "nmt", [json.loads(sys.argv[2])]))
    """
)


def test_a_full_disk_is_a_clear_error_and_the_rows_stay_intact(tmp_path):
    raw, before = _two_rows(tmp_path)

    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 100, len(before) + 100))

    row = make_row(run_id="big", seed=3, notes="x" * 5000)
    done = children.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path), json.dumps(row)],
        preexec_fn=limit_file_size,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {raw}: could not append 1 record(s): File too large")
    assert raw.read_bytes() == before
    assert [row["run_id"] for row in load_rows(tmp_path, "nmt")] == ["one", "two"]
