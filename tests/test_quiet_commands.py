"""Every command's --help prints its usage and nothing else (issue #46): no library's DEBUG or
INFO lines (fairseq configures the root logger when it is imported: `regattn_fairseq.log_levels`
pre-empts it), no Hydra deprecation warnings, on stdout or stderr. Each command runs as a user
runs it, in a process of its own."""

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import children
import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))
CONSOLE_SCRIPTS = sorted(
    re.findall(r"^(regattn-[\w-]+) = ", (REPO / "pyproject.toml").read_text(), re.MULTILINE)
)
COMMANDS = {
    **{f"scripts/{path.name}": [sys.executable, str(path)] for path in SCRIPTS},
    **{name: [str(BIN / name)] for name in CONSOLE_SCRIPTS},
}
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


@pytest.mark.parametrize("command", COMMANDS)
def test_help_prints_only_the_usage(helps, command):
    done = helps[command]
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith("usage:")
    noise = [match.group(0) for match in NOISE.finditer(done.stdout + done.stderr)]
    assert not noise, f"{command} --help printed more than its usage:\n{done.stderr}"
    assert done.stderr == ""
