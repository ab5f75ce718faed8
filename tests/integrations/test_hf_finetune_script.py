"""scripts/hf_finetune.py end to end: a tiny random BERT with a word-level tokenizer, saved to
a folder, fine-tuned on a few SNLI-format lines in a temporary DATA_DIR (no download)."""

import json
import random
import sys
from pathlib import Path

import children
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

from regattn.integrations import transformers as rt

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "hf_finetune.py"
TRAIN = [  # the train subset's TSV: label id twice (1 neutral, 2 contradiction, 3 entailment)
    ("3", "A man plays a guitar .", "A man plays music ."),
    ("2", "A man plays a guitar .", "Nobody plays ."),
    ("1", "A man plays a guitar .", "A man plays for friends ."),
    ("3", "Two dogs run on grass .", "Dogs run outside ."),
    ("2", "Two dogs run on grass .", "The dogs are sleeping ."),
    ("1", "Two dogs run on grass .", "Two dogs run for a ball ."),
]
DEV = [
    ("A woman reads a book .", "A woman reads .", "entailment"),
    ("A woman reads a book .", "Nobody reads .", "contradiction"),
    ("A child is on a team .", "A child plays for friends .", "neutral"),
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def write_data(data_dir: Path) -> None:
    train_dir = data_dir / "snli" / "train_subset_20k_from_cat"
    eval_dir = data_dir / "snli" / "infersent_format"
    train_dir.mkdir(parents=True)
    eval_dir.mkdir(parents=True)
    lines = [f"{label}\t{label}\t{premise}\t{hypothesis}" for label, premise, hypothesis in TRAIN]
    (train_dir / "train.csv").write_text("\n".join(lines) + "\n")
    for column, name in enumerate(("s1", "s2", "labels")):
        (eval_dir / f"{name}.dev").write_text("".join(f"{row[column]} \n" for row in DEV))


def write_model(model_dir: Path) -> None:
    words = sorted({w for _, p, h in TRAIN for w in (p + " " + h).split()} - {"Nobody"})
    vocab = {token: i for i, token in enumerate(SPECIALS + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=vocab["[PAD]"],
    )
    BertForSequenceClassification(config).save_pretrained(model_dir)
    fast.save_pretrained(model_dir)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_finetune")
    write_data(root / "data")
    write_model(root / "model")
    return root


def run_script(folders: Path, *args: str) -> dict:
    command = [sys.executable, str(SCRIPT), str(folders / "model"), "--data-dir"]
    command += [str(folders / "data"), "--epochs", "4", "--batch-size", "3", "--lr", "1e-3"]
    proc = children.run(command + list(args), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def test_fine_tunes_and_reports_accuracy_and_sparsity(folders):
    report = run_script(folders, "--mapping", "fusedmax", "--param", "lam=0.1")
    assert report["attention"] == "fusedmax (λ=0.1)"
    assert report["alpha_lr"] is None  # no α to learn
    assert report["train_pairs"] == len(TRAIN) and report["eval_pairs"] == len(DEV)
    losses = report["mean_train_loss_per_epoch"]
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    assert report["accuracy"] in {0.0, 1 / 3, 2 / 3, 1.0}
    stats = report["attention_statistics"]
    # every layer (2), head (4) and real query token of the 3 dev pairs, over the real keys
    tokens = [2 + len(p.split()) + 1 + len(h.split()) for p, h, _ in DEV]
    assert stats["rows"] == sum(2 * 4 * n for n in tokens)
    assert stats["mean_row_length"] == pytest.approx(sum(n * n for n in tokens) / sum(tokens))
    assert 0.0 <= stats["mean_zero_fraction"] < 1.0
    assert 1.0 <= stats["mean_support_size"] <= max(tokens)


def test_learned_alpha_model_is_saved_with_its_alphas(folders, tmp_path):
    report = run_script(
        folders, "--mapping", "entmax", "--param", "alpha=learned", "--output-dir", str(tmp_path)
    )
    assert report["attention"] == "entmax (α=learned)"
    assert report["alpha_lr"] == 1e-3  # its own rate (train.hf_finetune.alpha_parameter_groups)
    model = rt.from_pretrained(BertForSequenceClassification, tmp_path)
    alphas = [getattr(m, rt.MAPPING_ATTRIBUTE).alpha() for m in rt.attention_modules(model)]
    assert len(alphas) == 2
    # trained: the alphas moved from their start, 1.5
    assert all(not torch.allclose(alpha, torch.full_like(alpha, 1.5)) for alpha in alphas)


def test_a_bad_parameter_is_a_clear_error(folders):
    command = [sys.executable, str(SCRIPT), str(folders / "model"), "--mapping", "fusedmax"]
    command += ["--data-dir", str(folders / "data"), "--param", "lam=-1"]
    proc = children.run(command, timeout=300)
    assert proc.returncode != 0 and "lam" in proc.stderr.splitlines()[-1]


class _LossOfBatch(torch.nn.Module):
    """A stand-in model: a loss from one parameter, whatever the batch."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def forward(self, **batch):
        return type("Out", (), {"loss": self.weight * batch["size"]})()


def test_training_batches_are_the_tables_length_grouped_batches(monkeypatch):
    """Each epoch trains on `length_grouped_batches` drawn from (seed, epoch), as the table's
    fine-tuning does; plain shuffled batches, or one generator for all epochs, fail this."""
    from regattn_fairseq.experiments.pipelines import finetune_example as example
    from regattn_fairseq.experiments.train.hf_finetune import NliPairs, length_grouped_batches

    lengths = [5, 30, 7, 22, 9, 41, 12, 3, 18, 27, 6, 15, 33]
    pairs = NliPairs(["p"] * len(lengths), ["h"] * len(lengths), [0] * len(lengths))
    seen = []

    def record(_pairs, _tokenizer, indices, _max_length):
        seen.append(list(indices))
        return {"size": float(len(indices))}

    monkeypatch.setattr(example, "pair_lengths", lambda *_: lengths)
    monkeypatch.setattr(example, "encode", record)
    args = example.build_parser().parse_args(
        ["--epochs", "2", "--batch-size", "2", "--length-pool", "3", "--seed", "7"]
    )
    example.train_epochs(_LossOfBatch(), pairs, None, args)
    expected = [
        batch
        for epoch in (1, 2)
        for batch in length_grouped_batches(lengths, 2, 3, random.Random(f"7-{epoch}"))
    ]
    assert seen == expected


def test_length_pool_below_one_is_refused_by_name(capsys):
    from regattn_fairseq.experiments.pipelines import finetune_example as example

    with pytest.raises(SystemExit):
        example.build_parser().parse_args(["--length-pool", "0"])
    assert "--length-pool" in capsys.readouterr().err
