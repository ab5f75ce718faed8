"""One builder per kind of dataset (the `kind:` of configs/prepare/<dataset>.yaml).

A dataset kind's module owns its whole story, from the source files to the references that
scoring reads. Each builder module has

- ``build(inputs, opts, root) -> evaluations``: reads through a `data_sources.Inputs`, writes
  the binarized data under root/bin and the references under root/refs, and returns the
  evaluation sets (name -> {"subset", "refs", ...}) for the manifest;
- ``TOOLS``: the distributions whose versions shape its output (part of the cache key);
- ``load_gold(inputs, spec, definition) -> Gold``: a test set's references read from the
  offline data, processed as ``build`` writes them (`data.test_sets.load_gold` dispatches to
  it; `scripts/score.py` scores against them).
"""

from __future__ import annotations

from types import ModuleType

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.builders import (
    inflection,
    ner,
    snli,
    summarization,
    translation,
)

BUILDERS: dict[str, ModuleType] = {
    "translation": translation,
    "summarization": summarization,
    "snli": snli,
    "inflection": inflection,
    "ner": ner,
}


def builder_for(kind: str) -> ModuleType:
    """The builder module of a dataset kind.

    Parameters
    ----------
    kind : str
        the spec's ``kind`` (a key of BUILDERS).

    Returns
    -------
    ModuleType
        The module (with ``build``, ``TOOLS`` and ``load_gold``).

    Raises
    ------
    ReproError
        no builder handles `kind`; the message names it and the known kinds.
    """
    try:
        return BUILDERS[kind]
    except (KeyError, TypeError):
        raise ReproError(
            f"unknown dataset kind {kind!r}; known kinds: {', '.join(sorted(BUILDERS))}"
        ) from None
