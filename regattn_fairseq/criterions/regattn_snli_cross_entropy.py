"""Cross entropy over the SNLI labels, reporting accuracy."""

import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion


@register_criterion("regattn_snli_cross_entropy")
class RegattnSNLICrossEntropyCriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        logits, _ = model(**sample["net_input"])
        targets = sample["target"]
        loss = F.cross_entropy(logits.float(), targets, reduction="sum" if reduce else "none")
        net_input = sample["net_input"]
        sample_size = targets.numel()
        logging_output = {
            "loss": loss.data,
            "ntokens": int(
                net_input["premise_lengths"].sum() + net_input["hypothesis_lengths"].sum()
            ),
            "nsentences": sample_size,
            "sample_size": sample_size,
            "ncorrect": int((logits.argmax(-1) == targets).sum()),
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        ncorrect = sum(log.get("ncorrect", 0) for log in logging_outputs)
        # natural-log cross entropy per pair (fairseq's token criterions log base 2)
        metrics.log_scalar("loss", loss / max(sample_size, 1), sample_size, round=4)
        metrics.log_scalar("accuracy", 100.0 * ncorrect / max(sample_size, 1), sample_size, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
