"""Transformer layers whose three attention blocks use the configured mapping.

The constructor arguments mirror the stock `build_*_attention` hooks so that parameter shapes
and names (hence checkpoints) match fairseq's `transformer`."""

from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from .attention_normalizer import AttentionNormalizer
from .attention_options import attention_impl_from_cfg, attention_spec_from_cfg
from .regattn_multihead_attention import RegattnMultiheadAttention

# the model these layers belong to (models/regattn_transformer.py registers it under this
# name): the attention options are validated for it
MODEL_NAME = "regattn_transformer"


def build_normalizer(cfg, num_heads):
    return AttentionNormalizer(
        attention_spec_from_cfg(cfg, MODEL_NAME, allow_learned_alpha=True), num_heads
    )


class RegattnTransformerEncoderLayer(TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        return RegattnMultiheadAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            normalizer=build_normalizer(cfg, cfg.encoder.attention_heads),
            attention_impl=attention_impl_from_cfg(cfg),
        )


class RegattnTransformerDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return RegattnMultiheadAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            normalizer=build_normalizer(cfg, cfg.decoder.attention_heads),
            attention_impl=attention_impl_from_cfg(cfg),
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return RegattnMultiheadAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            normalizer=build_normalizer(cfg, cfg.decoder.attention_heads),
            attention_impl=attention_impl_from_cfg(cfg),
        )
