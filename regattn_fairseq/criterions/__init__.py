from . import (  # noqa: F401  (registration)
    regattn_fenchel_young,
    regattn_ner_dp,
    regattn_snli_cross_entropy,
)
