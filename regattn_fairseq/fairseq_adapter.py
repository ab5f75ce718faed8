"""Every use regattn_fairseq makes of fairseq internals: private names, behaviour fairseq does
not document, and process-wide patches. Nothing else in the plugin touches them; the rest uses
fairseq's public extension points (register_model, the build_* hooks, FairseqTask, ...).

Each function says why it is needed and what breaks if fairseq changes. The contract that
keeps them honest is tests/plugin/test_stock_equivalence.py: with --attention softmax the
plugin's models compute what stock fairseq's `lstm` and `transformer` compute (evaluation,
training mode, beam search), and each function below is exercised there, except the two of
data-parallel training (`allow_cpu_data_parallel`, `save_parameters_on_every_rank`), which
tests/experiments/train/test_distributed.py exercises, and the wandb one
(`log_progress_into_active_wandb_run`), tests/experiments/train/test_tracking.py's, and the
sparse-output beam search (`finish_sparse_output_beam_search`),
tests/plugin/test_fenchel_young_criterion.py's, and the resume's batches
(`resume_on_the_batches_of_an_uninterrupted_run`), tests/plugin/test_resume_batches.py's. Run those
tests before adding a fairseq version to TESTED_FAIRSEQ_VERSIONS.

Behaviour relied on without a call to route here: fairseq's `TransformerConfig.from_namespace`
returns an instance of the config class unchanged, so the `RegattnTransformerConfig` built in
`RegattnTransformerModel.build_model` (with the attention fields) reaches every layer. If it
ever rebuilt a plain TransformerConfig, `attention_spec_from_cfg` would fail at model build
("model config has no --attention"), never train softmax silently.
"""

import argparse
import functools
import json
import logging
import os
import sys
from pathlib import Path

import fairseq

# `fairseq.__version__` of the releases the contract tests pass on: the `fairseq-fixed==0.12.3.1`
# package (a Python 3.11+ fix of fairseq's main branch) reports 0.12.3.1.
TESTED_FAIRSEQ_VERSIONS = ("0.12.3.1",)


def check_fairseq_version(version: str) -> None:
    """Refuses a fairseq this plugin was not tested with: the functions below depend on
    fairseq's internals, and an untested version can fail obscurely or, worse, train with
    softmax where a sparse mapping was asked for."""
    if version not in TESTED_FAIRSEQ_VERSIONS:
        raise ImportError(
            f"regattn_fairseq was tested with fairseq {', '.join(TESTED_FAIRSEQ_VERSIONS)} "
            f"(pip package fairseq-fixed==0.12.3.1), but fairseq {version} is installed. "
            "Install the tested version (pip install 'fairseq-fixed==0.12.3.1'), or, to support "
            f"{version}, run tests/plugin/test_stock_equivalence.py against it and add it to "
            "TESTED_FAIRSEQ_VERSIONS in regattn_fairseq/fairseq_adapter.py once they pass."
        )


check_fairseq_version(fairseq.__version__)

import torch  # noqa: E402  (after the version check, so an untested fairseq fails here first)
from fairseq import checkpoint_utils, search, sequence_generator  # noqa: E402
from fairseq import trainer as fairseq_trainer  # noqa: E402
from fairseq.distributed import fsdp_wrap  # noqa: E402
from fairseq.logging import progress_bar  # noqa: E402
from fairseq.models import distributed_fairseq_model  # noqa: E402
from fairseq.models.lstm import AttentionLayer  # noqa: E402
from fairseq.modules import MultiheadAttention  # noqa: E402
from fairseq.modules.checkpoint_activations import checkpoint_wrapper  # noqa: E402


def allow_namespace_in_checkpoints() -> None:
    """Lets torch.load's default `weights_only=True` read fairseq checkpoints of argparse-style
    models (regattn_transformer, like fairseq's `transformer`).

    fairseq saves those models' argparse.Namespace in the checkpoint and loads it with a plain
    `torch.load(f, map_location=...)` (checkpoint_utils.load_checkpoint_to_cpu), which since
    PyTorch 2.6 rejects any class not on the allowlist. The allowlist must be process-wide:
    fairseq-generate, fairseq-validate, fairseq-interactive and load_model_ensemble make that
    call themselves, and we cannot pass them an argument. Allowing exactly argparse.Namespace is
    safe: the weights-only unpickler rebuilds it by setting attributes (Namespace has no
    __setstate__ or __reduce__ that runs code), every value inside must still be a type the
    unpickler allows, and every other class stays rejected.
    If fairseq passed weights_only=False or its own allowlist, this would become unnecessary
    (harmless); if it saved other classes, loading regattn checkpoints would fail naming them.
    Idempotent: the registration path calls it once, a second call adds nothing.
    """
    if argparse.Namespace not in torch.serialization.get_safe_globals():
        torch.serialization.add_safe_globals([argparse.Namespace])


