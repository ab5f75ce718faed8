"""`slow_tier`: CI's daily half of the slow tests, and the tests of changed modules."""

import datetime
import os

import children
from slow_tier import CI_DEADLINE_ENV, changed_modules, past_ci_deadline, todays_slow_tests

IDS = [f"tests/m{i % 7}.py::test_{i}" for i in range(100)]


def test_two_days_run_every_slow_test_once():
    day = datetime.date(2026, 11, 28)
    first, _ = todays_slow_tests(IDS, day, set())
    second, _ = todays_slow_tests(IDS, day + datetime.timedelta(days=1), set())
    assert not set(first) & set(second) and sorted(first + second) == sorted(IDS)
    assert 30 <= len(first) <= 70  # about half
    again, _ = todays_slow_tests(IDS, day, set())
    assert again == first  # the same day, the same half


def test_a_changed_module_runs_whole_every_day():
    changed = {"tests/m3.py"}
    of_m3 = [nodeid for nodeid in IDS if nodeid.startswith("tests/m3.py::")]
    for offset in range(2):
        day = datetime.date(2026, 11, 28) + datetime.timedelta(days=offset)
        kept, left_out = todays_slow_tests(IDS, day, changed)
        assert set(of_m3) <= set(kept) and sorted(kept + left_out) == sorted(IDS)


def test_changed_modules_are_the_last_days_commits(tmp_path):
    assert changed_modules(tmp_path) == set()  # not a git checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    children.run([*git, "init", "-q"], check=True)
    (tmp_path / "tests").mkdir()
    for name, date in (("test_old.py", "2001-01-01T00:00:00"), ("test_new.py", None)):
        (tmp_path / "tests" / name).write_text("")
        children.run([*git, "add", "."], check=True)
        env = {**os.environ, **({"GIT_COMMITTER_DATE": date} if date else {})}
        children.run([*git, "commit", "-qm", name], env=env, check=True)
    assert changed_modules(tmp_path) == {"tests/test_new.py"}


def test_no_slow_test_starts_after_the_ci_deadline(monkeypatch):
    now = 1_000_000.0
    monkeypatch.setenv(CI_DEADLINE_ENV, str(now - 1))
    assert past_ci_deadline(True, now)
    assert not past_ci_deadline(False, now)  # the default suite is never cut
    monkeypatch.setenv(CI_DEADLINE_ENV, str(now + 3600))
    assert not past_ci_deadline(True, now)  # before the deadline: it runs
    monkeypatch.delenv(CI_DEADLINE_ENV)
    assert not past_ci_deadline(True, now)  # outside CI: no deadline
