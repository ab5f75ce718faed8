"""fairseq's log lines: JSON records (`--log-format json`, and fairseq-hydra-train's default
log; each a JSON object at the end of a line, after a logger prefix), the lines that say a
checkpoint was saved or a run resumed from one, and which lines are the training's progress."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_JSON_TAIL = re.compile(r"(\{.*\})\s*$")

# fairseq's progress records (its loggers train_inner, train, valid and valid_<subset>), the
# checkpoints it saves, its early stopping and its errors
_PROGRESS = re.compile(
    r"\]\[(?:train_inner|train|valid\w*)\]\[INFO\]|Saved checkpoint|early stop"
    r"|\]\[(?:ERROR|CRITICAL)\]"
)


def is_progress(line: str) -> bool:
    """Whether a training log line is shown on the terminal (`tools.run_logged`'s `show`): the
    training's progress (each logged interval, epoch and validation as fairseq's JSON record,
    each checkpoint saved, early stopping) and its errors. The rest, which every run prints
    (the composed config, the model printout, library warnings such as torch's FutureWarning
    about `torch.cuda.amp.autocast` that fairseq's training step raises even on a CPU), stays
    in the run's train.log; a failure's message quotes the log's last lines (issue #46).
    """
    return _PROGRESS.search(line) is not None


def json_records(text: str) -> list[dict]:
    """Every JSON object that ends a line of a fairseq log, in order.

    Parameters
    ----------
    text : str
        the log (several lines).

    Returns
    -------
    list[dict]
        The parsed objects; lines whose brace-delimited tail is not JSON (a printed Python
        dict, say) are skipped.
    """
    records = []
    for line in text.splitlines():
        match = _JSON_TAIL.search(line)
        if match:
            try:
                record = json.loads(match.group(1))
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def last_record_with(text: str, key: str) -> dict | None:
    """The last JSON record of a fairseq log that has `key`.

    Parameters
    ----------
    text : str
        the log.
    key : str
        a statistic's name as fairseq logs it, e.g. ``"train_wps"`` or
        ``"test_accuracy"`` (JSON logs prefix the subset).

    Returns
    -------
    dict | None
        That record, or None when no record has the key.
    """
    found = None
    for record in json_records(text):
        if key in record:
            found = record
    return found


# fairseq's line for each checkpoint it saves (checkpoint_utils.save_checkpoint); every save
# also writes checkpoint_last.pt, which a resumed run loads
_SAVED_CHECKPOINT = re.compile(r"Saved checkpoint \S+ \(epoch (\d+) @ (\d+) updates")


# fairseq's line when a run resumes from its checkpoint_last.pt (Trainer.load_checkpoint): the
# epoch it resumes at and the updates done; the plugin's when it keeps epoch 1's batches
# (fairseq_adapter.resume_on_the_batches_of_an_uninterrupted_run)
_LOADED_CHECKPOINT = re.compile(r"Loaded checkpoint \S+ \(epoch (\d+) @ (\d+) updates\)")
_KEPT_BATCHES = re.compile(r"resumed at epoch (\d+) on the training batches of epoch 1")
BATCHES_OF_EPOCH_ONE = "epoch 1's, as the uninterrupted run"


def resumes(text: str) -> list[dict]:
    """Each resume of a training log from its checkpoint, in order: the epoch it resumed at,
    the updates done before, and on which batches it went on.

    The batches are epoch 1's (`BATCHES_OF_EPOCH_ONE`) where the plugin kept them, and
    ``"regrouped at epoch E"`` otherwise: by fairseq itself before the plugin kept them
    (4068ff3), so not the uninterrupted run's; or where fairseq regroups every epoch anyway
    (sharded data, ``update_epoch_batch_itr``, regattn_ner's dataset), whose resume the
    uninterrupted run matches.

    Parameters
    ----------
    text : str
        the training log (a resumed run appends to it).

    Returns
    -------
    list of dict
        ``{"epoch": E, "updates": U, "batches": ...}`` per resume; none for a run trained at
        one go.
    """
    found = []
    for line in text.splitlines():
        loaded = _LOADED_CHECKPOINT.search(line)
        if loaded:
            epoch = int(loaded.group(1))
            found.append(
                {
                    "epoch": epoch,
                    "updates": int(loaded.group(2)),
                    "batches": f"regrouped at epoch {epoch}",
                }
            )
        kept = _KEPT_BATCHES.search(line)
        if kept and found and found[-1]["epoch"] == int(kept.group(1)):
            found[-1]["batches"] = BATCHES_OF_EPOCH_ONE
    return found


@dataclass(frozen=True)
class EarlyStopping:
    """fairseq's early-stopping state (`fairseq_cli.train.should_stop_early`) as it was when a
    run saved its last checkpoint.

    Attributes
    ----------
    updates : int
        the number of updates of that checkpoint (checkpoint_last.pt).
    best : float or None
        the best validation metric so far (None: no validation yet).
    num_runs : int
        validations since the best without a better one.
    stopped : bool
        whether early stopping had ended the training (``num_runs`` reached the patience).
    """

    updates: int
    best: float | None
    num_runs: int
    stopped: bool


def early_stopping_state(
    text: str,
    patience: int,
    metric: str = "loss",
    maximize: bool = False,
    last_checkpoint: tuple[int, float | None] | None = None,
) -> EarlyStopping | None:
    """Replay fairseq's early stopping over a run's log, up to its last saved checkpoint.

    fairseq keeps the best validation metric and the count of validations without
    improvement in process memory only: a resumed run starts counting afresh, so it trains
    longer than an uninterrupted one, and a run that had stopped trains again. The log holds
    every validation as fairseq compared it (the rounded value it logs), so the comparisons of
    `should_stop_early` (strictly better resets the count; `patience` <= 0: never stops) can be
    replayed. A log of several attempts keeps, for each update count, the last validation; those
    after the last saved checkpoint are dropped (the resumed run repeats them).

    Parameters
    ----------
    text : str
        the run's log (fairseq's JSON records and its "Saved checkpoint" lines).
    patience : int
        ``checkpoint.patience``.
    metric : str
        ``checkpoint.best_checkpoint_metric`` (the log's ``valid_<metric>``).
    maximize : bool
        ``checkpoint.maximize_best_checkpoint_metric``.
    last_checkpoint : tuple, optional
        (updates, validation value) recorded in checkpoint_last.pt itself, the checkpoint the
        run resumes from: it decides where the replay ends. A run killed at once with the
        process that writes its log can have saved it without its last lines reaching the
        log; its own validation value then stands in for the lost record.

    Returns
    -------
    EarlyStopping or None
        The state; None when neither the log nor `last_checkpoint` records a saved checkpoint
        (nothing to resume).
    """
    saved = _SAVED_CHECKPOINT.findall(text)
    if last_checkpoint is not None:
        updates = last_checkpoint[0]
    elif saved:
        updates = int(saved[-1][1])
    else:
        return None
    key = f"valid_{metric}"
    validations = {}
    for record in json_records(text):
        if key in record and "valid_num_updates" in record:
            at = int(record["valid_num_updates"])
            if at <= updates:
                validations[at] = float(record[key])
    if last_checkpoint is not None and last_checkpoint[1] is not None:
        validations.setdefault(updates, float(last_checkpoint[1]))
    best, num_runs, stop = replay_early_stopping(
        [validations[at] for at in sorted(validations)], patience, maximize
    )
    return EarlyStopping(updates, best, num_runs, stopped=stop is not None)


def replay_early_stopping(
    values: list[float],
    patience: int | None,
    maximize: bool = False,
    epochs: list[int] | None = None,
) -> tuple[float | None, int, int | None]:
    """fairseq's `should_stop_early` over a run's validation values, in order: a strictly
    better value resets the count of validations without improvement; the count reaching
    `patience` (> 0) stops the training.

    Parameters
    ----------
    values : list of float
        the validation values, one per validation, in order.
    patience : int or None
        the run's ``checkpoint.patience``.
    maximize : bool
        whether a higher value is better.
    epochs : list of int, optional
        the epoch of each value, when the values are a log's per-epoch records: the count is
        then the number of epochs since the best, so that an epoch the log lost (a run cut off
        and resumed while its log was buffered) still counts as the validation fairseq made.
        Had the lost epoch improved, fairseq would have stopped later: the replay gives the
        earliest stop the log allows. Without it, each value is one validation.

    Returns
    -------
    tuple
        (best value, count, index of the value at which it stops or None), the first two as
        they were at the stop or after the last value.
    """
    best, best_at, num_runs = None, 0, 0
    for index, value in enumerate(values):
        at = index if epochs is None else epochs[index]
        if best is None or (value > best if maximize else value < best):
            best, best_at, num_runs = value, at, 0
            continue
        num_runs = at - best_at
        if patience is not None and patience > 0 and num_runs >= patience:
            return best, num_runs, index
    return best, num_runs, None
