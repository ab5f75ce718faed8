"""The parameterization of a learned alpha per head for alpha-entmax (Correia et al. 2019):
alpha = ALPHA_MIN + (ALPHA_MAX - ALPHA_MIN) * sigmoid(z), z an unconstrained parameter.

Shared by the fairseq plugin and the `transformers` backend, so that both learn the same alpha.
The margin above 1 keeps entmax defined (alpha = 1 is softmax, which entmax's tensor alpha
rejects) and its alpha-gradient, which divides by (alpha - 1)^2, bounded.
"""

from __future__ import annotations

import math

import torch

ALPHA_MIN, ALPHA_MAX = 1.01, 2.0
ALPHA_INIT = 1.5


def alpha_logit_for(alpha: float) -> float:
    """The logit z at which the learned alpha equals `alpha`.

    Parameters
    ----------
    alpha : float
        a number strictly between ALPHA_MIN and ALPHA_MAX.

    Returns
    -------
    float
        z with ALPHA_MIN + (ALPHA_MAX - ALPHA_MIN) * sigmoid(z) = alpha.

    Raises
    ------
    ValueError
        if `alpha` is not strictly between ALPHA_MIN and ALPHA_MAX.
    """
    if not (isinstance(alpha, (int, float)) and ALPHA_MIN < alpha < ALPHA_MAX):
        raise ValueError(
            f"a learned alpha starts strictly between {ALPHA_MIN} and {ALPHA_MAX}, got {alpha!r}"
        )
    s = (alpha - ALPHA_MIN) / (ALPHA_MAX - ALPHA_MIN)
    return math.log(s / (1 - s))


def alpha_from_logit(logit: torch.Tensor) -> torch.Tensor:
    """The learned alphas of the logits z, in [ALPHA_MIN, ALPHA_MAX], differentiable in z.

    Computed in float32 whatever z's dtype (half-precision models hold z in float16 or
    bfloat16): its smallest value, float32(1.01), stays above 1 when a mapping casts alpha to
    the scores' dtype (bfloat16: 1.0078; float16: 1.0098), so alpha never reaches 1 however far
    z goes.

    Parameters
    ----------
    logit : torch.Tensor
        the logits z, any shape (e.g. one per head).

    Returns
    -------
    torch.Tensor
        float32 alphas of z's shape.
    """
    return ALPHA_MIN + (ALPHA_MAX - ALPHA_MIN) * torch.sigmoid(logit.float())
