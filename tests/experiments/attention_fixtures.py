"""Attention exports (experiments/decode/attention_format.py) made from the real mappings."""

from pathlib import Path

import torch

from regattn import mappings
from regattn_fairseq.experiments.decode.attention_format import export_writer


def attention_records(name: str, params: dict, sentences: int = 3, seed: int = 0) -> list[dict]:
    """Sentence records as the attention export holds them, with the attention of
    mapping `name` applied to random-walk scores (neighbouring scores close, so that fusedmax
    and oscarmax form groups) in float32, as a model computes it."""
    generator = torch.Generator().manual_seed(seed)
    records = []
    for sentence in range(sentences):
        source_length, target_length = 9 + 2 * sentence, 4 + sentence
        steps = 0.4 * torch.randn(target_length, source_length, generator=generator)
        scores = steps.cumsum(-1).float()
        attention = mappings.build(name, **params)(scores)
        records.append(
            {
                "id": 100 + sentence,
                "src_tokens": [f"src{i}" for i in range(source_length - 1)] + ["</s>"],
                "tgt_tokens": [f"tgt{i}" for i in range(target_length - 1)] + ["</s>"],
                "attention": attention.tolist(),
                "mapping": {"name": name, "params": params, "device": "cpu"},
            }
        )
    return records


def write_export(path: Path, records: list[dict]) -> Path:
    with export_writer(path) as write:
        for record in records:
            write(record)
    return path
