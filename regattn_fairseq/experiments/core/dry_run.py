"""Dry runs: an experiment at its own scale (paper included) on capped data for a few updates.

A dry run checks that a scale's configs run end to end (prepare -> train -> decode -> score ->
row) where the full run is out of reach (the paper scale on a CPU, in CI). Only the amount of
data and the number of updates change: the model, the optimizer and the learning-rate schedule
are the scale's own, so the composed config (and its hash) is the real run's.

Its numbers mean nothing, so it is kept apart from real results everywhere: the prepared data
and the checkpoints go to folders of their own (a real run never resumes from a dry one), the
rows carry the caps (``dry_run``) as part of their key, and `store.check_row_kinds` keeps
them out of the committed results folder and out of any raw file that holds real rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from regattn_checkout.errors import ReproError


@dataclass(frozen=True)
class DryRun:
    """The caps of a dry run; all None for a real run.

    Attributes
    ----------
    max_train : int | None
        at most this many training examples (pairs, sentences; words per language for
        inflection): the dataset's ``max_train`` option, never raised above the scale's own.
    max_eval : int | None
        at most this many examples of each validation and evaluation set (``max_eval``).
    max_update : int | None
        stop training after this many updates (fairseq ``optimization.max_update``).
    """

    max_train: int | None = None
    max_eval: int | None = None
    max_update: int | None = None

    def __post_init__(self):
        for name, value in self.caps().items():
            if not isinstance(value, int) or value < 1:
                raise ReproError(f"dry run: {name} must be a positive integer, got {value!r}")

    def caps(self) -> dict[str, int]:
        """The caps that are set.

        Returns
        -------
        dict[str, int]
            name -> value, e.g. ``{"max_train": 200, "max_update": 3}``.
        """
        values = {
            "max_train": self.max_train,
            "max_eval": self.max_eval,
            "max_update": self.max_update,
        }
        return {name: value for name, value in values.items() if value is not None}

    @property
    def active(self) -> bool:
        """Whether any cap is set (a dry run), as opposed to a real run."""
        return bool(self.caps())

    def record(self) -> dict[str, int] | None:
        """What a result row records under ``dry_run``: the caps, or None for a real run."""
        return self.caps() or None

    def data_caps(self) -> dict[str, int]:
        """The dataset options that cap the data (`prepare.prepare`'s ``caps``)."""
        return {k: v for k, v in self.caps().items() if k in ("max_train", "max_eval")}

    def train_overrides(self) -> list[str]:
        """The Hydra overrides of the training runs (none changes the composed settings)."""
        if self.max_update is None:
            return []
        return [f"optimization.max_update={self.max_update}"]

    def folder_suffix(self) -> str:
        """Appended to a run's checkpoint folder, so that a dry run and a real run (or two dry
        runs with other caps) never resume from each other's checkpoints."""
        return caps_label("dry-run", self.caps())


def caps_label(prefix: str, caps: dict[str, int]) -> str:
    """A folder-name suffix for caps: ``-<prefix>-train200-eval20-update3``, or ``""``.

    Parameters
    ----------
    prefix : str
        what the caps make of the folder (``dry-run``, ``capped``).
    caps : dict[str, int]
        ``max_<what>`` -> value.

    Returns
    -------
    str
        The suffix (empty without caps).
    """
    if not caps:
        return ""
    return "-" + "-".join([prefix, *(f"{k.removeprefix('max_')}{v}" for k, v in caps.items())])


def describe(record: dict | None) -> str:
    """A row's ``dry_run`` record in words, for the tables.

    Parameters
    ----------
    record : dict | None
        the row's ``dry_run`` (None: a real row).

    Returns
    -------
    str
        e.g. ``"dry run (max_train 200, max_eval 20, max_update 3)"``; ``""`` for a real row.
    """
    if not record:
        return ""
    caps = DryRun(**record).caps()  # in the fields' order, whatever the record's
    return "dry run (" + ", ".join(f"{k} {v}" for k, v in caps.items()) + ")"
