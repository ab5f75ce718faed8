"""Helpers of the tests that train tiny fairseq models (tests/plugin/, and the suite's tests of
trained checkpoints): model and data settings, tiny generated data, fairseq's command-line entry
points run in-process. The session fixtures `translation_data` and `snli_data`
(tests/conftest.py) build the data once."""

import json
import logging
import os
import random
import sys
from pathlib import Path

import children
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_cli import generate as generate_cli
from fairseq_cli import preprocess as preprocess_cli
from fairseq_cli import train as train_cli

from regattn_fairseq.fairseq_adapter import reset_best_checkpoint_loss

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "regattn_fairseq")
BIN = Path(sys.executable).parent
VOCAB = [f"w{i}" for i in range(12)]

# model flags small enough for a few CPU updates in seconds
MODEL_ARGS = {
    "regattn_lstm": [
        "--arch",
        "regattn_lstm_small",
        "--encoder-embed-dim",
        "32",
        "--encoder-hidden-size",
        "32",
        "--decoder-embed-dim",
        "32",
        "--decoder-hidden-size",
        "32",
        "--dropout",
        "0.0",
    ],
    "regattn_transformer": [
        "--arch",
        "regattn_transformer_small",
        "--encoder-embed-dim",
        "32",
        "--encoder-ffn-embed-dim",
        "64",
        "--decoder-embed-dim",
        "32",
        "--decoder-ffn-embed-dim",
        "64",
        "--encoder-layers",
        "1",
        "--decoder-layers",
        "1",
        "--dropout",
        "0.0",
    ],
    "regattn_snli": [
        "--arch",
        "regattn_snli_small",
        "--embed-dim",
        "32",
        "--hidden-size",
        "32",
        "--dropout",
        "0.0",
    ],
}
SEQ2SEQ_TRAIN_ARGS = [
    "--task",
    "translation",
    "--source-lang",
    "src",
    "--target-lang",
    "tgt",
    "--criterion",
    "cross_entropy",
    "--optimizer",
    "adam",
    "--lr",
    "0.01",
    "--batch-size",
    "16",
    "--max-epoch",
    "3",
]
SNLI_TRAIN_ARGS = [
    "--task",
    "regattn_snli",
    "--criterion",
    "regattn_snli_cross_entropy",
    "--optimizer",
    "adam",
    "--lr",
    "0.01",
    "--batch-size",
    "16",
    "--max-epoch",
    "3",
]
# fairseq drops a last batch smaller than --required-batch-size-multiple (default 8), which
# would silently skip tiny validation/test sets
BATCH_ARGS = ["--required-batch-size-multiple", "1"]
COMMON_ARGS = [
    *BATCH_ARGS,
    "--user-dir",
    USER_DIR,
    "--seed",
    "1",
    "--num-workers",
    "0",
    "--cpu",
    "--log-format",
    "json",
    "--log-interval",
    "1",
    "--no-progress-bar",
    "--no-epoch-checkpoints",
    "--no-last-checkpoints",
    "--save-interval-updates",
    "0",
]


def write_lines(path, lines):
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def preprocess(argv):
    preprocess_cli.main(options.get_preprocessing_parser().parse_args(argv))


class _JsonLogRecords(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        try:
            self.records.append(json.loads(record.getMessage()))
        except ValueError:
            pass


def train_in_process(argv):
    """fairseq-train's own code path (argument parsing, Hydra config conversion, main) in
    this process; returns the JSON log records (train_inner, train, valid)."""
    parser = options.get_training_parser()
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    # forget an earlier run's best validation loss, or this run may never write
    # checkpoint_best.pt
    reset_best_checkpoint_loss()
    handler = _JsonLogRecords()
    progress_logger = logging.getLogger("fairseq.logging.progress_bar")
    progress_logger.addHandler(handler)
    previous_level = progress_logger.level
    progress_logger.setLevel(logging.INFO)
    try:
        train_cli.main(cfg)
    finally:
        progress_logger.removeHandler(handler)
        progress_logger.setLevel(previous_level)
    return handler.records


def generate_in_process(argv):
    """fairseq-generate's code path in this process; returns its stdout lines."""
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, argv)
    out_path = Path(args.results_path) / f"generate-{args.gen_subset}.txt"
    generate_cli.main(args)
    return out_path.read_text(encoding="utf-8").splitlines()


