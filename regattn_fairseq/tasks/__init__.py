from . import regattn_snli  # noqa: F401  (registration)
