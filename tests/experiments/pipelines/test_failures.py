"""Bad input fails fast, with a message naming what is wrong."""

import subprocess
import sys

import children
import pytest

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.config import resolve_data_dir
from regattn_fairseq.experiments.data.prepare import prepare


def reproduce(*args: str) -> subprocess.CompletedProcess:
    return children.run(
        [sys.executable, "scripts/reproduce.py", *args],
        cwd=REPO_ROOT,
        timeout=60,
    )


def test_unknown_mapping_is_named(tmp_path):
    result = reproduce(
        "table2",
        "--scale",
        "smoke",
        "--mappings",
        "softmax",
        "supermax",
        "--work-dir",
        str(tmp_path),
    )
    assert result.returncode != 0
    assert "unknown attention mapping(s) ['supermax']" in result.stderr


def test_wrong_data_dir_is_named(tmp_path):
    missing = tmp_path / "no-such-dir"
    result = reproduce(
        "table1", "--scale", "smoke", "--data-dir", str(missing), "--work-dir", str(tmp_path)
    )
    assert result.returncode != 0
    assert f"DATA_DIR {missing} does not exist" in result.stderr
    with pytest.raises(ReproError, match="no-such-dir"):
        resolve_data_dir(missing)


def test_missing_data_file_is_named(tmp_path):
    data_dir = tmp_path / "data"
    (data_dir / "sigmorphon2018_task1" / "all").mkdir(parents=True)
    (data_dir / "sigmorphon2018_task1" / "LANGUAGES.tsv").write_text(
        "language\tdir\ttrain-low\ttrain-medium\ttrain-high\tdev\ttest(gold)\tcovered-test\n"
        "finnish\tall\t100\t1000\t10000\t1000\t1000\t1000\n"
    )
    with pytest.raises(
        ReproError, match=r"missing data file: .*sigmorphon2018_task1/all/finnish-train-medium"
    ):
        prepare(
            "sigmorphon",
            "smoke",
            data_dir=data_dir,
            work_dir=tmp_path,
            overrides={"languages": ["finnish"]},
        )


def test_training_split_missing_offline_points_to_online(shared_data, tmp_path):
    with pytest.raises(
        ReproError, match="iwslt14: the train split is not available offline.*DATA_SOURCE=online"
    ):
        prepare("iwslt14", "smoke", data_dir=shared_data, source="offline", work_dir=tmp_path)


def test_unknown_scale_is_named(tmp_path):
    result = reproduce("nmt", "--scale", "huge", "--work-dir", str(tmp_path))
    assert result.returncode != 0 and "unknown scale 'huge'" in result.stderr