def epoch_losses(records):
    return [r["train_loss"] for r in records if "train_loss" in r]


def run_cli(cmd, cwd=None, check=True, timeout=300):
    """A fairseq console script (or python script) in a fresh process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = children.run(cmd, cwd=cwd, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def build_model(data, model_args, extra=()):
    """(task, model) built the way fairseq-train builds them, without training."""
    from fairseq import tasks

    is_snli = "regattn_snli" in " ".join(model_args)
    task_args = SNLI_TRAIN_ARGS if is_snli else SEQ2SEQ_TRAIN_ARGS
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, [str(data), *task_args, *COMMON_ARGS, *model_args, *extra]
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model)


def translation_batch(task, split="test", size=4):
    """A collated batch as fairseq-train/generate feed it (sources left-padded)."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(size)])


def make_translation_data(root: Path) -> Path:
    """Binarized src->tgt data under `root` where the target is the source with each word
    renamed: learnable in a few updates, and it needs attention. Returns its bin folder."""
    raw, rng = root / "raw", random.Random(0)
    raw.mkdir()
    for split, n in (("train", 64), ("valid", 8), ("test", 6)):
        src = [[rng.choice(VOCAB) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        write_lines(raw / f"{split}.src", [" ".join(s) for s in src])
        write_lines(raw / f"{split}.tgt", [" ".join(w.replace("w", "v") for w in s) for s in src])
    preprocess(
        [
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(raw / "train"),
            "--validpref",
            str(raw / "valid"),
            "--testpref",
            str(raw / "test"),
            "--destdir",
            str(root / "bin"),
            "--joined-dictionary",
            "--workers",
            "1",
        ]
    )
    return root / "bin"


def make_snli_data(root: Path) -> Path:
    """The layout the regattn_snli task reads, under `root`; the label depends on the premise.
    Returns its bin folder."""
    raw, rng = root / "raw", random.Random(0)
    raw.mkdir()
    labels = ("entailment", "neutral", "contradiction")
    for split, n in (("train", 48), ("valid", 8), ("test", 8)):
        premises, hypotheses, gold = [], [], []
        for _ in range(n):
            premise = [rng.choice(VOCAB) for _ in range(rng.randint(3, 8))]
            label = rng.randrange(3)
            word = premise[0] if label == 0 else rng.choice(VOCAB)
            hypothesis = [word, ("maybe", "yes", "no")[label], rng.choice(VOCAB)]
            premises.append(" ".join(premise))
            hypotheses.append(" ".join(hypothesis))
            gold.append(labels[label])
        write_lines(raw / f"{split}.premise", premises)
        write_lines(raw / f"{split}.hypothesis", hypotheses)
        (root / "bin" / "label").mkdir(parents=True, exist_ok=True)
        write_lines(root / "bin" / "label" / f"{split}.label", gold)
    preprocess(
        [
            "--only-source",
            "--trainpref",
            str(raw / "train.premise"),
            "--validpref",
            str(raw / "valid.premise"),
            "--testpref",
            str(raw / "test.premise"),
            "--destdir",
            str(root / "bin" / "input0"),
            "--workers",
            "1",
        ]
    )
    preprocess(
        [
            "--only-source",
            "--trainpref",
            str(raw / "train.hypothesis"),
            "--validpref",
            str(raw / "valid.hypothesis"),
            "--testpref",
            str(raw / "test.hypothesis"),
            "--srcdict",
            str(root / "bin" / "input0" / "dict.txt"),
            "--destdir",
            str(root / "bin" / "input1"),
            "--workers",
            "1",
        ]
    )
    return root / "bin"
