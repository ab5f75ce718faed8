"""Fine-tuning a pretrained Hugging Face encoder as a 3-way entailment classifier, with its
attention swapped to a regattn mapping (`regattn.integrations.transformers`): the training of
the pretrained-encoder table (configs/reproduce/table1_pretrained.yaml).

The run is the fairseq runs' counterpart, so that the same rows, learning curves, convergence
check and claims read it:

- one validation per epoch, logged as a JSON record ``{"epoch", "train_loss", "valid_loss",
  "valid_accuracy", ...}`` in ``<run_dir>/train.log`` (`train.learning_curve` reads it);
- the best epoch by validation accuracy kept (``<run_dir>/best/``, `save_pretrained`, with the
  regattn settings and learned alphas), and early stopping by the patience rule of fairseq
  (`fairseq_logs.replay_early_stopping`: a strictly better accuracy resets the count);
- ``<run_dir>/checkpoint_last.pt`` after every epoch (model, optimizer, random states): an
  interrupted run resumes at the next epoch and trains as an uninterrupted one would (the data
  order of each epoch is drawn from the seed and the epoch alone);
- within an epoch, ``<run_dir>/checkpoint_partial.pt`` every ``PARTIAL_EVERY_S`` seconds of
  training (the same state, with the steps done and their losses): an epoch takes 10 to 20
  minutes on one core, so a run cut off mid-epoch resumes at its next step, again as an
  uninterrupted run would train;
- training batches drawn from pools of pairs sorted by length (``length_pool``, when above 1)
  and evaluation in length-sorted batches: SNLI pairs vary in length, and a random batch of
  them is padded to nearly twice its real tokens.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from regattn import mappings
from regattn.analysis import describe_learned_alpha, learned_alpha_spread
from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.prepare import PreparedData
from regattn_fairseq.experiments.train.fairseq_logs import json_records, replay_early_stopping
from regattn_fairseq.experiments.train.train import learning_curve
from regattn_fairseq.tasks.regattn_snli import LABELS

# transformers' own softmax attention: the reference the regattn softmax must equal
EAGER = "eager"
LOG_FILE = "train.log"
BEST_DIR = "best"
LAST_CHECKPOINT = "checkpoint_last.pt"
PARTIAL_CHECKPOINT = "checkpoint_partial.pt"
# one JSON line per resume (`_resume_run`), apart from train.log's epoch records
RESUMES_FILE = "resumes.jsonl"
# how much training a run cut off mid-epoch may lose (a save takes about a second)
PARTIAL_EVERY_S = 600.0
# the metric that picks the best epoch and stops the run, as the fairseq SNLI runs use it
METRIC = "accuracy"
# `optimizer_kind`; the loop is what an epoch logged without the field used
OPTIMIZER_KINDS = {False: "AdamW, per-parameter loop", True: "AdamW, fused"}


@dataclass(frozen=True)
class NliPairs:
    """Premise-hypothesis pairs with their label ids (indices into the task's LABELS)."""

    premises: list[str]
    hypotheses: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)

    def head(self, count: int | None) -> NliPairs:
        """The first `count` pairs (all of them for None)."""
        if count is None:
            return self
        return NliPairs(self.premises[:count], self.hypotheses[:count], self.labels[:count])


def read_pairs(prepared: PreparedData, split: str) -> NliPairs:
    """The pairs of a prepared SNLI split (`data.builders.snli`): the same text and labels the
    fairseq classifier of Table 1 reads.

    Raises
    ------
    ReproError
        if a file is missing, the files differ in length, or a label is not one of LABELS.
    """
    raw = prepared.root / "raw"
    paths = (
        raw / f"{split}.premise",
        raw / f"{split}.hypothesis",
        prepared.bin_dir / "label" / f"{split}.label",
    )
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise ReproError(f"SNLI {split}: missing {', '.join(missing)}; prepare the data again")
    premises, hypotheses, labels = (path.read_text(encoding="utf-8").splitlines() for path in paths)
    if not len(premises) == len(hypotheses) == len(labels):
        raise ReproError(
            f"SNLI {split}: {len(premises)} premises, {len(hypotheses)} hypotheses and "
            f"{len(labels)} labels"
        )
    unknown = sorted(set(labels) - set(LABELS))
    if unknown:
        raise ReproError(f"SNLI {split}: labels {unknown} are none of {LABELS}")
    return NliPairs(premises, hypotheses, [LABELS.index(label) for label in labels])


