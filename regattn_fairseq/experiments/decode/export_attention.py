#!/usr/bin/env python
"""Write each sentence's attention matrix, for plots, from a checkpoint trained with
`--user-dir regattn_fairseq`.

Takes fairseq-generate's options plus --attention-output FILE, an attention export
(`attention_format`: one JSON record per sentence, whose "mapping" is {"name", "params",
"device"}).
Seq2seq tasks: the target is the best beam-search hypothesis (--beam ...); its attention is
recomputed by one teacher-forced pass over the unpadded sentence (for the Transformer, the
last layer's cross-attention averaged over heads, as fairseq reports it).
regattn_snli: src_tokens is the premise, tgt_tokens the hypothesis, the single row is the
hypothesis' attention over the premise, and "label"/"prediction" are added.
Continuous attention (--attention-domain continuous): "attention" is the density's mass per
source token, and the record adds "continuous" (the options), "density" ({"mu", "sigma_sq",
"support"}: one entry per row; support [low, high] for the truncated parabola, null for the
Gaussian, whose support is the real line) and, when mu and sigma^2 come from the discrete
attention, "discrete_attention" (its rows, like "attention").

  python scripts/export_attention.py DATA --user-dir regattn_fairseq --path ckpt.pt \\
      --task translation -s de -t en --gen-subset test --beam 5 --attention-output attn.jsonl
"""

import ast

import torch
from fairseq import checkpoint_utils, options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from regattn.continuous import DENSITY_DECLARATIONS, ContinuousAttention, density_support
from regattn_fairseq.experiments.decode.attention_format import export_writer
from regattn_fairseq.fairseq_adapter import decoder_attention
from regattn_fairseq.modules import AttentionNormalizer


class _ContinuousRecorder:
    """Records, through forward hooks, what the continuous attention of `model` computed in
    each call since the last `clear()`: the density's parameters and the discrete attention
    they came from. A model without continuous attention records nothing."""

    def __init__(self, model):
        self.density = next(
            (m.density for m in model.modules() if isinstance(m, ContinuousAttention)), None
        )
        self.mu, self.sigma_sq, self.discrete = [], [], []
        if self.density is None:
            return
        for module in model.modules():
            if isinstance(module, ContinuousAttention):
                module.register_forward_hook(self._record_density)
            elif isinstance(module, AttentionNormalizer):
                module.register_forward_hook(self._record_discrete)

    def _record_density(self, module, inputs, output):
        self.mu.append(output.mu)
        self.sigma_sq.append(output.sigma_sq)

    def _record_discrete(self, module, inputs, output):
        self.discrete.append(output)

    def clear(self):
        self.mu, self.sigma_sq, self.discrete = [], [], []

    def fields(self, index, length):
        """The record fields of row `index` of each call (calls stacked as rows), over the
        first `length` source positions."""
        if self.density is None:
            return {}
        mu = torch.stack([m[index] for m in self.mu])
        sigma_sq = torch.stack([s[index] for s in self.sigma_sq])
        if not DENSITY_DECLARATIONS[self.density].compact_support:
            support = [None] * len(mu)
        else:
            low, high = density_support(mu, sigma_sq, self.density)
            support = torch.stack([low, high], dim=-1).tolist()
        fields = {"density": {"mu": mu.tolist(), "sigma_sq": sigma_sq.tolist(), "support": support}}
        if self.discrete:
            fields["discrete_attention"] = [d[index, :length].tolist() for d in self.discrete]
        return fields


def _strip_pad(tokens, pad):
    return tokens[tokens.ne(pad)]


def _words(dictionary, tokens):
    return [dictionary[t] for t in tokens.tolist()]


def _seq2seq_records(task, model, generator, sample, device, recorder):
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    hypos = task.inference_step(generator, [model], sample)
    for i, sample_id in enumerate(sample["id"].tolist()):
        src = _strip_pad(sample["net_input"]["src_tokens"][i], src_dict.pad()).unsqueeze(0)
        if not hypos[i]:
            raise SystemExit(
                f"export_attention: beam search gave sentence {sample_id} no hypothesis"
            )
        tgt = hypos[i][0]["tokens"].unsqueeze(0)
        prev = torch.cat([tgt.new_full((1, 1), tgt_dict.eos()), tgt[:, :-1]], dim=1)
        recorder.clear()
        _, extra = model(
            src.to(device), torch.tensor([src.size(1)], device=device), prev.to(device)
        )
        attn = decoder_attention(extra)  # 1 x tgt x src
        yield {
            "id": sample_id,
            "src_tokens": _words(src_dict, src[0]),
            "tgt_tokens": _words(tgt_dict, tgt[0]),
            "attention": attn[0].tolist(),
            **recorder.fields(0, src.size(1)),
        }


def _snli_records(task, model, sample, recorder):
    net_input = sample["net_input"]
    recorder.clear()
    logits, extra = model(**net_input)
    for i, sample_id in enumerate(sample["id"].tolist()):
        premise_len = int(net_input["premise_lengths"][i])
        hypothesis_len = int(net_input["hypothesis_lengths"][i])
        yield {
            "id": sample_id,
            "src_tokens": _words(
                task.source_dictionary, net_input["premise_tokens"][i, :premise_len]
            ),
            "tgt_tokens": _words(
                task.source_dictionary, net_input["hypothesis_tokens"][i, :hypothesis_len]
            ),
            "attention": [extra["attn"][i, :premise_len].tolist()],
            "label": task.labels[int(sample["target"][i])],
            "prediction": task.labels[int(logits[i].argmax())],
            **recorder.fields(i, premise_len),
        }


def main(argv=None):
    parser = options.get_generation_parser()
    parser.add_argument(
        "--attention-output",
        required=True,
        metavar="FILE",
        help="JSON-lines file to write the attention matrices to",
    )
    args = options.parse_args_and_arch(parser, argv)
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)

    task = tasks.setup_task(cfg.task)
    models, _ = checkpoint_utils.load_model_ensemble(
        [cfg.common_eval.path],
        arg_overrides=ast.literal_eval(cfg.common_eval.model_overrides),
        task=task,
    )
    model = models[0].eval()
    device = torch.device("cuda" if torch.cuda.is_available() and not cfg.common.cpu else "cpu")
    model.to(device)
    mapping = model.attention_spec.describe()
    continuous_spec = getattr(model, "continuous_spec", None)  # the Transformer has none
    continuous_options = (
        {} if continuous_spec is None else {"continuous": continuous_spec.describe()}
    )
    recorder = _ContinuousRecorder(model)

    split = cfg.dataset.gen_subset
    task.load_dataset(split)
    batches = task.get_batch_iterator(
        dataset=task.dataset(split),
        max_tokens=cfg.dataset.max_tokens,
        max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        # fairseq drops a last batch smaller than this multiple: keep every sentence
        required_batch_size_multiple=1,
        num_workers=cfg.dataset.num_workers,
    ).next_epoch_itr(shuffle=False)
    is_snli = cfg.task._name == "regattn_snli"
    generator = None if is_snli else task.build_generator([model], cfg.generation)

    with export_writer(args.attention_output) as write, torch.no_grad():
        for sample in batches:
            sample = utils.move_to_cuda(sample) if device.type == "cuda" else sample
            records = (
                _snli_records(task, model, sample, recorder)
                if is_snli
                else _seq2seq_records(task, model, generator, sample, device, recorder)
            )
            for record in records:
                write({**record, "mapping": mapping, **continuous_options})


if __name__ == "__main__":
    main()