# The log-probability given to the EOS that ends a hypothesis at the maximum length where the
# model gives EOS probability 0 (log 0 = -inf, which fairseq would drop): a penalty of 1e5 nats.
# It ranks such a truncated hypothesis below one that ended by the model's own EOS unless that
# one's tokens average under -1e5/max_len nats (-500 at fairseq's max_len_b = 200), and it is
# small enough that float32 scores still separate truncated hypotheses by their tokens' scores
# (the float32 spacing at 1e5 is 0.008 nats).
TRUNCATED_EOS_LOG_PROB = -1e5


class _SparseOutputBeamSearch(search.BeamSearch):
    """fairseq's beam search, able to finish every sentence when the output mapping gives
    tokens exact zeros (sparsemax, entmax: log-probability -inf).

    fairseq's generator keeps only candidates with a finite score, ends a sentence once it has
    `beam` hypotheses or at the maximum length (`step >= max_len`, where every token but EOS is
    ruled out), and asserts that every sentence has then ended. Under a sparse output mapping
    that fails (`AssertionError: <max_len> < <max_len>`), and this search mends it in three ways:

    - A sentence with fewer tokens of nonzero probability than the beam gets its beam filled
      with -inf candidates, which can never end; once its finite hypotheses have ended it would
      never have `beam` of them. `exhausted` marks, at each step, the sentences left with no
      finite continuation, and `_SparseOutputSequenceGenerator` ends them there: running them on
      to the maximum length could only add -inf hypotheses (and cost up to max_len steps).
    - EOS has probability 0 in the hypotheses still open at the maximum length: none could end.
      At that step (the one where every non-EOS token of every hypothesis is -inf, which the
      generator forces, and step > 0) EOS gets TRUNCATED_EOS_LOG_PROB where the model gave it
      -inf, so the sentence ends, truncated, ranked below any hypothesis that ended by the
      model's own EOS.
    - `stop_on_max_len` (fairseq's own flag, set by its prefix-constrained search) lets the
      generator stop at the maximum length with the hypotheses it has, for a sentence whose
      open hypotheses all have probability 0 there, instead of asserting.

    A model whose tokens never get exactly 0 (softmax) gets fairseq's search unchanged
    (tests/plugin/test_fenchel_young_criterion.py).
    """

    def __init__(self, tgt_dict):
        super().__init__(tgt_dict)
        self.stop_on_max_len = True
        # (current batch,) bool after each step: the sentence has no finite non-EOS candidate
        self.exhausted = None

    def step(
        self,
        step,
        lprobs,
        scores,
        prev_output_tokens=None,
        original_batch_idxs=None,
        candidate_multiple: int = 2,
    ):
        eos = lprobs[..., self.eos]
        if step > 0 and eos.isneginf().any() and self._only_eos_left(lprobs):
            lprobs = lprobs.clone()
            lprobs[..., self.eos] = eos.masked_fill(eos.isneginf(), TRUNCATED_EOS_LOG_PROB)
        cand_scores, cand_indices, cand_beams = super().step(
            step, lprobs, scores, prev_output_tokens, original_batch_idxs, candidate_multiple
        )
        # a finite non-EOS continuation, if there is one, is among these candidates: the top
        # 2 x beam hold at most one EOS per hypothesis
        live = cand_scores.isfinite() & cand_indices.ne(self.eos)
        self.exhausted = ~live.any(dim=1)
        return cand_scores, cand_indices, cand_beams

    def _only_eos_left(self, lprobs) -> bool:
        """Whether every non-EOS token of every hypothesis is -inf: the maximum-length step,
        where the generator forces it. Called on every decoding step of a sparse model, so the
        first hypothesis is looked at alone first: at any other step it has a finite token."""
        rows = lprobs.reshape(-1, lprobs.size(-1))
        for checked in (rows[:1], rows):
            if (
                checked[:, : self.eos].isfinite().any()
                or checked[:, self.eos + 1 :].isfinite().any()
            ):
                return False
        return True


