from . import regattn_lstm, regattn_snli, regattn_transformer  # noqa: F401  (registration)
