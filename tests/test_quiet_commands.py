"""Every command's --help prints its usage and nothing else (issue #46): no library's DEBUG or
INFO lines (fairseq configures the root logger when it is imported: `regattn_fairseq.log_levels`
pre-empts it), no Hydra deprecation warnings, on stdout or stderr. Each command runs as a user
runs it, in a process of its own.

Every console script is the `main` of a script in scripts/ (checked below): the two launch the
same function in a fresh interpreter, so the scripts' processes stand for both (a process each
costs several seconds of importing torch and fairseq)."""

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import children
import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
# console script -> "module:function" ([project.scripts])
ENTRY_POINTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
CONSOLE_SCRIPTS = sorted(ENTRY_POINTS)
COMMANDS = {f"scripts/{path.name}": [sys.executable, str(path)] for path in SCRIPTS}
# what a library prints when logging is left at DEBUG or INFO (`logging`'s default format,
# fairseq's and Hydra's), and Hydra's deprecation warnings
NOISE = re.compile(
    r"^(?:DEBUG|INFO)[: ]|\[(?:DEBUG|INFO)\]|\| (?:DEBUG|INFO) \||version_base|ConfigStore schema"
    r"|deprecated in Hydra",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def helps():
    """Every command's --help, run two at a time (each imports torch and fairseq)."""

    def run(argv):
        return children.run([*argv, "--help"], cwd=REPO, timeout=600)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(COMMANDS, pool.map(run, COMMANDS.values()), strict=True))


def test_every_command_is_listed():
    assert len(SCRIPTS) >= 11 and len(CONSOLE_SCRIPTS) >= 6
    for name in CONSOLE_SCRIPTS:
        assert (BIN / name).is_file(), f"{name} is not installed: run `make setup`"


@pytest.mark.parametrize("name", CONSOLE_SCRIPTS)
def test_every_console_script_is_the_main_of_a_script(name):
    """So that the scripts' --help processes below stand for the console scripts too."""
    module, _, function = ENTRY_POINTS[name].partition(":")
    assert function == "main", f"{name} runs {ENTRY_POINTS[name]}, not a module's main"
    wrapped = {
        path.name: re.findall(r"^from ([\w.]+) import main$", path.read_text(), re.M)
        for path in SCRIPTS
    }
    twins = [script for script, modules in wrapped.items() if modules == [module]]
    assert twins, f"{name} ({ENTRY_POINTS[name]}:main) is the main of no script in scripts/"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_prints_only_the_usage(helps, command):
    done = helps[command]
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith("usage:")
    noise = [match.group(0) for match in NOISE.finditer(done.stdout + done.stderr)]
    assert not noise, f"{command} --help printed more than its usage:\n{done.stderr}"
    assert done.stderr == ""