class _SparseOutputSequenceGenerator(sequence_generator.SequenceGenerator):
    """fairseq's generator, which also ends a sentence that its search marks `exhausted` (no
    finite continuation left: `_SparseOutputBeamSearch`) when one of its hypotheses ends."""

    def is_finished(self, step, unfin_idx, max_len, finalized_sent_len, beam_size):
        exhausted = getattr(self.search, "exhausted", None)
        if exhausted is not None and bool(exhausted[unfin_idx]):
            return True
        return super().is_finished(step, unfin_idx, max_len, finalized_sent_len, beam_size)


def finish_sparse_output_beam_search() -> None:
    """Makes fairseq's default beam search and generator (fairseq-generate,
    `task.build_generator`, a `SequenceGenerator` built after this) the
    `_SparseOutputBeamSearch` and `_SparseOutputSequenceGenerator`, so that models with a
    sparse output mapping decode every sentence to its end.

    `FairseqTask.build_generator` builds `fairseq.search.BeamSearch(tgt_dict)` when no other
    strategy (sampling, diverse beam, constraints, prefixes) is asked for, and the generator
    from `fairseq.sequence_generator.SequenceGenerator`, reading both names in their modules at
    each call; fairseq-generate gives us no argument to choose other classes, so the names are
    replaced there. Both subclasses behave as fairseq's unless tokens have probability exactly 0.
    If fairseq built its beam search elsewhere, sparse-output decoding would fail again with
    fairseq's AssertionError, or run every batch to the maximum length
    (tests/plugin/test_fenchel_young_criterion.py). Idempotent.
    """
    search.BeamSearch = _SparseOutputBeamSearch
    sequence_generator.SequenceGenerator = _SparseOutputSequenceGenerator


def use_python_attention_path(attention: MultiheadAttention) -> None:
    """Keeps fairseq's MultiheadAttention.forward off PyTorch's fused path.

    Whenever there is no incremental state and no static_kv (all of training, and evaluation
    outside beam search), forward returns F.multi_head_attention_forward, PyTorch's own
    softmax, and ignores `before_softmax` -- unless `skip_embed_dim_check` is set, which only
    the private `_set_skip_embed_dim_check()` does (it exists for pruning). Without it the
    model would train with softmax and decode with the configured mapping. If fairseq renamed
    the method this raises AttributeError at model build; if it changed the fast-path
    condition, `masked_attention_scores` would get the fused path's output and raise.
    """
    attention._set_skip_embed_dim_check()


def masked_attention_scores(
    attention: MultiheadAttention,
    query,
    key,
    value,
    key_padding_mask,
    incremental_state,
    static_kv,
    attn_mask,
):
    """fairseq's attention scores before its softmax, as (scores, mask, v):
    scores and mask bsz x heads x tgt_len x src_len (mask True where attention may go, scores
    0 elsewhere), v kv_bsz x 1 x heads x src_len x head_dim (bsz = kv_bsz * beam).

    fairseq's forward has no hook for the normalizer; `before_softmax=True` returns its scores
    with every excluded position (key padding, the decoder's future mask, a -inf attn_mask)
    set to -inf, a convention it does not document. The mappings would take those -inf scores
    as masked positions too, but only after their kernels reject the row (see
    regattn.mappings._rows.neg_inf_masked): a mask from here costs less. If fairseq switched
    to a finite fill value the mask would
    keep padded positions: softmax would hide that, but the contract test that compares the
    mask with the masks fairseq was given would fail. During beam search (`set_beam_size`) the
    cross-attention keeps one copy of the source per sentence: v has kv_bsz * heads rows, not
    bsz * heads.
    """
    scores, v = MultiheadAttention.forward(
        attention,
        query,
        key,
        value,
        key_padding_mask=key_padding_mask,
        incremental_state=incremental_state,
        static_kv=static_kv,
        attn_mask=attn_mask,
        before_softmax=True,
    )
    tgt_len, bsz, _ = query.size()
    heads = attention.num_heads
    if scores.dim() != 3 or scores.size(0) != bsz * heads or scores.size(1) != tgt_len:
        raise RuntimeError(
            f"fairseq {fairseq.__version__}'s MultiheadAttention ignored before_softmax=True "
            f"(returned a tensor of shape {tuple(scores.shape)}): it would normalize with its "
            "own softmax; see use_python_attention_path in regattn_fairseq/fairseq_adapter.py"
        )
    src_len = scores.size(-1)
    mask = scores != float("-inf")
    scores = scores.masked_fill(~mask, 0.0)
    kv_bsz = v.size(0) // heads
    return (
        scores.view(bsz, heads, tgt_len, src_len),
        mask.view(bsz, heads, tgt_len, src_len),
        v.view(kv_bsz, 1, heads, src_len, attention.head_dim),
    )