# the attention options of configs/attention/*.yaml and the parameter of
# `regattn.integrations.transformers.configure` each one sets (the mappings' one table)
ATTENTION_OPTIONS = mappings.OPTION_TO_PARAM


def backend_and_params(attention: dict) -> tuple[str, dict]:
    """The `transformers` backend and its `configure` parameters of an attention config.

    Parameters
    ----------
    attention : dict
        ``attention`` (the library's mapping, or "eager" for transformers' own softmax) and
        the options of ATTENTION_OPTIONS that are set, as in configs/attention/<mapping>.yaml.

    Returns
    -------
    tuple
        (backend, params): a mapping whose parameters include those a backend of its own fixes
        is that backend (`mappings.transformers_backends`: α=1.5 is ``entmax15``) with the
        rest; otherwise the mapping's backend with all of them (another α, a number or
        "learned", is a parameter of ``entmax``).
    """
    name = attention["attention"]
    params = {
        ATTENTION_OPTIONS[option]: value
        for option, value in attention.items()
        if option in ATTENTION_OPTIONS and value is not None
    }
    if "alpha" in params and params["alpha"] != mappings.LEARNED:
        params["alpha"] = float(params["alpha"])
    for backend, (mapping, fixed) in mappings.transformers_backends().items():
        if backend != name and mapping == name and fixed and fixed.items() <= params.items():
            return backend, {k: v for k, v in params.items() if k not in fixed}
    return name, params


@dataclass(frozen=True)
class FineTuneSettings:
    """Everything that shapes a fine-tuning run. Its `config` is the rows' ``train.config``,
    laid out as the fairseq runs' (the attention options under ``model``), so that the rows'
    keys, cells and labels read it as theirs; its `record` is that and the seed (the run
    folder's ``settings.json``).

    Attributes
    ----------
    model : dict
        the pinned model's record (`PinnedModel.record`: name, distribution, weights' SHA-256).
    attention : dict
        the attention config (`backend_and_params`).
    seed : int
        the seed of the new head, dropout and the data order.
    lr, weight_decay : float
        AdamW's.
    warmup_steps : int
        linear warm-up of the learning rate, then constant (no schedule tied to a number of
        epochs that early stopping decides).
    batch_size : int
        pairs per step.
    length_pool : int
        batches drawn per pool of pairs sorted by length (`length_grouped_batches`); 1: plain
        random batches. A random batch of 32 SNLI pairs is padded to about 1.8 times its real
        tokens, one from a pool of 16 batches to about 1.08.
    max_epoch : int
        the epoch cap.
    patience : int
        validations without a strictly better accuracy that stop the run.
    max_length : int
        the pair's tokens kept (SNLI pairs are far shorter).
    bf16 : bool
        bfloat16 autocast on the CPU, fast only with bfloat16 hardware (`bf16_is_native`);
        float32 otherwise.
    train_pairs, valid_pairs : int or None
        the first N pairs of each split (None: all): short γ-selection runs, smoke runs.
    alpha_lr : float or None
        the learning rate of a learned α's logits (`alpha_parameter_groups`), in an AdamW group
        of their own without weight decay; None: they are trained as every other parameter.
        Only an attention with a learned α takes it.
    """

    model: dict
    attention: dict
    seed: int
    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 100
    batch_size: int = 32
    length_pool: int = 1
    max_epoch: int = 10
    patience: int = 2
    max_length: int = 128
    bf16: bool = False
    train_pairs: int | None = None
    valid_pairs: int | None = None
    alpha_lr: float | None = None

    def __post_init__(self):
        if self.alpha_lr is not None and self.params.get("alpha") != mappings.LEARNED:
            raise ReproError(
                f"alpha_lr={self.alpha_lr} is the learning rate of a learned α, and the "
                f"attention {self.attention} has none"
            )
        if self.alpha_lr is not None and not (
            isinstance(self.alpha_lr, (int, float)) and self.alpha_lr > 0
        ):
            raise ReproError(f"alpha_lr must be a number > 0, got {self.alpha_lr!r}")

    @property
    def backend(self) -> str:
        return backend_and_params(self.attention)[0]

    @property
    def params(self) -> dict:
        return backend_and_params(self.attention)[1]

    def record(self) -> dict:
        """Every setting as JSON: ``model`` (the pretrained model and the attention options)
        and ``finetune`` (the rest, the seed included): the run folder's ``settings.json``,
        which a resumed run must match."""
        rest = {k: v for k, v in asdict(self).items() if k not in ("model", "attention")}
        if self.alpha_lr is None:
            # only where set: the settings, and so the config hashes, of every run without a
            # learned α stay as they were before the field existed
            del rest["alpha_lr"]
        return {"model": {"pretrained": self.model, **self.attention}, "finetune": rest}

    def config(self) -> dict:
        """The rows' ``train.config`` and the config in their key: `record` without the seed.
        The seed is the row's own field, as the fairseq rows' ``common.seed`` is an override
        and not config, so that a cell's seeds share one config hash (`rows.keys`)."""
        record = self.record()
        rest = {k: v for k, v in record["finetune"].items() if k != "seed"}
        return {**record, "finetune": rest}


