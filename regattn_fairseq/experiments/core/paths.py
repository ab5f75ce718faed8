"""The reproduction suite's own paths, defined once.

The package runs from a checkout (an editable install, `make setup`). The repository root and
the results folders, which the benchmarks use too, are defined in `regattn_checkout.paths`; the
configs, the plugin folder (`--user-dir`) and the default work folder hang off that root.
Nothing here assumes where the virtual environment is; console scripts are found next to the
running interpreter (`tools.tool_path`).

Attributes
----------
CONFIG_DIR : the Hydra and orchestration configs (configs/).
PREPARE_CONFIG_DIR : the dataset specs (configs/prepare/*.yaml).
USER_DIR : the fairseq plugin folder passed as --user-dir / common.user_dir.
DATA_DIR_ENV : the environment variable naming the offline data root.
LOCAL_DATA_ENV : the environment variable naming the folder of the user's own full copies in
    their official layouts (DATA_SOURCE=local); no default.
HUB_MIRROR_ENV : the environment variable naming a local copy of hub dataset repositories
    (<dir>/<owner>/<name>/, the files of the pinned revision) read instead of the hub.
DEFAULT_DATA_DIR : the offline data root when neither an argument nor $REGATTN_DATA_DIR names
    one: ../shared/data beside the checkout (<parent>/<checkout> -> <parent>/shared/data).
DEFAULT_WORK_DIR : where data/ (prepared data) and checkpoints/ go by default.
SMOKE_RESULTS_DIR : the tables of smoke-scale runs (pipeline checks) unless told otherwise: a
    git-ignored scratch folder (outputs/), so that a check leaves the committed tables alone.
ROUGE_EXCEPTIONS_DIR : the WordNet 2.0 exception lists of ROUGE-1.5.5's -m stemming (package
    data, shipped with the package).
"""

from __future__ import annotations

from pathlib import Path

from regattn_checkout.paths import REPO_ROOT

__all__ = [
    "CONFIG_DIR",
    "DATA_DIR_ENV",
    "DEFAULT_DATA_DIR",
    "DEFAULT_WORK_DIR",
    "HUB_MIRROR_ENV",
    "LOCAL_DATA_ENV",
    "PREPARE_CONFIG_DIR",
    "ROUGE_EXCEPTIONS_DIR",
    "SMOKE_RESULTS_DIR",
    "USER_DIR",
]

CONFIG_DIR = REPO_ROOT / "configs"
PREPARE_CONFIG_DIR = CONFIG_DIR / "prepare"
USER_DIR = REPO_ROOT / "regattn_fairseq"
DATA_DIR_ENV = "REGATTN_DATA_DIR"
LOCAL_DATA_ENV = "REGATTN_LOCAL_DATA"
HUB_MIRROR_ENV = "REGATTN_HUB_MIRROR"
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
DEFAULT_WORK_DIR = REPO_ROOT
SMOKE_RESULTS_DIR = REPO_ROOT / "outputs" / "smoke-results"
ROUGE_EXCEPTIONS_DIR = (
    Path(__file__).resolve().parents[1] / "score" / "rouge_data" / "wordnet-2.0-exceptions"
)
