"""A fairseq training resumed from its checkpoint continues the run its seed names, exactly:
`fairseq_adapter.resume_on_the_batches_of_an_uninterrupted_run` (installed at plugin import)
makes the resumed run group its training batches as the uninterrupted run did, at epoch 1.
With dropout, so that fairseq's per-update seeding is part of what must match."""

import logging
from types import SimpleNamespace

import pytest
import torch
from fairseq import trainer as fairseq_trainer
from fairseq_helpers import COMMON_ARGS, MODEL_ARGS, SEQ2SEQ_TRAIN_ARGS, train_in_process

from regattn_fairseq import fairseq_adapter
from regattn_fairseq.experiments.train.fairseq_logs import BATCHES_OF_EPOCH_ONE, resumes

MAX_EPOCH = SEQ2SEQ_TRAIN_ARGS.index("--max-epoch") + 1
# checkpoint_last.pt is what a run resumes from
CHECKPOINTING = [arg for arg in COMMON_ARGS if arg != "--no-last-checkpoints"]
WITH_DROPOUT = [*MODEL_ARGS["regattn_transformer"][:-1], "0.3"]


def _train(data, save_dir, epochs, extra=()):
    """fairseq-train on the tiny translation data up to `epochs`; continues the run in
    `save_dir` when it holds one. Returns the training steps' losses, by update."""
    task_args = list(SEQ2SEQ_TRAIN_ARGS)
    task_args[MAX_EPOCH] = str(epochs)
    records = train_in_process(
        [str(data), *WITH_DROPOUT, *task_args, *CHECKPOINTING, "--save-dir", str(save_dir), *extra]
    )
    return {int(r["num_updates"]): r["loss"] for r in records if "loss" in r and "num_updates" in r}


def _parameters(save_dir):
    return torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["model"]


def _uninterrupted_and_resumed(data, tmp_path, extra=()):
    """(losses, parameters) of a 3-epoch run, and of the same run cut after epoch 2 and
    resumed to epoch 3."""
    uninterrupted = _train(data, tmp_path / "uninterrupted", 3, extra)
    _train(data, tmp_path / "resumed", 2, extra)
    resumed = _train(data, tmp_path / "resumed", 3, extra)
    return (
        (uninterrupted, _parameters(tmp_path / "uninterrupted")),
        (resumed, _parameters(tmp_path / "resumed")),
    )


def _same_run(first, second):
    (losses_a, params_a), (losses_b, params_b) = first, second
    after_resume = {u: loss for u, loss in losses_a.items() if u in losses_b}
    return (
        len(after_resume) > 0
        and after_resume == losses_b
        and params_a.keys() == params_b.keys()
        and all(torch.equal(params_a[name], params_b[name]) for name in params_a)
    )


def _log_text(caplog) -> str:
    """The captured records as a train.log has them (Hydra's job-logging format)."""
    return "\n".join(f"[{r.name}][{r.levelname}] - {r.getMessage()}" for r in caplog.records)


