"""fairseq's Transformer with the encoder self-, decoder self- and cross-attention normalized
by the configured mapping; with `--attention entmax --attention-alpha learned` it is the
adaptively sparse Transformer (Correia, Niculae & Martins 2019)."""

from dataclasses import dataclass, fields

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
)
from omegaconf import OmegaConf

from regattn import mappings
from regattn_fairseq.fairseq_adapter import wrap_transformer_layer
from regattn_fairseq.modules import (
    AttentionConfig,
    AttentionImplConfig,
    RegattnTransformerDecoderLayer,
    RegattnTransformerEncoderLayer,
    attention_impl_from_cfg,
    attention_spec_from_cfg,
)
from regattn_fairseq.modules.attention_options import cli_name
from regattn_fairseq.modules.output_options import (
    OutputConfig,
    OutputMappingMixin,
    output_mapping_of,
)
from regattn_fairseq.modules.regattn_transformer_layer import MODEL_NAME


@dataclass
class RegattnTransformerConfig(
    TransformerConfig, AttentionConfig, AttentionImplConfig, OutputConfig
):
    """TransformerConfig plus the attention options as real fields: fairseq converts Hydra
    model configs with `from_namespace`, which keeps only declared fields."""


class RegattnTransformerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        layer = RegattnTransformerEncoderLayer(cfg, return_fc=self.return_fc)
        return wrap_transformer_layer(layer, cfg)


class RegattnTransformerDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_transformer_layer(RegattnTransformerDecoderLayer(cfg, no_encoder_attn), cfg)


def _check_config(cfg):
    if OmegaConf.is_config(cfg):
        # Hydra configs of argparse-style models have no schema: catch misspelt options here
        declared = {f.name for f in fields(RegattnTransformerConfig)}
        unknown = sorted(k for k in cfg if k.startswith("attention") and k not in declared)
        if unknown:
            raise ValueError(f"unknown attention option(s) {', '.join(unknown)} for {MODEL_NAME}")
    cfg = RegattnTransformerConfig.from_namespace(cfg)
    attention_spec_from_cfg(cfg, MODEL_NAME, allow_learned_alpha=True)
    attention_impl_from_cfg(cfg)
    if output_mapping_of(cfg) != mappings.REFERENCE_MAPPING and cfg.adaptive_softmax_cutoff:
        raise ValueError("--output-mapping cannot be combined with --adaptive-softmax-cutoff")
    for side in ("encoder", "decoder"):
        if getattr(cfg, side).xformers_att_config is not None:
            raise ValueError(
                f"--{side}-xformers-att-config computes its own softmax; it cannot "
                f"be combined with {cli_name('attention')}"
            )
    return cfg


@register_model(MODEL_NAME)
class RegattnTransformerModel(OutputMappingMixin, TransformerModel):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        gen_parser_from_dataclass(parser, AttentionConfig())
        gen_parser_from_dataclass(parser, AttentionImplConfig())
        gen_parser_from_dataclass(parser, OutputConfig())

    @classmethod
    def build_model(cls, args, task):
        # From here on the config is a RegattnTransformerConfig, which fairseq's
        # TransformerConfig.from_namespace passes through unchanged to every layer.
        cfg = _check_config(args)
        model = super().build_model(cfg, task)
        model.output_mapping = output_mapping_of(cfg)
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return RegattnTransformerEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        return RegattnTransformerDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )

    @property
    def attention_spec(self):
        return self.encoder.layers[0].self_attn.normalizer.spec


@register_model_architecture(MODEL_NAME, "regattn_transformer")
def regattn_transformer(args):
    base_architecture(args)


@register_model_architecture(MODEL_NAME, "regattn_transformer_iwslt_de_en")
def regattn_transformer_iwslt_de_en(args):
    transformer_iwslt_de_en(args)


@register_model_architecture(MODEL_NAME, "regattn_transformer_small")
def regattn_transformer_small(args):
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 128)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 512)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 512)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    base_architecture(args)
