"""The references of an evaluation set, as scoring reads them (`Gold`): what a dataset kind's
builder reads back of a test set (its ``load_gold``) and what a prepared evaluation set's
manifest entry names (`test_sets.prepared_gold`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Gold:
    """The references of a test set, in item order.

    Attributes
    ----------
    references : list of list of str
        every reference of each item (one for all but DUC 2004).
    files : list of str
        the data files read, relative to the data root.
    truncate_bytes : int or None
        ROUGE byte limit for hypotheses and references.
    detokenize : str or None
        the target language, for Moses-detokenising tokenised system output before BLEU.
    languages : list of str or None
        each item's language (inflection).
    """

    references: list[list[str]]
    files: list[str]
    truncate_bytes: int | None = None
    detokenize: str | None = None
    languages: list[str] | None = None
