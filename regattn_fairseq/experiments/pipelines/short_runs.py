"""A fine-tuned table's γ-selection short runs, kept in the results folder as each one ends.

A short run gives the γ choice one number, its best validation loss; its model is not kept. The
choice itself is recorded only in the rows of the mapping's first converged run, hours later. A
machine lost in between (they are lent, and go) would lose the whole grid. So each short run's
settings, log and provenance are written when it ends, to

    <results>/gamma_grids/finetune/<table>/<experiment>-<mapping>-gamma<γ>-seed<s>-<config hash>/
        settings.json  train.log.gz  started.json

and `recorded_loss` reads the loss back from there. A later run does not train that short run
again, on any machine or from a fresh clone once the folder is committed. The config hash and
the full ``settings.json`` must both match: a short run of other settings is another run.

The fairseq tables' grids are kept otherwise. Their logs are committed by hand, batch by batch,
and `grid_logs` puts them back into a work folder.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_file, write_json
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import config_sha256
from regattn_fairseq.experiments.train.hf_finetune import LOG_FILE, FineTuneSettings, log_curve

FOLDER = Path("gamma_grids") / "finetune"
SETTINGS_FILE = "settings.json"
LOG_ARCHIVE = LOG_FILE + ".gz"
STARTED_FILE = "started.json"


def record_dir(results_dir: Path, table: str, job: Job, settings: FineTuneSettings) -> Path:
    """The folder that keeps the short run of `job` (a γ-selection job) with `settings`."""
    name = (
        f"{job.experiment.name}-{job.mapping}-gamma{job.gamma}-seed{job.seed}-"
        f"{config_sha256(settings.config())}"
    )
    return Path(results_dir) / FOLDER / table / name


def recorded_loss(results_dir: Path, table: str, job: Job, settings: FineTuneSettings):
    """The best validation loss of the kept short run of `job`, or None when none is kept.

    Raises
    ------
    ReproError
        the folder holds a run of other settings (a hash collision, or an edited file), or its
        log does not show a finished run.
    """
    folder = record_dir(results_dir, table, job, settings)
    if not (folder / SETTINGS_FILE).is_file():
        return None
    if json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8")) != settings.record():
        raise ReproError(f"{folder / SETTINGS_FILE}: not the settings of {job.label}")
    text = gzip.decompress((folder / LOG_ARCHIVE).read_bytes()).decode("utf-8")
    curve = log_curve(text, settings)
    if curve.get("stop") is None or curve.get("best_valid_loss") is None:
        raise ReproError(f"{folder / LOG_ARCHIVE}: the log of an unfinished run ({job.label})")
    return curve["best_valid_loss"]


def keep(results_dir: Path, table: str, job: Job, settings: FineTuneSettings) -> Path:
    """Write the finished short run in ``job.run_dir`` to its folder (`record_dir`). A folder
    already there is left as it is: re-running never replaces what was kept.

    Returns
    -------
    Path
        the folder.
    """
    folder = record_dir(results_dir, table, job, settings)
    if (folder / SETTINGS_FILE).is_file():
        return folder
    started = job.run_dir / STARTED_FILE
    if started.is_file():
        write_file(folder / STARTED_FILE, started.read_bytes())
    log = (job.run_dir / LOG_FILE).read_bytes()
    write_file(folder / LOG_ARCHIVE, gzip.compress(log, mtime=0))
    # written last: a folder is kept (`recorded_loss`) once its settings are there
    write_json(folder / SETTINGS_FILE, settings.record())
    return folder