@dataclass
class FineTuned:
    """A finished fine-tuning run.

    Attributes
    ----------
    best_dir : Path
        the best epoch's model (`save_pretrained`).
    curve : dict
        `train.learning_curve` of its log.
    wall_s : float
        training and validation seconds, summed over every attempt.
    pairs_per_s, tokens_per_s : float or None
        training pairs (real tokens) per second in the last epoch.
    settings : FineTuneSettings
        how it was trained.
    optimizer : str
        the AdamW implementation its epochs logged (`optimizer_kind`).
    resumes : list of dict
        each resume from its checkpoints: the epoch it went on in, the steps of that epoch
        done before, its batches (none for a run trained at one go).
    """

    best_dir: Path
    curve: dict
    wall_s: float
    pairs_per_s: float | None
    tokens_per_s: float | None
    settings: FineTuneSettings
    optimizer: str
    resumes: list[dict] = field(default_factory=list)

    @property
    def epochs(self) -> int | None:
        return self.curve.get("stopped_epoch")


def _quiet_transformers() -> None:
    """transformers' load report (the new head's weights are "missing", as they must be) and
    progress bars stay out of the run's output; its errors still show."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def build_model(model_path: Path, settings: FineTuneSettings):
    """The pretrained encoder with a new 3-way head, its attention set to the settings'
    backend, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from regattn.integrations import transformers as rt

    _quiet_transformers()
    rt.register()
    torch.manual_seed(settings.seed)  # the new head's initialization
    model = AutoModelForSequenceClassification.from_pretrained(
        model_path,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        attn_implementation=EAGER if settings.backend == EAGER else rt.PREFIX + settings.backend,
    )
    if settings.backend != EAGER:
        rt.configure(model, settings.backend, **settings.params)
    elif settings.params:
        raise ReproError(f"eager attention takes no parameters, got {settings.params}")
    return model, AutoTokenizer.from_pretrained(model_path)