def fused_attention_inputs(
    attention: MultiheadAttention,
    query,
    key,
    value,
    key_padding_mask,
    incremental_state,
    attn_mask,
):
    """What `regattn.attention.sparse_attention` needs to compute fairseq's attention without
    its scores matrix: (q, k, v, mask, causal), q bsz x heads x tgt_len x head_dim (not yet
    multiplied by `attention.scaling`), k and v bsz x heads x src_len x head_dim, mask bool
    broadcastable to bsz x heads x tgt_len x src_len (True where attention may go) or None,
    causal whether the decoder's future mask applies; or None where fairseq's forward does
    more than that.

    This repeats the projections of fairseq's MultiheadAttention.forward (self-attention
    projects the query three ways; encoder-decoder attention projects the key for both k
    and v) and reads its mask conventions: key_padding_mask True (or 1) at padding,
    attn_mask additive, -inf where attention may not go. The decoder's future mask
    (`buffered_future_mask`: -inf above the diagonal) is passed as causal=True, so that no
    tgt_len x src_len mask reaches the kernel; attn_mask is read on the host once to tell
    (a synchronization). What it does not repeat is left to the row-wise path (None):
    incremental decoding (keys cached in the incremental state), beam search's one source per
    sentence, bias_k/bias_v, add_zero_attn, a non-float attn_mask (fairseq adds
    it to the scores) and one with finite nonzero entries (a bias on the scores). If fairseq
    changed its projections or conventions, the fused and row-wise paths would disagree:
    tests/plugin/test_fused_attention.py compares them.
    """
    # static_kv needs no check: it only says where fairseq caches the keys in the incremental
    # state (the decoder passes it to every cross-attention, training included)
    if (
        incremental_state is not None
        or attention.bias_k is not None
        or attention.add_zero_attn
        or (attention.encoder_decoder_attention and attention.beam_size > 1)
        or (attn_mask is not None and not attn_mask.is_floating_point())
    ):
        return None
    tgt_len, bsz, _ = query.size()
    heads, head_dim = attention.num_heads, attention.head_dim
    allowed, causal = None, False
    if attn_mask is not None:
        allowed = attn_mask != float("-inf")
        flags = [attn_mask.masked_fill(~allowed, 0).any()]  # a bias
        if allowed.size(0) == allowed.size(1):
            flags.append((allowed == torch.ones_like(allowed).tril()).all())  # the future mask
        biased, *future = torch.stack(flags).tolist()  # one read on the host
        causal = bool(future and future[0])
        if biased:
            return None
        allowed = None if causal else allowed.view(1, 1, *allowed.shape)
    if key_padding_mask is not None:
        keep = ~key_padding_mask.to(torch.bool).view(bsz, 1, 1, -1)
        allowed = keep if allowed is None else allowed & keep
    if attention.self_attention:
        key = value = query
    elif attention.encoder_decoder_attention:
        value = key
    q = attention.q_proj(query)
    k = attention.k_proj(key)
    v = attention.v_proj(value)

    def heads_first(x):  # length x bsz x (heads * head_dim) -> bsz x heads x length x head_dim
        return x.view(x.size(0), bsz, heads, head_dim).permute(1, 2, 0, 3)

    return heads_first(q), heads_first(k), heads_first(v), allowed, causal


def wrap_transformer_layer(layer, cfg):
    """What fairseq's TransformerEncoderBase.build_encoder_layer and TransformerDecoderBase.
    build_decoder_layer do to the layer they build: activation checkpointing, then FSDP
    wrapping (FSDP always wraps a checkpointed layer).

    Those hooks construct the stock layer class inline, so an override that builds another
    layer must repeat the wrapping. If fairseq added a wrapper there, regattn layers would lack
    it (e.g. --checkpoint-activations would stop saving memory); the contract test trains with
    and without --checkpoint-activations against stock fairseq.
    """
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


def replace_lstm_attention(decoder, layer: AttentionLayer) -> None:
    """Puts `layer` in place of the AttentionLayer that fairseq's LSTMDecoder.__init__ builds
    inline as `decoder.attention` (there is no factory hook to pass our own).

    `layer` must have the stock layer's parameter names and shapes, so that checkpoints and the
    stock `lstm` stay interchangeable. If fairseq renamed the attribute or stopped calling it
    from forward, the stock softmax layer would run: the rename is caught here, the call by the
    contract test (the decoder's attention must be this layer after building).
    """
    stock = getattr(decoder, "attention", None)
    if not isinstance(stock, AttentionLayer):
        raise RuntimeError(
            f"fairseq {fairseq.__version__}'s LSTMDecoder has no AttentionLayer at "
            f"`.attention` (found {type(stock).__name__}): cannot install the regattn attention"
        )
    shapes = {name: p.shape for name, p in stock.named_parameters()}
    ours = {name: p.shape for name, p in layer.named_parameters() if name in shapes}
    if ours != shapes:
        raise RuntimeError(
            f"the replacement LSTM attention's parameters {ours} differ from "
            f"fairseq's {shapes}: checkpoints would not be interchangeable"
        )
    decoder.attention = layer


