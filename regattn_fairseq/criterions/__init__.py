from . import regattn_snli_cross_entropy  # noqa: F401  (registration)