def load_finetuned(best_dir: Path):
    """A fine-tuned model saved by `fine_tune` (regattn settings and learned alphas restored),
    and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from regattn.integrations import transformers as rt

    _quiet_transformers()
    return (
        rt.from_pretrained(AutoModelForSequenceClassification, best_dir),
        AutoTokenizer.from_pretrained(best_dir),
    )


def encode(pairs: NliPairs, tokenizer, indices: list[int], max_length: int):
    """The tokenized pairs at `indices`, padded to the longest of them, with their labels."""
    encoded = tokenizer(
        [pairs.premises[i] for i in indices],
        [pairs.hypotheses[i] for i in indices],
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    encoded["labels"] = torch.tensor([pairs.labels[i] for i in indices])
    return encoded


def batches(pairs: NliPairs, tokenizer, size: int, max_length: int):
    """Tokenized batches of (premise, hypothesis) pairs in their order, with their labels."""
    for start in range(0, len(pairs), size):
        yield encode(
            pairs, tokenizer, list(range(start, min(start + size, len(pairs)))), max_length
        )


def pair_lengths(pairs: NliPairs, tokenizer, max_length: int) -> list[int]:
    """Each pair's length in tokens as the model reads it (special tokens in, truncated)."""
    encoded = tokenizer(pairs.premises, pairs.hypotheses, truncation=True, max_length=max_length)
    return [len(ids) for ids in encoded["input_ids"]]


def length_grouped_batches(
    lengths: list[int], size: int, pool: int, rng: random.Random
) -> list[list[int]]:
    """An epoch's batches of pair indices, grouped by length to cut padding.

    The pairs are shuffled and cut into pools of `pool` batches' worth; each pool is sorted by
    length and cut into batches of `size`; then the batches are shuffled, so that short and long
    ones alternate through the epoch. ``pool=1`` gives plain random batches (sorting within a
    batch changes no batch). Every pair is in exactly one batch.

    Parameters
    ----------
    lengths : list of int
        each pair's tokens (`pair_lengths`).
    size : int
        pairs per batch (the last batch of the last pool may be shorter).
    pool : int
        batches per pool, at least 1.
    rng : random.Random
        the epoch's own seeded generator (the order is drawn from it alone).

    Raises
    ------
    ReproError
        if `size` or `pool` is below 1.
    """
    if size < 1 or pool < 1:
        raise ReproError(f"batches of {size} pairs in pools of {pool}: both must be at least 1")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    grouped = []
    for start in range(0, len(order), size * pool):
        ranked = sorted(order[start : start + size * pool], key=lambda i: lengths[i])
        grouped += [ranked[i : i + size] for i in range(0, len(ranked), size)]
    rng.shuffle(grouped)
    return grouped


def epoch_rng(seed: int, epoch: int) -> random.Random:
    """The generator an epoch's batches are drawn from (`length_grouped_batches`): from the seed
    and the epoch alone, so that a resumed run draws the same batches."""
    return random.Random(f"{seed}-{epoch}")


def length_sorted_batches(lengths: list[int], size: int) -> list[list[int]]:
    """Batches of pair indices in order of length: evaluation pads almost nothing."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i : i + size] for i in range(0, len(order), size)]


def bf16_is_native() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AVX512-BF16 or AMX tiles), as torch reports
    it. Without either, bf16 autocast is emulated: a MiniLM training step took about 17 times as
    long as in float32 on an AVX2-only AMD EPYC (results/bench/hf_minilm_cpu_bf16.md against
    hf_minilm_cpu.md, 2026-11-29). True where torch cannot tell."""
    checks = [
        getattr(torch.cpu, name, None)
        for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    ]
    checks = [check for check in checks if check is not None]
    return not checks or any(check() for check in checks)


BF16_EMULATED = (
    "[finetune] warning: bf16 autocast on a CPU without bfloat16 hardware (no AVX512-BF16, no "
    "AMX): emulated, many times slower than float32; the settings ask for it (bf16: true), "
    "so it is used"
)


