"""The decoder's output mapping (`--output-mapping`): a sparse output layer, the entmax output
of Peters, Niculae & Martins 2019, trained with `--criterion regattn_fy` (its Fenchel-Young
loss, regattn.losses).

`OutputMappingMixin` makes a seq2seq model's `get_normalized_probs` (what fairseq's
SequenceGenerator and scorers call) apply the mapping instead of softmax: an exact zero is
an impossible token, log-probability -inf, which beam search never extends (fairseq drops
candidates of score -inf before finishing a hypothesis).
"""

from dataclasses import dataclass, field

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from regattn import mappings

# --output-mapping choice -> (regattn mapping, its parameters): the configs the mappings'
# declarations offer as outputs
OUTPUT_MAPPINGS = mappings.output_mappings()


@dataclass
class OutputConfig(FairseqDataclass):
    output_mapping: ChoiceEnum(list(OUTPUT_MAPPINGS)) = field(
        default=mappings.REFERENCE_MAPPING,
        metadata={
            "help": "mapping from the decoder's output scores to the next token's "
            "probabilities (sparse for sparsemax and entmax15: exact zeros, -inf "
            "log-probabilities in beam search); train it with --criterion regattn_fy"
        },
    )


def output_mapping_of(cfg) -> str:
    """The configured output mapping; softmax for checkpoints older than the option.

    Raises
    ------
    ValueError
        on a name that is not in OUTPUT_MAPPINGS.
    """
    name = str(getattr(cfg, "output_mapping", None) or mappings.REFERENCE_MAPPING)
    if name not in OUTPUT_MAPPINGS:
        raise ValueError(
            f"--output-mapping must be one of {', '.join(OUTPUT_MAPPINGS)}, got {name!r}"
        )
    return name


def output_probabilities(scores: torch.Tensor, name: str, log_probs: bool) -> torch.Tensor:
    """The next-token distribution mapping(scores) over the last dim, in float32 or float64,
    or its log (log 0 = -inf for the tokens the mapping rules out)."""
    mapping, params = OUTPUT_MAPPINGS[name]
    probs = mappings.build(mapping, **params)(scores.float(), dim=-1)
    return torch.log(probs) if log_probs else probs


class OutputMappingMixin:
    """For fairseq encoder-decoder models: `get_normalized_probs` by the model's
    `output_mapping` (set by build_model from the config); softmax keeps fairseq's own."""

    output_mapping = mappings.REFERENCE_MAPPING

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        if self.output_mapping == mappings.REFERENCE_MAPPING:
            return super().get_normalized_probs(net_output, log_probs, sample)
        return output_probabilities(net_output[0], self.output_mapping, log_probs)