def decoder_attention(extra):
    """The attention a seq2seq model's forward reports (bsz x tgt_len x src_len), from its
    second output: fairseq's LSTMDecoder returns the tensor itself, TransformerDecoder a dict
    whose "attn" is a one-element list. Undocumented; fairseq's SequenceGenerator reads it the
    same way. A new form raises here rather than exporting the wrong tensor."""
    if isinstance(extra, torch.Tensor):
        return extra
    if isinstance(extra, dict) and isinstance(extra.get("attn"), list) and len(extra["attn"]) == 1:
        return extra["attn"][0]
    raise TypeError(f"unrecognised attention output of a fairseq decoder: {type(extra).__name__}")


def reset_best_checkpoint_loss() -> None:
    """Forgets the best validation loss seen so far in this process, and early stopping's
    count of validations without improvement.

    fairseq keeps them on function attributes: `checkpoint_utils.save_checkpoint.best`
    (checkpoint_best.pt is written only when a validation loss beats it) and
    `fairseq_cli.train.should_stop_early.best` / `.num_runs` (``checkpoint.patience``). A
    second training run in the same process (a Hydra multirun job, a test) would otherwise
    compare against the first run's best, and could stop after fewer epochs than its patience.
    A run that resumes restores its checkpoint best from checkpoint_last.pt afterwards, but
    not early stopping's count, which fairseq restarts at a resume (a resumed run would train
    more epochs than an uninterrupted one): `resume_early_stopping` gives it back. If fairseq
    moved these values elsewhere, this would silently do nothing: the contract test checks that
    training sets them.
    """
    # fairseq_cli.train holds state only once a training has imported it (importing it here
    # would configure the root logger for every user of the plugin)
    train_module = sys.modules.get("fairseq_cli.train")
    states = [(checkpoint_utils.save_checkpoint, ("best",))]
    if train_module is not None:
        states.append((train_module.should_stop_early, ("best", "num_runs")))
    for function, names in states:
        for name in names:
            if hasattr(function, name):
                delattr(function, name)


# the early-stopping state a resumed training starts from, set in its environment (JSON, see
# `resume_early_stopping`)
EARLY_STOPPING_ENV = "REGATTN_EARLY_STOPPING"


def resume_early_stopping(save_dir: str | Path) -> dict | None:
    """Gives fairseq's early stopping of a resumed run the state it had at the checkpoint the
    run resumes from, so that it stops where an uninterrupted run would.

    fairseq keeps that state on `fairseq_cli.train.should_stop_early` (``best``, ``num_runs``),
    in memory only, and a resumed run restarts the count: it trains more epochs than an
    uninterrupted one (see `reset_best_checkpoint_loss`). The state comes from the environment
    variable `EARLY_STOPPING_ENV`, ``{"save_dir", "best", "num_runs", "updates"}``, which the
    process that starts the training sets (the reproduction suite replays the run's log:
    `experiments.train.fairseq_logs.early_stopping_state`); it is applied only to the run
    whose ``checkpoint.save_dir`` it names. Call it after `reset_best_checkpoint_loss`, at the
    start of the training job (`hydra_callbacks.FreshCheckpointBest`).

    Returns
    -------
    dict or None
        The state applied; None when the environment names none for this run.

    Raises
    ------
    RuntimeError
        a state is given but fairseq_cli.train is not imported (the callback ran outside
        fairseq-hydra-train): it would be lost silently.
    """
    given = os.environ.get(EARLY_STOPPING_ENV)
    if not given:
        return None
    state = json.loads(given)
    if Path(state["save_dir"]).resolve() != Path(save_dir).resolve() or state["best"] is None:
        return None
    train_module = sys.modules.get("fairseq_cli.train")
    if train_module is None:
        raise RuntimeError(
            f"{EARLY_STOPPING_ENV} is set for {save_dir}, but fairseq_cli.train is not imported: "
            "the early-stopping state can only be resumed inside fairseq's training"
        )
    stop = train_module.should_stop_early
    stop.best, stop.num_runs = state["best"], state["num_runs"]
    logging.getLogger(__name__).info(
        "early stopping resumed at %s updates: best %s, %s validation(s) without improvement",
        state["updates"],
        state["best"],
        state["num_runs"],
    )
    return state


