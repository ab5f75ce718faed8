from .attention_normalizer import AttentionNormalizer
from .attention_options import (
    AttentionConfig,
    AttentionSpec,
    ContinuousAttentionConfig,
    ContinuousSpec,
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
    "AttentionNormalizer",
    "AttentionSpec",
    "ContinuousAttentionConfig",
    "ContinuousSpec",
    "RegattnLSTMAttentionLayer",
    "RegattnMultiheadAttention",
    "RegattnTransformerDecoderLayer",
    "RegattnTransformerEncoderLayer",
    "attention_spec_from_cfg",
    "continuous_spec_from_cfg",
]