def autocast(settings: FineTuneSettings):
    """bfloat16 autocast on the CPU when the settings ask for it (a no-op context otherwise)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings.bf16)


def validate(model, tokenizer, pairs: NliPairs, settings: FineTuneSettings) -> tuple[float, float]:
    """Mean cross-entropy and accuracy (percent) of the model on `pairs`, in eval mode, in
    batches sorted by length (the sums do not depend on the order; the padding does)."""
    model.eval()
    total_loss, correct = 0.0, 0
    lengths = pair_lengths(pairs, tokenizer, settings.max_length)
    with torch.no_grad(), autocast(settings):
        for indices in length_sorted_batches(lengths, 2 * settings.batch_size):
            batch = encode(pairs, tokenizer, indices, settings.max_length)
            out = model(**batch)
            total_loss += float(out.loss) * len(batch["labels"])
            correct += int((out.logits.argmax(-1) == batch["labels"]).sum())
    return total_loss / len(pairs), 100.0 * correct / len(pairs)


def learned_alphas(model) -> list[list[float]] | None:
    """Each attention layer's learned alpha per head, or None without a learned alpha."""
    from regattn.integrations import transformers as rt

    alphas = []
    for module in rt.attention_modules(model):
        mapping = getattr(module, rt.MAPPING_ATTRIBUTE, None)
        if mapping is None or mapping.alpha_logit is None:
            return None
        alphas.append([round(float(a), 4) for a in mapping.alpha().detach()])
    return alphas


def _save_atomically(obj, path: Path) -> None:
    partial = path.with_name(path.name + ".partial")
    torch.save(obj, partial)
    os.replace(partial, path)


def _log(run_dir: Path, record: dict, name: str = LOG_FILE) -> None:
    with open(run_dir / name, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _curve(run_dir: Path, settings: FineTuneSettings) -> dict:
    """The run's `log_curve` from the log in its folder (empty for a run not started)."""
    log = run_dir / LOG_FILE
    return log_curve(log.read_text(encoding="utf-8") if log.is_file() else "", settings)


def log_curve(text: str, settings: FineTuneSettings) -> dict:
    """A run's `learning_curve` from its log's text, with a learned α's ``alpha_sd``: the
    standard deviation of α over every head after each epoch, which shows whether the heads
    were still spreading apart (specialising) when the run stopped."""
    curve = learning_curve(text, settings.patience, settings.max_epoch, METRIC, maximize=True)
    # read as learning_curve reads the log (a line cut by a kill is skipped), one value per
    # epoch of the curve
    alphas = {r["epoch"]: r["alpha"] for r in json_records(text) if "alpha" in r}
    if alphas:
        curve["alpha_sd"] = [
            round(learned_alpha_spread(alphas[epoch]), 4) for epoch in curve["epochs"]
        ]
    return curve


def fine_tune(
    settings: FineTuneSettings,
    model_path: Path,
    train: NliPairs,
    valid: NliPairs,
    run_dir: Path,
    progress=print,
) -> FineTuned:
    """Fine-tune the pretrained model on `train`, validating on `valid` after every epoch,
    until the patience rule stops it or the epoch cap; resume an interrupted run in
    `run_dir`; a finished one is returned as it is.

    Parameters
    ----------
    settings : FineTuneSettings
        how to train (its pair limits are applied here).
    model_path : Path
        the pretrained model's folder (`regattn.integrations.pretrained_models.model_dir`).
    train, valid : NliPairs
        the splits.
    run_dir : Path
        the run's folder (log, checkpoints, best model).
    progress : callable
        prints a line per epoch.

    Returns
    -------
    FineTuned
        The run.

    Raises
    ------
    ReproError
        if `run_dir` holds a run of other settings, or a loss is not finite.
    """
    train, valid = train.head(settings.train_pairs), valid.head(settings.valid_pairs)
    _record_settings(run_dir, settings)
    curve = _curve(run_dir, settings)
    last = run_dir / LAST_CHECKPOINT
    if curve.get("stop") is not None and (run_dir / BEST_DIR).is_dir():
        return _finished(run_dir, settings)
    if settings.bf16 and not bf16_is_native():
        progress(BF16_EMULATED)
    model, tokenizer = build_model(model_path, settings)
    state = training_state(model, settings)
    epoch, partial = _resume_run(run_dir, state, progress)
    while True:
        epoch += 1
        losses, tokens, train_s = _train_epoch(
            model, tokenizer, train, settings, epoch, state, run_dir, partial
        )
        partial = None
        validated = time.time()
        valid_loss, valid_accuracy = validate(model, tokenizer, valid, settings)
        record = {
            "epoch": epoch,
            "train_loss": round(sum(losses) / len(losses), 4),
            "valid_loss": round(valid_loss, 4),
            f"valid_{METRIC}": round(valid_accuracy, 2),
            "train_pairs_per_s": round(len(train) / train_s, 1),
            "train_tokens_per_s": round(tokens / train_s, 1),
            "wall_s": round(train_s + time.time() - validated, 1),
            "optimizer": optimizer_kind(state["optimizer"]),
        }
        alphas = learned_alphas(model)
        if alphas is not None:
            record["alpha"] = alphas
        previous = _curve(run_dir, settings).get(f"valid_{METRIC}", [])
        _save_epoch(run_dir, record, previous, tokenizer, state, last)
        progress(_epoch_line(epoch, record))
        values = [*previous, record[f"valid_{METRIC}"]]
        _, _, stop = replay_early_stopping(values, settings.patience, maximize=True)
        if stop is not None or epoch >= settings.max_epoch:
            break
    last.unlink()  # the optimizer state is twice the model: a finished run keeps only best/
    return _finished(run_dir, settings)


def _epoch_line(epoch: int, record: dict) -> str:
    """An epoch's progress line: its losses, validation accuracy and seconds, and a learned
    α's summary, so that whether the heads' α are learning shows while the run goes on."""
    line = (
        f"[finetune] epoch {epoch}: train loss {record['train_loss']}, valid loss "
        f"{record['valid_loss']}, valid accuracy {record['valid_accuracy']} "
        f"({record['wall_s']} s)"
    )
    return line + (
        f"; learned {describe_learned_alpha(record['alpha'])}" if "alpha" in record else ""
    )


def training_state(model, settings: FineTuneSettings) -> dict:
    """The model with its optimizer (AdamW) and learning-rate schedule (linear warm-up).

    AdamW runs its fused kernel: the same update as the per-parameter loop, in one pass over
    each tensor instead of a Python loop of element-wise ops over MiniLM's 22.6M parameters,
    which differs from the loop by float rounding only (the table's notes give the one-off
    timing). A resumed run keeps the kernel it started with: the checkpoint's param group
    carries its ``fused`` flag (`optimizer_kind`).
    """
    optimizer = torch.optim.AdamW(
        alpha_parameter_groups(model, settings.alpha_lr),
        lr=settings.lr,
        weight_decay=settings.weight_decay,
        fused=True,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / max(1, settings.warmup_steps))
    )
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler}


