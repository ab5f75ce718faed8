"""BiLSTM-CRF-style tagger (Lample et al. 2016) whose output layer is a smoothed Viterbi
(Mensch & Blondel 2018): word embeddings and a character BiLSTM feed a word BiLSTM, a linear
layer gives per-tag emissions, and a learned transition matrix (with start and end scores)
combines with them into the potentials theta of `regattn.dp.viterbi`.

State convention (S = K + 1 states, K tags, state K = START): the chain is y_0..y_T with
y_0 = START and y_t (t = 1..T) the tag of word t. With theta[b, t-1, i, j] the score of
moving from state j (at t-1) to state i (at t), as regattn.dp reads it:

  theta[t-1, i, j] = emission(t, i) + transition[i, j]       t >= 2, i, j tags
  theta[0, i, START] = emission(1, i) + start[i]             the first word
  theta[T-1, i, j] += end[i]                                 the sentence's last word
  -inf everywhere else (into START; from a tag at t = 1; from START at t >= 2),

so a tag sequence's score sum_t theta[t-1, y_t, y_{t-1}] is a linear-chain CRF's score, and
DP_entropy(theta) with gamma = 1 its log-partition.
"""

from dataclasses import dataclass, field

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.modules import FairseqDropout
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

MODEL_NAME = "regattn_ner"


@dataclass
class RegattnNERModelConfig(FairseqDataclass):
    # defaults: Lample et al. 2016 (without their pretrained word vectors: none offline)
    word_embed_dim: int = field(default=100, metadata={"help": "word embedding dimension"})
    char_embed_dim: int = field(default=25, metadata={"help": "character embedding dimension"})
    char_hidden_size: int = field(
        default=25, metadata={"help": "character LSTM size per direction"}
    )
    hidden_size: int = field(default=100, metadata={"help": "word LSTM size per direction"})
    dropout: float = field(default=0.5, metadata={"help": "dropout on the word representations"})


def potentials(emissions, transition, start, end, lengths):
    """theta (batch, T, K+1, K+1) of the module docstring from emissions (batch, T, K),
    transition (K, K) (transition[i, j]: from tag j to tag i), start (K), end (K) and the
    sentence lengths (batch,)."""
    batch, steps, tags = emissions.shape
    neg_inf = emissions.new_tensor(float("-inf"))
    first = (torch.arange(steps, device=emissions.device) == 0)[None, :, None]
    last = torch.arange(steps, device=emissions.device)[None, :] == (lengths[:, None] - 1)
    emissions = emissions + last[..., None].to(emissions.dtype) * end
    between = torch.where(first[..., None], neg_inf, emissions[..., None] + transition)
    from_start = torch.where(first, emissions + start, neg_inf)[..., None]
    rows = torch.cat([between, from_start], dim=-1)  # (batch, T, K, K+1)
    into_start = neg_inf.expand(batch, steps, 1, tags + 1)
    return torch.cat([rows, into_start], dim=2)


def path_score(theta, target, lengths):
    """sum_t theta[b, t-1, y_t, y_{t-1}] over t = 1..lengths[b] with y_0 = START = S - 1 and
    y_t = target[b, t-1]: <theta, Y> for the path's transition indicator Y."""
    batch, steps, states, _ = theta.shape
    valid = torch.arange(steps, device=theta.device)[None, :] < lengths[:, None]
    y = torch.where(valid, target, 0)
    previous = torch.cat([y.new_full((batch, 1), states - 1), y[:, :-1]], dim=1)
    picked = theta.gather(3, previous[:, :, None, None].expand(batch, steps, states, 1))
    picked = picked.squeeze(3).gather(2, y[:, :, None]).squeeze(2)
    return torch.where(valid, picked, 0.0).sum(1)


@register_model(MODEL_NAME, dataclass=RegattnNERModelConfig)
class RegattnNERModel(BaseFairseqModel):
    def __init__(self, cfg: RegattnNERModelConfig, word_dict, char_dict, num_tags: int):
        super().__init__()
        self.word_pad, self.char_pad = word_dict.pad(), char_dict.pad()
        self.embed_words = nn.Embedding(len(word_dict), cfg.word_embed_dim, self.word_pad)
        self.embed_chars = nn.Embedding(len(char_dict), cfg.char_embed_dim, self.char_pad)
        self.char_lstm = nn.LSTM(
            cfg.char_embed_dim, cfg.char_hidden_size, batch_first=True, bidirectional=True
        )
        self.word_lstm = nn.LSTM(
            cfg.word_embed_dim + 2 * cfg.char_hidden_size,
            cfg.hidden_size,
            batch_first=True,
            bidirectional=True,
        )
        self.dropout_module = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.emission = nn.Linear(2 * cfg.hidden_size, num_tags)
        self.transition = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))

    @classmethod
    def build_model(cls, cfg: RegattnNERModelConfig, task):
        return cls(cfg, task.word_dict, task.char_dict, len(task.tags))

    def _char_features(self, chars):
        """The final forward and backward states of the character BiLSTM of every word."""
        batch, steps, longest = chars.shape
        flat = chars.reshape(batch * steps, longest)
        lengths = flat.ne(self.char_pad).sum(1)
        features = flat.new_zeros(batch * steps, 2 * self.char_lstm.hidden_size).float()
        words = lengths.nonzero().squeeze(1)
        if len(words):
            packed = pack_padded_sequence(
                self.embed_chars(flat[words]),
                lengths[words].cpu(),
                batch_first=True,
                enforce_sorted=False,
            )
            _, (final, _) = self.char_lstm(packed)
            features = features.to(final.dtype).index_copy(
                0, words, torch.cat([final[0], final[1]], dim=-1)
            )
        return features.reshape(batch, steps, -1)

    def forward(self, words, chars, lengths):
        """Emissions (batch, T, K) of the padded sentences `words` (batch, T)."""
        features = torch.cat([self.embed_words(words), self._char_features(chars)], dim=-1)
        packed = pack_padded_sequence(
            self.dropout_module(features), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        states, _ = self.word_lstm(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=words.size(1))
        return self.emission(self.dropout_module(states))

    def potentials(self, emissions, lengths):
        """theta (batch, T, K+1, K+1) for regattn.dp (convention in the module docstring)."""
        return potentials(emissions, self.transition, self.start, self.end, lengths)

    def decode(self, words, chars, lengths):
        """The Viterbi tag ids (batch, T), -1 past each sentence's length."""
        from regattn.dp import viterbi_decode

        theta = self.potentials(self(words, chars, lengths), lengths)
        return viterbi_decode(theta, lengths)[:, 1:]


@register_model_architecture(MODEL_NAME, "regattn_ner_paper")
def regattn_ner_paper(cfg):
    """Lample et al. 2016's sizes: the config's own defaults."""


@register_model_architecture(MODEL_NAME, "regattn_ner_small")
def regattn_ner_small(cfg):
    cfg.word_embed_dim = getattr(cfg, "word_embed_dim", 64)
    cfg.hidden_size = getattr(cfg, "hidden_size", 64)
