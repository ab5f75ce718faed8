"""A mapping's parameters, as the model configs name them, and its one label.

Tables, figures (panel titles, legends, learning curves) and wandb run names all label a
mapping with its parameters through `mapping_label`, in the paper's spelling of the library's
`regattn.analysis.describe_mapping` (which the attention exports' figures use): e.g.
``sparsemax (γ=4)``, ``sq-pnorm-max (γ=1, p=1.5)``.
"""

from __future__ import annotations

from regattn import mappings
from regattn.analysis import describe_mapping

# The attention parameters of the models (configs' model.attention_*), and their names in the
# library's labels: the mappings' options (`mappings.OPTION_TO_PARAM`) and
# attention_grad_surrogate, the LSTM's diagnostic backward, unset in every ordinary run.
MAPPING_PARAMS = {**mappings.OPTION_TO_PARAM, "attention_grad_surrogate": "backward"}


def mapping_label(mapping: str, params: dict) -> str:
    """The label of a mapping with its parameters.

    Parameters
    ----------
    mapping : str
        the mapping's name (an `attention` config; a `dp` regulariser for NER).
    params : dict
        its parameters by their config names (`MAPPING_PARAMS`; unset ones, None, are left
        out); other names are shown as they are.

    Returns
    -------
    str
        e.g. ``"sparsemax (γ=4)"``, ``"sparsemax (γ=1, backward=softmax)"``.
    """
    named = {MAPPING_PARAMS.get(k, k): v for k, v in params.items() if v is not None}
    return describe_mapping(mapping, named)
