from . import regattn_ner_dp, regattn_snli_cross_entropy  # noqa: F401  (registration)
