from . import regattn_ner, regattn_snli  # noqa: F401  (registration)