def alpha_parameter_groups(model, alpha_lr: float | None) -> list[dict]:
    """AdamW's parameter groups: every parameter at the optimizer's learning rate and weight
    decay, and with `alpha_lr` a learned α's logits (``alpha_logit``, one per head and layer)
    in a group of their own, at `alpha_lr` and without weight decay.

    Why: AdamW moves a parameter by at most about its learning rate per step, so at a
    fine-tuning rate (2e-5) a logit moves at most about 0.12 in a run of 6,000 steps, and α
    (1.01 + 0.99 sigmoid(logit)) at most about 0.03 from its start: the heads could not learn
    their α, whatever the data asked. A Transformer trained from scratch learns α at its own
    rate (the E2 Transformer's 1e-3, inverse square root).

    Raises
    ------
    ReproError
        `alpha_lr` for a model with no learned α.
    """
    if alpha_lr is None:
        return [{"params": list(model.parameters())}]
    alpha = [p for name, p in model.named_parameters() if name.endswith("alpha_logit")]
    if not alpha:
        raise ReproError(f"alpha_lr={alpha_lr} is set, and the model has no learned α")
    learned = {id(p) for p in alpha}
    rest = [p for p in model.parameters() if id(p) not in learned]
    return [{"params": rest}, {"params": alpha, "lr": alpha_lr, "weight_decay": 0.0}]