def _train_iterator_with_the_batches_of_epoch_one(get_train_iterator):
    """fairseq's `Trainer.get_train_iterator`, which builds the batches of a run resumed at
    epoch E as an uninterrupted run built them (resume_on_the_batches_of_an_uninterrupted_run)."""

    @functools.wraps(get_train_iterator)
    def build(
        self,
        epoch,
        combine=True,
        load_dataset=True,
        data_selector=None,
        shard_batch_itr=True,
        disable_iterator_cache=False,
    ):
        rest = (data_selector, shard_batch_itr, disable_iterator_cache)
        split = self.cfg.dataset.train_subset
        # the calls whose batches an uninterrupted run builds at epoch 1 and keeps: a resume
        # (checkpoint_utils.load_checkpoint loads the data); the other cases are fairseq's own
        # per-epoch builds, from that epoch's seed, which a resume already repeats
        kept_from_epoch_one = (
            epoch > 1
            and load_dataset
            and not disable_iterator_cache
            and not self.cfg.dataset.update_epoch_batch_itr
            and not self.task.has_sharded_data(split)
        )
        if not kept_from_epoch_one:
            return get_train_iterator(self, epoch, combine, load_dataset, *rest)
        iterator = get_train_iterator(self, 1, combine, load_dataset, *rest)
        if not self.task.can_reuse_epoch_itr(self.task.dataset(split)):
            # fairseq rebuilds this dataset's batches every epoch, from that epoch's seed
            return get_train_iterator(self, epoch, combine, False, *rest)
        iterator.epoch = epoch  # the batches of epoch 1, shuffled in epoch E's order
        logging.getLogger(__name__).info(
            "resumed at epoch %s on the training batches of epoch 1, as the uninterrupted run",
            epoch,
        )
        return iterator

    build.regattn_batches_of_epoch_one = True
    return build


def resume_on_the_batches_of_an_uninterrupted_run() -> None:
    """Makes a fairseq training resumed from its checkpoint train on the batches an
    uninterrupted run of the same seed trains on, so that it continues that run exactly.

    fairseq groups a training set into batches once, the first time the trainer asks for its
    iterator, ordering the examples under `numpy_seed(seed + epoch)` of that epoch
    (`FairseqTask.get_batch_iterator`), and keeps those batches for every later epoch,
    reshuffling only their order (`numpy_seed(seed + epoch)` again, in `EpochBatchIterator`).
    An uninterrupted run groups them at epoch 1; a run resumed at epoch E groups them anew, at
    epoch E, into different batches: from its resume on it is another run than its seed names,
    and training the seed again from scratch would not give its result. (Measured: a tiny
    Transformer trained 4 epochs, and 2 epochs then resumed to 4, ended with weights up to 0.07
    apart with dropout 0.3, 0.02 without; fairseq's per-update seeding makes everything else
    match.) `Trainer.get_train_iterator` is
    wrapped in fairseq's module so that, for a resume, it builds the iterator as at epoch 1 and
    then sets its epoch: the same batches, in epoch E's order. Data that fairseq groups anew at
    every epoch (sharded data, `update_epoch_batch_itr`, a dataset that cannot reuse its
    iterator) is left to fairseq, whose resume already matches there. If fairseq renamed the
    method this raises AttributeError at plugin import; if it grouped batches elsewhere, a
    resumed run would differ again (tests/plugin/test_resume_batches.py). Idempotent.
    """
    get_train_iterator = fairseq_trainer.Trainer.get_train_iterator
    if getattr(get_train_iterator, "regattn_batches_of_epoch_one", False):
        return
    fairseq_trainer.Trainer.get_train_iterator = _train_iterator_with_the_batches_of_epoch_one(
        get_train_iterator
    )


class _DataParallelOnAnyDevice(torch.nn.parallel.DistributedDataParallel):
    """torch's DistributedDataParallel, with fairseq's device arguments dropped for a model on
    the CPU (see allow_cpu_data_parallel)."""

    def __init__(self, module, device_ids=None, output_device=None, **kwargs):
        if all(p.device.type == "cpu" for p in module.parameters()):
            device_ids = output_device = None  # torch's rule for CPU modules
        super().__init__(module, device_ids=device_ids, output_device=output_device, **kwargs)