def test_a_resumed_run_continues_its_uninterrupted_run_exactly(translation_data, tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        uninterrupted, resumed = _uninterrupted_and_resumed(translation_data, tmp_path)
    # the log says so, once: at the resume
    said = [
        r.getMessage() for r in caplog.records if "training batches of epoch 1" in r.getMessage()
    ]
    assert said == [
        "resumed at epoch 3 on the training batches of epoch 1, as the uninterrupted run"
    ]
    # and the row's record of the resume reads it off the log: epoch 3, after epoch 2's updates
    updates = max(u for u in uninterrupted[0] if u not in resumed[0])
    assert updates < min(resumed[0])
    found = resumes(_log_text(caplog))
    assert [(r["epoch"], r["batches"]) for r in found] == [(3, BATCHES_OF_EPOCH_ONE)], found
    assert found[0]["updates"] >= updates
    # the resumed process logs epoch 3 only: every one of its steps is compared
    assert min(resumed[0]) > 1
    assert _same_run(uninterrupted, resumed)


def test_without_it_fairseq_resumes_on_other_batches(
    translation_data, tmp_path, monkeypatch, caplog
):
    """The check above can fail: fairseq's own iterator, which groups a resumed run's batches
    at its resume epoch, gives another run; the record of its resume says they were
    regrouped."""
    wrapped = fairseq_trainer.Trainer.get_train_iterator
    monkeypatch.setattr(fairseq_trainer.Trainer, "get_train_iterator", wrapped.__wrapped__)
    with caplog.at_level(logging.INFO):
        uninterrupted, resumed = _uninterrupted_and_resumed(translation_data, tmp_path)
    assert not _same_run(uninterrupted, resumed)
    found = resumes(_log_text(caplog))
    assert [(r["epoch"], r["batches"]) for r in found] == [(3, "regrouped at epoch 3")], found


def test_batches_fairseq_groups_every_epoch_are_left_to_it(translation_data, tmp_path):
    """With --update-epoch-batch-itr fairseq groups the batches anew each epoch from that
    epoch's seed, and its own resume already matches."""
    uninterrupted, resumed = _uninterrupted_and_resumed(
        translation_data, tmp_path, ["--update-epoch-batch-itr", "True"]
    )
    assert _same_run(uninterrupted, resumed)


@pytest.mark.parametrize("calls", [1, 2])
def test_installing_it_again_wraps_once(monkeypatch, calls):
    original = fairseq_trainer.Trainer.get_train_iterator.__wrapped__
    monkeypatch.setattr(fairseq_trainer.Trainer, "get_train_iterator", original)
    for _ in range(calls):
        fairseq_adapter.resume_on_the_batches_of_an_uninterrupted_run()
    installed = fairseq_trainer.Trainer.get_train_iterator
    assert installed.regattn_batches_of_epoch_one
    assert installed.__wrapped__ is original


class _Task:
    def __init__(self, reusable, sharded=False):
        self.reusable, self.sharded = reusable, sharded

    def has_sharded_data(self, split):
        return self.sharded

    def dataset(self, split):
        return split

    def can_reuse_epoch_itr(self, dataset):
        return self.reusable


def _fake_trainer(task, update_epoch_batch_itr=False):
    """A trainer as the wrapper sees it, and the calls it makes to fairseq's method, which
    returns an iterator at the epoch asked for."""
    calls = []

    def get_train_iterator(self, epoch, combine, load_dataset, *rest):
        calls.append((epoch, load_dataset))
        return SimpleNamespace(epoch=epoch)

    build = fairseq_adapter._train_iterator_with_the_batches_of_epoch_one(get_train_iterator)
    dataset = SimpleNamespace(train_subset="train", update_epoch_batch_itr=update_epoch_batch_itr)
    trainer = SimpleNamespace(cfg=SimpleNamespace(dataset=dataset), task=task)
    return trainer, build, calls


@pytest.mark.parametrize(
    ("task", "update_epoch_batch_itr", "kwargs", "calls"),
    [
        # a resume: the batches of epoch 1, in epoch 5's order
        (_Task(reusable=True), False, {}, [(1, True)]),
        # a dataset that cannot reuse its batches (regattn_ner's): grouped at epoch 5, as fairseq
        (_Task(reusable=False), False, {}, [(1, True), (5, False)]),
        # fairseq's own per-epoch builds: passed through
        (_Task(reusable=True, sharded=True), False, {}, [(5, True)]),
        (_Task(reusable=True), True, {}, [(5, True)]),
        (_Task(reusable=True), False, {"disable_iterator_cache": True}, [(5, True)]),
        # an uninterrupted run's later epochs (the data loaded once): fairseq's cached iterator
        (_Task(reusable=True), False, {"load_dataset": False}, [(5, False)]),
    ],
)
def test_which_calls_get_the_batches_of_epoch_one(task, update_epoch_batch_itr, kwargs, calls):
    trainer, build, made = _fake_trainer(task, update_epoch_batch_itr)
    iterator = build(trainer, 5, **kwargs)
    assert made == calls
    assert iterator.epoch == 5
