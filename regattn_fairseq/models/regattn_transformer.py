"""fairseq's Transformer with the encoder self-, decoder self- and cross-attention normalized
by the configured mapping; with `--attention entmax --attention-alpha learned` it is the
adaptively sparse Transformer (Correia, Niculae & Martins 2019)."""
import argparse
from dataclasses import dataclass, fields

import torch

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
    transformer_iwslt_de_en,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from omegaconf import OmegaConf

from regattn_fairseq.modules import (
    AttentionConfig,
    RegattnTransformerDecoderLayer,
    RegattnTransformerEncoderLayer,
    attention_spec_from_cfg,
)
from regattn_fairseq.modules.attention_options import cli_name

MODEL_NAME = "regattn_transformer"

# fairseq saves the argparse Namespace of argparse-style models (this one, like its
# `transformer`) in checkpoints and loads them with torch.load's default weights_only=True,
# which rejects Namespace since PyTorch 2.6: allow exactly that class.
torch.serialization.add_safe_globals([argparse.Namespace])


@dataclass
class RegattnTransformerConfig(TransformerConfig, AttentionConfig):
    """TransformerConfig plus the attention options as real fields: fairseq converts Hydra
    model configs with `from_namespace`, which keeps only declared fields."""


def _wrap_layer(layer, cfg):
    # what fairseq's build_encoder_layer/build_decoder_layer do to the layers they build
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


class RegattnTransformerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        return _wrap_layer(RegattnTransformerEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class RegattnTransformerDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return _wrap_layer(RegattnTransformerDecoderLayer(cfg, no_encoder_attn), cfg)


def _check_config(cfg):
    if OmegaConf.is_config(cfg):
        # Hydra configs of argparse-style models have no schema: catch misspelt options here
        declared = {f.name for f in fields(RegattnTransformerConfig)}
        unknown = sorted(k for k in cfg if k.startswith("attention") and k not in declared)
        if unknown:
            raise ValueError(f"unknown attention option(s) {', '.join(unknown)} for {MODEL_NAME}")
    cfg = RegattnTransformerConfig.from_namespace(cfg)
    attention_spec_from_cfg(cfg, MODEL_NAME, allow_learned_alpha=True)
    for side in ("encoder", "decoder"):
        if getattr(cfg, side).xformers_att_config is not None:
            raise ValueError(f"--{side}-xformers-att-config computes its own softmax; it cannot "
                             f"be combined with {cli_name('attention')}")
    return cfg


@register_model(MODEL_NAME)
class RegattnTransformerModel(TransformerModel):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        gen_parser_from_dataclass(parser, AttentionConfig())

    @classmethod
    def build_model(cls, args, task):
        # From here on the config is a RegattnTransformerConfig, which fairseq's
        # TransformerConfig.from_namespace passes through unchanged to every layer.
        return super().build_model(_check_config(args), task)

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