def allow_cpu_data_parallel() -> None:
    """Lets fairseq's data-parallel training (`--ddp-backend c10d`, torch DDP) run on CPUs.

    fairseq's DistributedFairseqModel always passes `device_ids=[device_id]` to torch's
    DistributedDataParallel, which torch rejects for a module on the CPU ("device_ids and
    output_device arguments only work with single-device/multiple-device GPU modules"): several
    CPU processes (gloo) could not train together, and the multi-process tests could not run
    the DDP code the GPUs run. The wrapper fairseq builds is replaced, in fairseq's module, by a
    subclass that drops those two arguments for a CPU module only; a model on a GPU gets
    exactly fairseq's call. If fairseq stopped importing `DistributedDataParallel` into that
    module this raises AttributeError at plugin import; if it built the wrapper elsewhere, CPU
    DDP would fail again with torch's error (tests/experiments/train/test_distributed.py).
    Idempotent.
    """
    if not hasattr(distributed_fairseq_model, "DistributedDataParallel"):
        raise AttributeError(
            f"fairseq {fairseq.__version__} no longer imports DistributedDataParallel into "
            "fairseq.models.distributed_fairseq_model: see allow_cpu_data_parallel"
        )
    distributed_fairseq_model.DistributedDataParallel = _DataParallelOnAnyDevice


# the folder `save_parameters_on_every_rank` writes to, when set in a training's environment
RANK_PARAMETERS_DIR_ENV = "REGATTN_RANK_PARAMETERS_DIR"


def save_parameters_on_every_rank(directory: str | Path) -> None:
    """Makes every data-parallel rank write its model's parameters, `directory/rank<R>.pt`,
    each time fairseq saves a checkpoint: the check that DDP keeps the ranks identical
    (tests/experiments/train/test_distributed.py; `REGATTN_RANK_PARAMETERS_DIR`, read at plugin
    import).

    fairseq writes checkpoints from rank 0 only, so a rank that drifted would go unnoticed.
    fairseq_cli.train calls `checkpoint_utils.save_checkpoint(cfg, trainer, epoch_itr,
    val_loss)` on every rank; it is wrapped in place. fairseq keeps the best validation loss on
    that function's attribute, looked up by the module-level name, so it lands on the wrapper,
    where `reset_best_checkpoint_loss` looks for it. If fairseq renamed the function this
    raises AttributeError; if it stopped calling it on every rank, the test would find a
    rank's file missing.
    """
    directory = Path(directory)
    save = checkpoint_utils.save_checkpoint

    def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
        saved = save(cfg, trainer, epoch_itr, val_loss)
        directory.mkdir(parents=True, exist_ok=True)
        state = {name: t.detach().cpu() for name, t in trainer.get_model().state_dict().items()}
        torch.save(state, directory / f"rank{trainer.data_parallel_rank}.pt")
        return saved

    checkpoint_utils.save_checkpoint = save_checkpoint


class _WandbProgressIntoActiveRun(progress_bar.WandBProgressBarWrapper):
    """fairseq's wandb progress-bar wrapper, which logs into the active wandb run where there
    is one instead of calling wandb.init again (see log_progress_into_active_wandb_run)."""

    def __init__(self, wrapped_bar, wandb_project, run_name=None):
        if progress_bar.wandb is not None and progress_bar.wandb.run is not None:
            self.wrapped_bar = wrapped_bar
        else:
            super().__init__(wrapped_bar, wandb_project, run_name=run_name)


def log_progress_into_active_wandb_run() -> None:
    """Makes fairseq's wandb hook (`common.wandb_project`) log the training curves into the
    wandb run already active in the process, without starting another.

    fairseq wraps every progress bar it builds (each epoch's training, each validation) in
    `progress_bar.WandBProgressBarWrapper`, whose __init__ calls
    `wandb.init(project=..., reinit=False)`, relying on wandb to hand back the active run.
    wandb 0.31 does hand it back, but only after creating a new run's folder: every progress
    bar leaves an empty `wandb/offline-run-*` folder (no run file) beside the real run. The
    wrapper `progress_bar.progress_bar` builds is replaced, in fairseq's module, by a subclass
    that skips wandb.init while a run is active; without one (fairseq-train's own
    --wandb-project) it starts one as fairseq does, which the next progress bars then log into.
    If fairseq renamed the wrapper this raises AttributeError at plugin import; if it built it
    elsewhere, the empty folders would come back
    (tests/experiments/train/test_tracking.py counts them). Idempotent.
    """
    progress_bar.WandBProgressBarWrapper = _WandbProgressIntoActiveRun


