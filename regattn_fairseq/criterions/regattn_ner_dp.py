"""The structured loss of a smoothed Viterbi tagger (Mensch & Blondel 2018):

    loss(theta, Y) = DP_Omega(theta) - <theta, Y>,

DP_Omega = `regattn.dp.viterbi` and Y the gold tag path's transition indicator (the model's
state convention: regattn_fairseq/models/regattn_ner.py). Its gradient is E_Omega[Y] - Y, the
expected transitions minus the gold ones. With the entropy and gamma = 1 it is the CRF
negative log-likelihood; with the squared l2 norm the expected transitions are sparse.
Validation also reports the token accuracy of the Viterbi path."""

from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from regattn.dp import REFERENCE_REG, REGS, viterbi, viterbi_decode
from regattn_fairseq.models.regattn_ner import path_score


@dataclass
class RegattnNERDPConfig(FairseqDataclass):
    dp_reg: ChoiceEnum(list(REGS)) = field(
        default=REFERENCE_REG,
        metadata={
            "help": "regulariser of the smoothed max in DP_Omega: entropy (the CRF loss) or "
            "l2 (squared l2 norm: sparse marginals)"
        },
    )
    dp_gamma: float = field(
        default=1.0, metadata={"help": "regularisation strength gamma of DP_Omega (> 0)"}
    )


def dp_loss(theta, target, lengths, reg, gamma):
    """DP_Omega(theta) - <theta, Y_gold> per sentence (batch,)."""
    return viterbi(theta, reg=reg, gamma=gamma, lengths=lengths) - path_score(
        theta, target, lengths
    )


@register_criterion("regattn_ner_dp", dataclass=RegattnNERDPConfig)
class RegattnNERDPCriterion(FairseqCriterion):
    def __init__(self, task, dp_reg=REFERENCE_REG, dp_gamma=1.0):
        super().__init__(task)
        self.reg, self.gamma = str(dp_reg), float(dp_gamma)

    def forward(self, model, sample, reduce=True):
        net_input = sample["net_input"]
        lengths = net_input["lengths"]
        theta = model.potentials(model(**net_input), lengths)
        losses = dp_loss(theta.float(), sample["target"], lengths, self.reg, self.gamma)
        loss = losses.sum() if reduce else losses
        sample_size = len(lengths)
        logging_output = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample_size,
            "sample_size": sample_size,
        }
        if not model.training:
            with torch.no_grad():
                path = viterbi_decode(theta.float(), lengths)[:, 1:]
                valid = sample["target"].ge(0)
                logging_output["ncorrect"] = int((path.eq(sample["target"]) & valid).sum())
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        # DP_Omega(theta) - <theta, Y> per sentence (natural units)
        metrics.log_scalar("loss", loss / max(sample_size, 1), sample_size, round=4)
        if any("ncorrect" in log for log in logging_outputs):
            ncorrect = sum(log.get("ncorrect", 0) for log in logging_outputs)
            metrics.log_scalar(
                "token_accuracy", 100.0 * ncorrect / max(ntokens, 1), ntokens, round=2
            )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
