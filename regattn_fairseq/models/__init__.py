from regattn_fairseq import fairseq_adapter

from . import regattn_lstm, regattn_ner, regattn_snli, regattn_transformer  # noqa: F401  (registration)

# fairseq's CLIs load these models' checkpoints with torch.load(weights_only=True); done here,
# once, because registering the models is what makes their checkpoints loadable by fairseq
fairseq_adapter.allow_namespace_in_checkpoints()