# fairseq's schema as a config group option, under a name that no config file has: the train
# configs list it first in their defaults (`- optional schema@_global_: fairseq`)
FAIRSEQ_SCHEMA_GROUP, FAIRSEQ_SCHEMA_OPTION = "schema", "fairseq"


def register_fairseq_schema() -> None:
    """Registers fairseq's config schema with Hydra as the option the train configs list
    (`FAIRSEQ_SCHEMA_GROUP`/`FAIRSEQ_SCHEMA_OPTION`), not under the train config's own name.

    fairseq-hydra-train (`fairseq_cli.hydra_train.cli_main`) stores `FairseqConfig` in Hydra's
    ConfigStore under the name of the config it runs (`hydra_init(cfg_name)`): Hydra then
    merges the schema under the file of that name ("automatic schema matching"), with a
    deprecation warning per composition ("'snli' is validated against ConfigStore schema with
    the same name"), and Hydra 1.2 drops the matching. Listed in the defaults instead, the
    schema is merged at the same place (first, below the file's own content): the composed
    config is the same (tests/experiments/train/test_hydra_configs.py compares them).
    `hydra_init` also stores each field's node (common, task, ...), as fairseq-hydra-train
    does; the schema it stores under its `cfg_name` goes under a name no config has. Under
    stock fairseq-hydra-train the option is missing and skipped (`optional`): those runs
    compose as before, warning as before. Idempotent, and a no-op while every node it stores is
    in the ConfigStore: storing builds each node from its dataclass again, about a quarter of
    a composition's time (`train.compose_config` calls this before each one).
    """
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq.dataclass.initialize import hydra_init
    from hydra.core.config_store import ConfigStore

    repo = ConfigStore.instance().repo
    schema = f"{FAIRSEQ_SCHEMA_GROUP}_{FAIRSEQ_SCHEMA_OPTION}"
    # checked by name, not remembered: a caller may take a node out of the store and put it
    # back (tests/experiments/train/test_hydra_configs.py's stock composition does)
    stored = all(f"{name}.yaml" in repo for name in (schema, *FairseqConfig.__dataclass_fields__))
    if stored and f"{FAIRSEQ_SCHEMA_OPTION}.yaml" in repo.get(FAIRSEQ_SCHEMA_GROUP, {}):
        return
    hydra_init(schema)
    ConfigStore.instance().store(
        group=FAIRSEQ_SCHEMA_GROUP, name=FAIRSEQ_SCHEMA_OPTION, node=FairseqConfig
    )


def fairseq_config_dir() -> Path:
    """fairseq's own config folder, first on fairseq-hydra-train's search path (its
    `hydra.main(config_path=...)`, relative to fairseq_cli/hydra_train.py)."""
    from fairseq_cli import train as fairseq_train

    return Path(fairseq_train.__file__).resolve().parent.parent / "fairseq" / "config"


def train_job(cfg) -> float:
    """The job of fairseq-hydra-train: `fairseq_cli.hydra_train._hydra_main` of fairseq
    0.12.3.1, line for line, for `regattn_fairseq.hydra_train`. fairseq's module is not
    imported: its own `hydra.main` decorator, without a version_base, runs (and warns) at
    import. If fairseq changes that function, compare them again before adding its version to
    TESTED_FAIRSEQ_VERSIONS.

    Returns
    -------
    float
        the best validation value (for Hydra's sweepers), inf without one.
    """
    from fairseq import distributed_utils, metrics
    from fairseq.dataclass.initialize import add_defaults
    from fairseq.dataclass.utils import omegaconf_no_object_check
    from fairseq.utils import reset_logging
    from fairseq_cli.train import main as pre_main
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    add_defaults(cfg)
    if cfg.common.reset_logging:
        reset_logging()  # Hydra hijacks logging
    elif HydraConfig.initialized():
        with open_dict(cfg):  # Hydra's logging under data parallelism (hydra issue 1126)
            cfg.job_logging_cfg = OmegaConf.to_container(
                HydraConfig.get().job_logging, resolve=True
            )
    with omegaconf_no_object_check():
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    try:
        if cfg.common.profile:
            with torch.cuda.profiler.profile(), torch.autograd.profiler.emit_nvtx():
                distributed_utils.call_main(cfg, pre_main)
        else:
            distributed_utils.call_main(cfg, pre_main)
    except BaseException as error:
        if not cfg.common.suppress_crashes:
            raise
        logging.getLogger("fairseq_cli.hydra_train").error("Crashed! " + str(error))
    try:
        best = metrics.get_smoothed_value("valid", cfg.checkpoint.best_checkpoint_metric)
    except Exception:
        best = None
    return float("inf") if best is None else best
