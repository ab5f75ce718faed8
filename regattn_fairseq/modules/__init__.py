from .attention_normalizer import AttentionNormalizer
from .attention_options import (
    AttentionConfig,
    AttentionImplConfig,
    AttentionSpec,
    ContinuousAttentionConfig,
    ContinuousSpec,
    attention_impl_from_cfg,
    attention_spec_from_cfg,
    continuous_spec_from_cfg,
)
from .regattn_lstm_attention import RegattnLSTMAttentionLayer
from .regattn_multihead_attention import RegattnMultiheadAttention
from .regattn_transformer_layer import (
    RegattnTransformerDecoderLayer,
    RegattnTransformerEncoderLayer,
)

__all__ = [
    "AttentionConfig",
    "AttentionImplConfig",
    "AttentionNormalizer",
    "AttentionSpec",
    "ContinuousAttentionConfig",
    "ContinuousSpec",
    "RegattnLSTMAttentionLayer",
    "RegattnMultiheadAttention",
    "RegattnTransformerDecoderLayer",
    "RegattnTransformerEncoderLayer",
    "attention_impl_from_cfg",
    "attention_spec_from_cfg",
    "continuous_spec_from_cfg",
]
