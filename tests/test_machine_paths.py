"""No committed file names a path of one machine: a script, config or document that does only
works there. Records of runs (results/, besides its scripts) keep the paths they ran with."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# an absolute path into a machine's work, root or home folder (not e.g. a relative `.gpu/work/`)
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|root|home)/")
# results/ holds records of runs (rows, logs, composed configs), which name the folders they
# ran in; its scripts are checked like any other file
RECORDS = "results/"
SCRIPTS = (".sh", ".py")
ALLOWED = {
    # documents the lent GPU machine's own tool folder, which is where it is on every machine
    "scripts/gpu_machine/README.md",
    # the surrogate runs' work folder, as their rows in raw/inflection.jsonl recorded it
    # (valid-losses-rows matches the rows by it)
    "results/gamma1/inflection/run.sh",
}


def machine_paths(path: str, text: str) -> list[str]:
    return [
        f"{path}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]


def test_no_committed_file_names_a_machine_path():
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    found = []
    for path in filter(None, tracked):
        if path in ALLOWED or (path.startswith(RECORDS) and not path.endswith(SCRIPTS)):
            continue
        try:
            text = (REPO / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the work tree
        found += machine_paths(path, text)
    assert not found, "machine paths in committed files:\n" + "\n".join(found)


def test_the_pattern_finds_absolute_machine_paths_only():
    home = "/" + "home"  # spelled in parts, so that this file has none
    assert machine_paths("x", f"PY=${{PY:-{home}/me/.venv/bin/python}}") != []
    assert machine_paths("x", "mv .gpu/prep/data/* .gpu/" + "work/") == []