def optimizer_kind(optimizer) -> str:
    """Which AdamW implementation `optimizer` steps with: 'AdamW, fused' or 'AdamW,
    per-parameter loop' (the runs started before the fused kernel, resumed or not)."""
    return OPTIMIZER_KINDS[bool(optimizer.param_groups[0].get("fused"))]


def _record_settings(run_dir: Path, settings: FineTuneSettings) -> None:
    """Record the run's settings in its folder (``settings.json``).

    Raises
    ------
    ReproError
        the folder holds a run of other settings.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    settings_file = run_dir / "settings.json"
    recorded = json.loads(settings_file.read_text()) if settings_file.is_file() else None
    if recorded is not None and recorded != settings.record():
        raise ReproError(
            f"{run_dir} holds a run of other settings ({settings_file}); remove the folder to "
            "train these"
        )
    settings_file.write_text(json.dumps(settings.record(), indent=1, sort_keys=True) + "\n")


def _resume_run(run_dir: Path, state: dict, progress) -> tuple[int, PartialEpoch | None]:
    """Load an interrupted run's checkpoints into `state`: the last epoch's, then a mid-epoch one
    of the next epoch. Returns the last epoch saved whole (0 for a new run) and how far the next
    one had gone (None: from its start)."""
    epoch = 0
    last = run_dir / LAST_CHECKPOINT
    if last.is_file():
        epoch = _resume(last, state)
        progress(f"[finetune] resuming {run_dir} after epoch {epoch}")
    partial = _resume_partial(run_dir / PARTIAL_CHECKPOINT, state, epoch + 1)
    if partial is not None:
        progress(f"[finetune] resuming {run_dir} in epoch {epoch + 1} after step {partial.step}")
    if epoch or partial is not None:
        # the epoch's batches come from (seed, epoch) and the random state from the
        # checkpoint: the run goes on as the uninterrupted one
        # (tests/experiments/train/test_hf_finetune.py)
        step = partial.step if partial is not None else 0
        batches = f"epoch {epoch + 1}'s from the seed, as the uninterrupted run"
        _log(run_dir, {"epoch": epoch + 1, "step": step, "batches": batches}, RESUMES_FILE)
    return epoch, partial


def _resume(last: Path, state: dict) -> int:
    """Load an interrupted run's last checkpoint into the model, optimizer and scheduler of
    `state` (and torch's random state); the epoch it was saved after."""
    saved = torch.load(last, weights_only=False)
    _load_state_dicts(saved, state)
    return saved["epoch"]


@dataclass
class PartialEpoch:
    """How far an epoch had gone when its partial checkpoint was saved."""

    step: int  # the steps done
    losses: list[float]
    tokens: int
    train_s: float


def _resume_partial(path: Path, state: dict, epoch: int) -> PartialEpoch | None:
    """Load a mid-epoch checkpoint of `epoch` into `state` (model, optimizer, scheduler, torch's
    random state); None without one. One of an earlier epoch (cut off after that epoch's own
    checkpoint was saved, before this one was removed) is stale: it is removed."""
    if not path.is_file():
        return None
    saved = torch.load(path, weights_only=False)
    if saved["epoch"] != epoch:
        path.unlink()
        return None
    _load_state_dicts(saved, state)
    return PartialEpoch(saved["step"], saved["losses"], saved["tokens"], saved["train_s"])


def _train_epoch(
    model,
    tokenizer,
    train: NliPairs,
    settings,
    epoch: int,
    state,
    run_dir: Path,
    partial: PartialEpoch | None = None,
):
    """One epoch over the training pairs, in the epoch's own seeded batches
    (`length_grouped_batches`), from the step after `partial`'s when given; a mid-epoch
    checkpoint every PARTIAL_EVERY_S seconds.

    Returns
    -------
    tuple
        (each step's loss, the tokens trained on, the seconds of training, those before a
        resume included).

    Raises
    ------
    ReproError
        a loss that is not finite (nothing is saved).
    """
    plan = length_grouped_batches(
        pair_lengths(train, tokenizer, settings.max_length),
        settings.batch_size,
        settings.length_pool,
        epoch_rng(settings.seed, epoch),
    )
    model.train()
    partial = partial or PartialEpoch(0, [], 0, 0.0)
    losses, tokens = list(partial.losses), partial.tokens
    started = saved = time.time()
    for indices in plan[partial.step :]:
        batch = encode(train, tokenizer, indices, settings.max_length)
        with autocast(settings):
            loss = model(**batch).loss
        if not torch.isfinite(loss):
            raise ReproError(
                f"{run_dir}: the training loss is {float(loss)} at epoch {epoch} "
                f"(step {len(losses) + 1}); the run is stopped, nothing is saved"
            )
        loss.backward()
        state["optimizer"].step()
        state["scheduler"].step()
        state["optimizer"].zero_grad()
        losses.append(loss.item())
        tokens += int(batch["attention_mask"].sum())
        if time.time() - saved >= PARTIAL_EVERY_S:
            done = PartialEpoch(
                len(losses), losses, tokens, partial.train_s + time.time() - started
            )
            _save_atomically(
                {**_state_dicts(state), "epoch": epoch, **asdict(done)},
                run_dir / PARTIAL_CHECKPOINT,
            )
            saved = time.time()
    return losses, tokens, partial.train_s + time.time() - started


def _save_epoch(run_dir: Path, record: dict, previous: list, tokenizer, state, last: Path):
    """Save an epoch: the model as the best one when its validation accuracy beats every
    earlier epoch's (`previous`), the checkpoint to resume from, then its log record."""
    model = state["model"]
    if not previous or record[f"valid_{METRIC}"] > max(previous):
        model.save_pretrained(run_dir / BEST_DIR)
        tokenizer.save_pretrained(run_dir / BEST_DIR)
    _save_atomically({**_state_dicts(state), "epoch": record["epoch"]}, last)
    # the epoch is whole: its mid-epoch checkpoint (twice the model's size) is stale
    (run_dir / PARTIAL_CHECKPOINT).unlink(missing_ok=True)
    # logged after the checkpoint: a record in the log is an epoch that is saved
    _log(run_dir, record)


def _state_dicts(state: dict) -> dict:
    """What a checkpoint holds to resume training exactly: the model, optimizer and scheduler
    states and torch's random state (dropout)."""
    return {
        "model": state["model"].state_dict(),
        "optimizer": state["optimizer"].state_dict(),
        "scheduler": state["scheduler"].state_dict(),
        "torch_rng": torch.get_rng_state(),
    }


def _load_state_dicts(saved: dict, state: dict) -> None:
    """Load a checkpoint's `_state_dicts` into `state`, and torch's random state."""
    for name in ("model", "optimizer", "scheduler"):
        state[name].load_state_dict(saved[name])
    torch.set_rng_state(saved["torch_rng"])


def _records(run_dir: Path, name: str = LOG_FILE) -> list[dict]:
    """The JSON records of one of the run's logs, as `_curve` reads them: a last line cut off
    by a kill mid-write is skipped."""
    log = run_dir / name
    return json_records(log.read_text(encoding="utf-8")) if log.is_file() else []


def _finished(run_dir: Path, settings: FineTuneSettings) -> FineTuned:
    records = _records(run_dir)
    return FineTuned(
        best_dir=run_dir / BEST_DIR,
        curve=_curve(run_dir, settings),
        # training and validation seconds, summed over the epochs of every attempt
        wall_s=round(sum(record.get("wall_s", 0.0) for record in records), 1),
        pairs_per_s=records[-1].get("train_pairs_per_s"),
        tokens_per_s=records[-1].get("train_tokens_per_s"),
        settings=settings,
        # a run keeps its kernel across resumes (`training_state`): one name for all its epochs
        optimizer=records[-1].get("optimizer", OPTIMIZER_KINDS[False]),
        resumes=_records(run_dir, RESUMES_FILE),
    )
