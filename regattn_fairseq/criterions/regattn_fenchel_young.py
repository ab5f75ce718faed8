"""The Fenchel-Young loss of the decoder's output mapping (`--criterion regattn_fy`), for
sparse output layers (Peters, Niculae & Martins 2019: entmax for the output distribution as
well as the attention):

    loss(theta, y) = Omega*(theta) - theta.y + Omega(y),   gradient mapping(theta) - y,

theta the decoder's output scores of a target position, y its (label-smoothed) one-hot
target, the mapping the model's `--output-mapping` (regattn_fairseq.modules.output_options;
with softmax it is the cross-entropy). Padding positions count for nothing. The loss is
logged in nats per token (per sentence with --sentence-avg), not in bits: it is no
log-likelihood (a sparse output gives the target probability 0 where the loss is finite)."""

from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II

from regattn.losses import fenchel_young_loss
from regattn_fairseq.modules.output_options import OUTPUT_MAPPINGS


@dataclass
class RegattnFenchelYoungConfig(FairseqDataclass):
    label_smoothing: float = field(
        default=0.0,
        metadata={"help": "epsilon in [0, 1): the target becomes (1 - eps) y + eps / V"},
    )
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("regattn_fy", dataclass=RegattnFenchelYoungConfig)
class RegattnFenchelYoungCriterion(FairseqCriterion):
    def __init__(self, task, label_smoothing, sentence_avg):
        super().__init__(task)
        if not 0 <= label_smoothing < 1:
            raise ValueError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.sentence_avg = sentence_avg

    def forward(self, model, sample, reduce=True):
        name = getattr(model, "output_mapping", None)
        if name is None:
            raise ValueError(
                "--criterion regattn_fy needs a regattn seq2seq model (regattn_lstm, "
                "regattn_transformer), whose --output-mapping it trains"
            )
        mapping, params = OUTPUT_MAPPINGS[name]
        net_output = model(**sample["net_input"])
        scores = net_output[0]
        target = model.get_targets(sample, net_output)
        loss = fenchel_young_loss(
            scores.float().reshape(-1, scores.size(-1)),
            target.reshape(-1),
            mapping,
            ignore_index=self.padding_idx,
            reduction="sum" if reduce else "none",
            label_smoothing=self.label_smoothing,
            **params,
        )
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        with torch.no_grad():
            kept = target.ne(self.padding_idx)
            predicted = scores.argmax(-1)
            logging_output = {
                "loss": loss.data,
                "ntokens": sample["ntokens"],
                "nsentences": sample["target"].size(0),
                "sample_size": sample_size,
                "ncorrect": int((predicted.eq(target) & kept).sum()),
                "ntargets": int(kept.sum()),
            }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        ncorrect = sum(log.get("ncorrect", 0) for log in logging_outputs)
        ntargets = sum(log.get("ntargets", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss / max(sample_size, 1), sample_size, round=4)
        metrics.log_scalar("accuracy", 100.0 * ncorrect / max(ntargets, 1), ntargets, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
