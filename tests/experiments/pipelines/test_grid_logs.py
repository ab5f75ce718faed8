"""The committed γ-grid logs go back where a table run reads them (pipelines.grid_logs)."""

import pytest

from regattn_checkout.paths import RESULTS_DIR
from regattn_fairseq.experiments.pipelines.gamma_select import (
    _selection_curve,
    _selection_run_finished,
)
from regattn_fairseq.experiments.pipelines.grid_logs import restore, selection_run_dir

GRIDS = RESULTS_DIR / "gamma_grids"


def test_selection_run_dir_reroots_the_save_dir(tmp_path):
    config = {
        "checkpoint": {
            "save_dir": "/elsewhere/gpu-work/checkpoints/nmt/multi30k_en_de/small-offline/"
            "fusedmax/gamma16.0/seed1-select3epochs/checkpoints"
        }
    }
    assert selection_run_dir(config, tmp_path) == (
        tmp_path
        / "checkpoints/nmt/multi30k_en_de/small-offline/fusedmax/gamma16.0/seed1-select3epochs"
    )


@pytest.mark.parametrize(
    "save_dir",
    [
        "/w/checkpoints/nmt/multi30k_en_de/small-offline/fusedmax/gamma16.0/seed1/checkpoints",
        "/w/runs/nmt/fusedmax/seed1-select3epochs/checkpoints",
    ],
)
def test_selection_run_dir_refuses_other_runs(tmp_path, save_dir):
    with pytest.raises(ValueError, match="save_dir"):
        selection_run_dir({"checkpoint": {"save_dir": save_dir}}, tmp_path)


def test_restored_logs_are_read_as_finished_selection_runs(tmp_path):
    done = restore(GRIDS, tmp_path, ["nmt"])
    assert done["written"] and not done["kept"]
    # the H200 batch trained NMT sq-pnorm-max γ = 64 again: the H100's is used
    assert any(run.name == "nmt-sq_pnorm_max-gamma64.0" for run in done["duplicates"])
    runs = tmp_path / "checkpoints/nmt/multi30k_en_de/small-offline"
    gamma64 = runs / "sq_pnorm_max/gamma64.0/seed1-select3epochs"
    gamma256 = runs / "sq_pnorm_max/gamma256.0/seed1-select3epochs"
    for run in (gamma64, gamma256, runs / "fusedmax/gamma16.0/seed1-select3epochs"):
        assert _selection_run_finished(run, 3)
    # the values the H200 README and the sq-pnorm-max row's gamma_selection record
    assert min(_selection_curve(gamma64)["valid_loss"]) == pytest.approx(5.006)
    assert min(_selection_curve(gamma256)["valid_loss"]) == pytest.approx(5.335)
    assert {p.parts[len(runs.parts)] for p in done["written"]} == {"fusedmax", "sq_pnorm_max"}


def test_restoring_again_keeps_what_is_there(tmp_path):
    first = restore(GRIDS, tmp_path, ["table2"])
    log = first["written"][0]
    log.write_text("a log this machine wrote\n")
    again = restore(GRIDS, tmp_path, ["table2"])
    assert not again["written"] and len(again["kept"]) == len(first["written"])
    assert log.read_text() == "a log this machine wrote\n"


def test_a_log_without_its_config_is_refused(tmp_path):
    run = tmp_path / "grids/batch/nmt-softmax-gamma1.0"
    run.mkdir(parents=True)
    (run / "train.log.gz").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        restore(tmp_path / "grids", tmp_path / "work")
