"""A fine-tuned table's γ-selection short runs, kept in the results folder as each one ends.

A short run gives the γ choice one number, its best validation loss; its model is not kept. The
choice itself is recorded only in the rows of the mapping's first converged run, hours later. A
machine lost in between (they are lent, and go) would lose the whole grid. So each short run's
settings, provenance and log are written when it ends, to

    <results>/gamma_grids/finetune/<table>/<experiment>-<mapping>-gamma<γ>-seed<s>-<config hash>/
        settings.json  train.log.gz

and `recorded` reads it back from there (`KeptShortRun`). A later run does not train that short
run again, on any machine or from a fresh clone once the folder is committed.

``settings.json`` is one record, ``{"settings": ..., "provenance": ...}``:

- ``settings`` is what makes two short runs the same run. The config hash and this part must both
  match; a short run of other settings is another run. Only this part is compared.
- ``provenance`` is the run's ``started.json`` (commit, package versions, hardware, date), so the
  file that a γ choice is read through names the code that trained it. A folder whose
  provenance is missing or names no commit is refused, and the rows' γ selection cites each short
  run by its folder and commit (`KeptShortRun.citation`).

The fairseq tables' grids are kept otherwise. Their logs are committed by hand, batch by batch,
and `grid_logs` puts them back into a work folder.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from regattn_checkout.errors import ReproError
from regattn_checkout.files import write_file, write_json
from regattn_fairseq.experiments.rows.job import Job
from regattn_fairseq.experiments.rows.keys import config_sha256
from regattn_fairseq.experiments.train.hf_finetune import LOG_FILE, FineTuneSettings, log_curve

FOLDER = Path("gamma_grids") / "finetune"
SETTINGS_FILE = "settings.json"
LOG_ARCHIVE = LOG_FILE + ".gz"
# the provenance that train.py writes in a run folder, which `keep` copies into SETTINGS_FILE
STARTED_FILE = "started.json"


def record_dir(results_dir: Path, table: str, job: Job, settings: FineTuneSettings) -> Path:
    """The folder that keeps the short run of `job` (a γ-selection job) with `settings`."""
    name = (
        f"{job.experiment.name}-{job.mapping}-gamma{job.gamma}-seed{job.seed}-"
        f"{config_sha256(settings.config())}"
    )
    return Path(results_dir) / FOLDER / table / name


@dataclass(frozen=True)
class KeptShortRun:
    """A kept short run: its folder, its best validation loss, and what trained it.

    Attributes
    ----------
    folder : Path
        ``<results>/gamma_grids/finetune/<table>/<name>/`` (`record_dir`).
    best_valid_loss : float
        the number the γ choice uses.
    started : dict
        the provenance in its ``settings.json``: git_commit, git_dirty, date, hardware,
        versions.
    """

    folder: Path
    best_valid_loss: float
    started: dict

    def citation(self) -> dict:
        """What a row's γ selection records of this short run: enough to find its folder and
        the code that trained it."""
        return {
            "folder": self.folder.name,
            "best_valid_loss": self.best_valid_loss,
            "git_commit": self.started["git_commit"],
            "git_dirty": self.started.get("git_dirty"),
            "date": self.started.get("date"),
            "cpu": (self.started.get("hardware") or {}).get("cpu"),
        }


def recorded(results_dir: Path, table: str, job: Job, settings: FineTuneSettings):
    """The kept short run of `job` (`KeptShortRun`), or None when none is kept.

    Raises
    ------
    ReproError
        the folder holds a run of other settings (a hash collision, or an edited file), its log
        does not show a finished run, or its ``settings.json`` has no provenance naming a commit.
    """
    folder = record_dir(results_dir, table, job, settings)
    if not (folder / SETTINGS_FILE).is_file():
        return None
    kept = read_kept(folder / SETTINGS_FILE)
    if kept["settings"] != settings.record():
        raise ReproError(f"{folder / SETTINGS_FILE}: not the settings of {job.label}")
    text = gzip.decompress((folder / LOG_ARCHIVE).read_bytes()).decode("utf-8")
    curve = log_curve(text, settings)
    if curve.get("stop") is None or curve.get("best_valid_loss") is None:
        raise ReproError(f"{folder / LOG_ARCHIVE}: the log of an unfinished run ({job.label})")
    return KeptShortRun(folder, curve["best_valid_loss"], kept["provenance"])


def read_kept(path: Path) -> dict:
    """A kept folder's ``settings.json`` at `path`: ``{"settings", "provenance"}``.

    Raises
    ------
    ReproError
        the file is not that record, or its provenance names no commit: a short run whose code
        is unknown is not read (nor merged).
    """
    try:
        kept = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        # a file cut short by a lost machine, or edited by hand
        raise ReproError(f"{path}: not JSON ({error}); the kept short run cannot be read") from None
    if not isinstance(kept, dict) or set(kept) != {"settings", "provenance"}:
        raise ReproError(
            f"{path}: not a kept short run's record ({{settings, provenance}}); "
            "the code that trained it is unknown"
        )
    provenance = kept["provenance"]
    if not isinstance(provenance, dict) or not provenance.get("git_commit"):
        raise ReproError(f"{path}: its provenance names no git commit")
    return kept


def _started(path: Path, job: Job) -> dict:
    """The ``started.json`` of a finished short run at `path`; a run whose commit is unknown is
    not kept."""
    if not path.is_file():
        raise ReproError(
            f"{path}: missing; the short run of {job.label} has no record of the code that "
            "trained it"
        )
    started = json.loads(path.read_text(encoding="utf-8"))
    if not started.get("git_commit"):
        raise ReproError(f"{path}: names no git commit ({job.label})")
    return started


def keep(results_dir: Path, table: str, job: Job, settings: FineTuneSettings) -> Path:
    """Write the finished short run in ``job.run_dir`` to its folder (`record_dir`). A folder
    already there is left as it is: re-running never replaces what was kept.

    Raises
    ------
    ReproError
        ``job.run_dir`` has no ``started.json`` naming a commit; nothing is written, and the run
        stays in ``job.run_dir``.

    Returns
    -------
    Path
        the folder.
    """
    folder = record_dir(results_dir, table, job, settings)
    if (folder / SETTINGS_FILE).is_file():
        return folder
    started = _started(job.run_dir / STARTED_FILE, job)
    log = (job.run_dir / LOG_FILE).read_bytes()
    write_file(folder / LOG_ARCHIVE, gzip.compress(log, mtime=0))
    # written last: a folder is kept (`recorded`) once its settings are there
    write_json(folder / SETTINGS_FILE, {"settings": settings.record(), "provenance": started})
    return folder
