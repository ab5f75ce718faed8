"""Fine-tuning the pinned pretrained encoder (train/hf_finetune.py) and scoring it
(score/hf_classify.py): the settings' layout in the rows, a resumed run equal to an
uninterrupted one, a finished run not trained again, the length-grouped batches, and the
scores and attention record."""

import copy
import dataclasses
import importlib.util
import json
import random

import pytest
import torch

from regattn.integrations import pretrained_models as pm
from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.decode.attention_format import read_export
from regattn_fairseq.experiments.rows.keys import config_sha256, row_label
from regattn_fairseq.experiments.score.hf_classify import classify
from regattn_fairseq.experiments.train import hf_finetune as ft

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec(pm.MINILM_L6_V2.package) is None,
    reason=f"the pinned wheel {pm.MINILM_L6_V2.distribution} is not installed",
)

PAIRS = ft.NliPairs(
    premises=["A man plays a guitar .", "Two dogs run on grass .", "A woman reads a book ."] * 3,
    hypotheses=["A man plays music .", "The dogs sleep .", "She is a teacher ."] * 3,
    labels=[0, 2, 1] * 3,
)


@pytest.mark.parametrize(
    "attention,expected",
    [
        ({"attention": "softmax"}, ("softmax", {})),
        ({"attention": "sparsemax", "attention_gamma": 4.0}, ("sparsemax", {"gamma": 4.0})),
        ({"attention": "entmax", "attention_alpha": "1.5"}, ("entmax15", {})),
        ({"attention": "entmax", "attention_alpha": "learned"}, ("entmax", {"alpha": "learned"})),
        ({"attention": "entmax", "attention_alpha": "1.3"}, ("entmax", {"alpha": 1.3})),
        ({"attention": "fusedmax", "attention_lambda": 0.1}, ("fusedmax", {"lam": 0.1})),
    ],
)
def test_attention_configs_become_backends(attention, expected):
    assert ft.backend_and_params(attention) == expected


def test_the_settings_are_laid_out_as_the_fairseq_rows_config():
    settings = ft.FineTuneSettings(
        model=pm.MINILM_L6_V2.record(),
        attention={"attention": "sparsemax", "attention_gamma": 4.0},
        seed=2,
    )
    config = settings.config()
    assert config["model"]["attention_gamma"] == 4.0
    assert config["model"]["pretrained"]["weights_sha256"] == pm.MINILM_L6_V2.weights_sha256
    row = {"mapping": "sparsemax", "train": {"config": config}}
    assert row_label(row) == "sparsemax (γ=4)"
    # the run folder's record keeps the seed; the rows' config does not, so that a cell's
    # seeds share one config hash and the table shows them together (as the fairseq rows)
    assert settings.record()["finetune"]["seed"] == 2 and "seed" not in config["finetune"]
    other_seed = dataclasses.replace(settings, seed=3)
    assert config_sha256(other_seed.config()) == config_sha256(config)
    assert other_seed.record() != settings.record()


def _settings(**changes):
    options = dict(
        model=pm.MINILM_L6_V2.record(),
        attention={"attention": "entmax", "attention_alpha": "learned"},
        seed=3,
        lr=1e-4,
        warmup_steps=1,
        batch_size=4,
        max_epoch=2,
        patience=0,
        max_length=32,
        # pools of 2 batches of 4 over 9 pairs: batches of 4, 4 and 1, shuffled, so a resume
        # must skip batches, not pairs
        length_pool=2,
    )
    return ft.FineTuneSettings(**{**options, **changes})


class Interrupted(Exception):
    pass


def _interrupt_after_epoch_1(line: str) -> None:
    if line.startswith("[finetune] epoch 1:"):
        raise Interrupted(line)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    return pm.model_dir(cache_dir=tmp_path_factory.mktemp("models"))


def _assert_same_parameters(best_a, best_b):
    """Two fine-tuned models saved in `best_a` and `best_b` are equal to the last parameter."""
    model_a, _ = ft.load_finetuned(best_a)
    model_b, _ = ft.load_finetuned(best_b)
    for (name, a), b in zip(
        model_a.state_dict().items(), model_b.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, msg=name)


@needs_minilm
def test_a_resumed_run_trains_as_an_uninterrupted_one(minilm, tmp_path):
    # the learned α in a group of its own: both groups' optimizer state must resume
    settings = _settings(alpha_lr=1e-2)
    whole = ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "whole", progress=str)
    with pytest.raises(Interrupted):
        ft.fine_tune(
            settings, minilm, PAIRS, PAIRS, tmp_path / "cut", progress=_interrupt_after_epoch_1
        )
    assert (tmp_path / "cut" / ft.LAST_CHECKPOINT).is_file()
    lines = []
    resumed = ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "cut", progress=lines.append)
    assert lines[0].startswith("[finetune] resuming"), lines
    assert "; learned α mean " in lines[1] and " of 72 heads above 1.5" in lines[1], lines
    assert resumed.curve["epochs"] == whole.curve["epochs"] == [1, 2]
    for key in ("train_loss", "valid_loss", "valid_accuracy"):
        assert resumed.curve[key] == whole.curve[key], key
    log = [json.loads(x) for x in (tmp_path / "cut" / ft.LOG_FILE).read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2]
    assert {r["optimizer"] for r in log} == {"AdamW, fused"} and resumed.optimizer == "AdamW, fused"
    assert len(log[0]["alpha"]) == 6 and len(log[0]["alpha"][0]) == 12  # layers x heads
    # the heads' spread after each epoch, from the log: population sd over all 72 heads
    spread = [float(torch.tensor(r["alpha"]).std(unbiased=False)) for r in log]
    assert resumed.curve["alpha_sd"] == pytest.approx(spread, abs=1e-4)
    # a finished run keeps only its best epoch's model
    assert not (tmp_path / "cut" / ft.LAST_CHECKPOINT).exists()
    _assert_same_parameters(whole.best_dir, resumed.best_dir)
    # and is not trained again
    again = []
    finished = ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "cut", progress=again.append)
    assert again == []
    # the resume is recorded once, for the row; a run trained at one go has none
    batches = "epoch 2's from the seed, as the uninterrupted run"
    assert resumed.resumes == finished.resumes == [{"epoch": 2, "step": 0, "batches": batches}]
    assert whole.resumes == []


@needs_minilm
def test_a_run_cut_mid_epoch_resumes_at_its_next_step(minilm, tmp_path, monkeypatch):
    """A partial checkpoint after every step (PARTIAL_EVERY_S = 0); the run is cut after step 2
    of epoch 2 (of 3 steps) and resumed: it goes on from step 3 and ends as an uninterrupted
    run, to the last parameter."""
    settings = _settings()
    whole = ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "whole", progress=str)
    monkeypatch.setattr(ft, "PARTIAL_EVERY_S", 0.0)
    save = ft._save_atomically

    def save_then_cut(state, path):
        save(state, path)
        if path.name == ft.PARTIAL_CHECKPOINT and (state["epoch"], state["step"]) == (2, 2):
            raise Interrupted(path)

    monkeypatch.setattr(ft, "_save_atomically", save_then_cut)
    with pytest.raises(Interrupted):
        ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "cut", progress=str)
    monkeypatch.setattr(ft, "_save_atomically", save)
    lines, partial_after_epoch = [], []

    def note(line):  # an epoch's line comes after its whole checkpoint is saved
        lines.append(line)
        if line.startswith("[finetune] epoch"):
            partial_after_epoch.append((tmp_path / "cut" / ft.PARTIAL_CHECKPOINT).exists())

    resumed = ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "cut", progress=note)
    assert lines[0].endswith("after epoch 1") and lines[1].endswith("in epoch 2 after step 2")
    # a whole epoch's checkpoint removes the mid-epoch one it supersedes
    assert partial_after_epoch == [False]
    for key in ("epochs", "train_loss", "valid_loss", "valid_accuracy"):
        assert resumed.curve[key] == whole.curve[key], key
    assert not (tmp_path / "cut" / ft.PARTIAL_CHECKPOINT).exists()
    _assert_same_parameters(whole.best_dir, resumed.best_dir)
    batches = "epoch 2's from the seed, as the uninterrupted run"
    assert resumed.resumes == [{"epoch": 2, "step": 2, "batches": batches}]


def test_a_resumed_run_keeps_the_adamw_kernel_it_started_with():
    """A new run steps AdamW's fused kernel; a checkpoint saved by the per-parameter loop (a
    run started before it) resumes with the loop, and steps as the loop does to the last bit."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    settings = _settings()
    state = ft.training_state(model, settings)
    assert ft.optimizer_kind(state["optimizer"]) == "AdamW, fused"
    loop = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    assert ft.optimizer_kind(loop) == "AdamW, per-parameter loop"

    def step(optimizer):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    step(loop)
    saved = {
        "optimizer": copy.deepcopy(loop.state_dict()),
        "before": {k: v.clone() for k, v in model.state_dict().items()},
    }
    step(loop)
    after_loop = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(saved["before"])
    state["optimizer"].load_state_dict(saved["optimizer"])
    assert ft.optimizer_kind(state["optimizer"]) == "AdamW, per-parameter loop"
    step(state["optimizer"])
    for name, value in model.state_dict().items():
        assert torch.equal(value, after_loop[name]), name


class _LearnedAlphaStandIn(torch.nn.Module):
    """A linear layer scaled by an attention module's learned α logits (``attention.alpha_logit``,
    one per head, as `AttentionMapping` holds them), so that both get gradients."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.attention = torch.nn.Module()
        self.attention.alpha_logit = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        return self.linear(x) * self.attention.alpha_logit


@pytest.mark.parametrize("alpha_lr", [None, 0.05])
def test_a_learned_alpha_trains_at_its_own_rate_without_weight_decay(alpha_lr):
    """AdamW's first step decays a parameter p to p (1 - lr wd), then moves it by lr sign(g)
    (m̂/√v̂ = sign(g)): with alpha_lr the α logits move by alpha_lr and are not decayed, every
    other parameter as before; without, the logits are one more parameter at lr."""
    torch.manual_seed(0)
    model = _LearnedAlphaStandIn()
    lr, wd = 1e-4, 0.5
    settings = _settings(lr=lr, weight_decay=wd, warmup_steps=1, alpha_lr=alpha_lr)
    optimizer = ft.training_state(model, settings)["optimizer"]
    assert ft.optimizer_kind(optimizer) == "AdamW, fused"
    assert len(optimizer.param_groups) == (1 if alpha_lr is None else 2)
    model(torch.ones(2, 4)).sum().backward()
    before = {name: (p.detach().clone(), p.grad.sign()) for name, p in model.named_parameters()}
    optimizer.step()
    rates = {name: (lr, wd) for name in before}
    if alpha_lr is not None:
        rates["attention.alpha_logit"] = (alpha_lr, 0.0)
    for name, p in model.named_parameters():
        value, sign = before[name]
        rate, decay = rates[name]
        expected = value * (1 - rate * decay) - rate * sign
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-7, msg=name)


def test_alpha_lr_is_a_learned_alphas_alone_and_absent_from_the_config_when_unset():
    """Only an attention with a learned α takes alpha_lr; unset, the settings and their config
    hash are those of the runs from before the field existed (no ``alpha_lr`` key)."""
    with pytest.raises(ReproError, match="has none"):
        _settings(attention={"attention": "sparsemax"}, alpha_lr=1e-3)
    with pytest.raises(ReproError, match="> 0"):
        _settings(alpha_lr=0.0)
    with pytest.raises(ReproError, match="no learned α"):
        ft.training_state(torch.nn.Linear(4, 3), _settings(alpha_lr=1e-3))
    assert "alpha_lr" not in _settings().record()["finetune"]
    assert _settings(alpha_lr=1e-3).config()["finetune"]["alpha_lr"] == 1e-3


def test_the_pretrained_table_gives_alpha_lr_to_learned_alpha_alone():
    """table1_pretrained's finetune.alpha_lr reaches entmax_learned's settings, and no other
    mapping's, whose settings stay as their committed rows were trained."""
    from regattn_fairseq.experiments.core.config import load_config
    from regattn_fairseq.experiments.pipelines import pretrained

    [experiment] = load_config("reproduce", "table1_pretrained").experiments
    for mapping in ("entmax_learned", "softmax", "sparsemax", "fusedmax", "uniform"):
        settings = pretrained.settings_for(experiment, "small", mapping, 1)
        assert settings.alpha_lr == (1e-3 if mapping == "entmax_learned" else None), mapping


def test_a_stale_partial_checkpoint_is_removed(tmp_path):
    """A partial checkpoint of an epoch already saved whole (cut between the two) is not
    loaded: it is removed."""
    path = tmp_path / ft.PARTIAL_CHECKPOINT
    torch.save({"epoch": 1, "step": 2}, path)
    assert ft._resume_partial(path, {}, epoch=2) is None
    assert not path.exists()
    assert ft._resume_partial(path, {}, epoch=2) is None


@pytest.mark.parametrize(
    "avx512_bf16,amx,native", [(False, False, False), (True, False, True), (False, True, True)]
)
def test_bf16_is_native_with_avx512_bf16_or_amx(monkeypatch, avx512_bf16, amx, native):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert ft.bf16_is_native() is native


@needs_minilm
def test_bf16_without_bfloat16_hardware_says_it_is_emulated(minilm, tmp_path, monkeypatch):
    monkeypatch.setattr(ft, "bf16_is_native", lambda: False)
    lines = []
    ft.fine_tune(
        _settings(max_epoch=1, bf16=True), minilm, PAIRS, PAIRS, tmp_path, progress=lines.append
    )
    assert lines[0].startswith("[finetune] warning: bf16 autocast on a CPU without bfloat16")
    monkeypatch.setattr(ft, "bf16_is_native", lambda: True)
    lines = []
    ft.fine_tune(
        _settings(max_epoch=1, bf16=True), minilm, PAIRS, PAIRS, tmp_path / "b", lines.append
    )
    assert not any("warning" in line for line in lines)


@needs_minilm
def test_a_folder_of_other_settings_is_refused(minilm, tmp_path):
    ft.fine_tune(_settings(max_epoch=1), minilm, PAIRS, PAIRS, tmp_path, progress=str)
    with pytest.raises(ReproError, match="other settings"):
        ft.fine_tune(_settings(max_epoch=1, lr=1e-3), minilm, PAIRS, PAIRS, tmp_path)


@needs_minilm
@pytest.mark.parametrize("bf16", [False, True])
def test_classify_scores_items_and_attention(minilm, tmp_path, bf16):
    # in bf16 (the table's setting) the statistics still read rows that sum to 1: they come
    # from a float32 pass (bf16's rounding broke the row check, after a whole fine-tuning)
    settings = _settings(max_epoch=1, bf16=bf16)
    run = ft.fine_tune(settings, minilm, PAIRS, PAIRS, tmp_path / "run", progress=str)
    model, tokenizer = ft.load_finetuned(run.best_dir)
    export = tmp_path / "run" / "decode" / "test.attention.jsonl.gz"
    result = classify(model, tokenizer, PAIRS, settings, export, {"name": "entmax_learned"})
    scores = result["items"]["scores"]["accuracy"]
    assert len(scores) == len(PAIRS) and set(scores) <= {0, 100}
    assert result["metrics"]["accuracy"] == round(sum(scores) / len(scores), 2)
    attention = result["attention"]
    assert len(attention["by_layer"]) == 6
    assert len(attention["alpha"]) == 6 and all(len(a) == 12 for a in attention["alpha"])
    assert 0 <= attention["mean_zero_fraction"] <= 1
    records = read_export(export)
    assert len(records) == len(PAIRS)
    first = records[0]
    n = len(first["src_tokens"])
    assert first["src_tokens"][0] == "[CLS]" and len(first["attention"]) == n
    for row in first["attention"]:
        assert len(row) == n and abs(sum(row) - 1) < 1e-3


_DRAW = random.Random(7)
LENGTHS = [_DRAW.randint(5, 60) for _ in range(1000)]


def _padded(batches, lengths):
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


@pytest.mark.parametrize("pool", [1, 3, 16])
def test_length_grouped_batches_cover_every_pair_once(pool):
    plan = ft.length_grouped_batches(LENGTHS, 32, pool, random.Random("1-1"))
    assert sorted(i for batch in plan for i in batch) == list(range(len(LENGTHS)))
    # every batch is whole but the last of the last pool (1000 = 31 x 32 + 8)
    assert sorted(len(b) for b in plan) == [8] + [32] * 31
    # the epoch's batches are drawn from its generator alone
    assert plan == ft.length_grouped_batches(LENGTHS, 32, pool, random.Random("1-1"))
    assert plan != ft.length_grouped_batches(LENGTHS, 32, pool, random.Random("1-2"))


def test_length_grouping_cuts_padding_and_keeps_batches_random():
    random_plan = ft.length_grouped_batches(LENGTHS, 32, 1, random.Random(0))
    grouped = ft.length_grouped_batches(LENGTHS, 32, 16, random.Random(0))
    real = sum(LENGTHS)
    assert _padded(random_plan, LENGTHS) / real > 1.4
    assert _padded(grouped, LENGTHS) / real < 1.1
    # within a pool the batches are sorted by length, but their order through the epoch is
    # shuffled: one pool of every pair (32 batches' worth) is not run shortest to longest
    one_pool = ft.length_grouped_batches(LENGTHS, 32, 32, random.Random(0))
    longest = [max(LENGTHS[i] for i in b) for b in one_pool]
    assert longest != sorted(longest)


def test_length_sorted_batches_cover_every_pair_in_length_order():
    plan = ft.length_sorted_batches(LENGTHS, 64)
    flat = [i for batch in plan for i in batch]
    assert sorted(flat) == list(range(len(LENGTHS)))
    assert [LENGTHS[i] for i in flat] == sorted(LENGTHS)
    assert all(len(b) == 64 for b in plan[:-1])


@pytest.mark.parametrize("size,pool", [(0, 4), (32, 0)])
def test_empty_batches_or_pools_are_refused(size, pool):
    with pytest.raises(ReproError, match="must be at least 1"):
        ft.length_grouped_batches(LENGTHS, size, pool, random.Random(0))


UNEVEN = ft.NliPairs(
    premises=[
        "A man .",
        "Two dogs run on the green grass in a park near a lake while children watch them .",
        "A woman reads a book on a bench .",
        "People .",
        "A boy in a red shirt jumps from a rock into a river on a sunny afternoon .",
    ],
    hypotheses=["A person .", "Animals are outside .", "She sleeps .", "A crowd .", "He swims ."],
    labels=[0, 0, 2, 1, 1],
)


@needs_minilm
def test_evaluation_in_length_order_scores_each_pair_as_one_at_a_time(minilm):
    """Validation and scoring batch the pairs by length: the loss, accuracy and each pair's
    prediction are those of the pairs scored one by one, in their own order."""
    from regattn_fairseq.experiments.score import hf_classify

    settings = _settings(batch_size=1)  # evaluation batches of 2: the sort reorders them
    model, tokenizer = ft.build_model(minilm, settings)
    model.eval()
    with torch.no_grad():  # a new head's logits barely differ: spread them, so pairs differ
        model.classifier.weight.mul_(100.0)
    alone = []
    with torch.no_grad():
        for i in range(len(UNEVEN)):
            out = model(**ft.encode(UNEVEN, tokenizer, [i], settings.max_length))
            alone.append((float(out.loss), int(out.logits.argmax(-1))))
    assert len({p for _, p in alone}) > 1  # else a wrong order would go unseen
    lengths = ft.pair_lengths(UNEVEN, tokenizer, settings.max_length)
    assert ft.length_sorted_batches(lengths, 2)[0] != [0, 1]
    assert hf_classify._predictions(model, tokenizer, UNEVEN, settings) == [p for _, p in alone]
    loss, accuracy = ft.validate(model, tokenizer, UNEVEN, settings)
    assert loss == pytest.approx(sum(x for x, _ in alone) / len(UNEVEN), abs=1e-5)
    correct = sum(p == label for (_, p), label in zip(alone, UNEVEN.labels, strict=True))
    assert accuracy == pytest.approx(100.0 * correct / len(UNEVEN))


def test_the_alpha_spread_per_epoch_skips_a_log_line_cut_by_a_kill(tmp_path):
    """`_curve` reads the learned α from the log as the learning curve does: a last line cut
    off mid-write is skipped, and there is one spread per epoch of the curve."""
    records = [
        {
            "epoch": 1,
            "train_loss": 1.0,
            "valid_loss": 0.9,
            "valid_accuracy": 50.0,
            "alpha": [[1.4, 1.6]],
        },
        {
            "epoch": 2,
            "train_loss": 0.8,
            "valid_loss": 0.8,
            "valid_accuracy": 60.0,
            "alpha": [[1.3, 1.7]],
        },
    ]
    text = "".join(json.dumps(r) + "\n" for r in records) + '{"epoch": 3, "train_loss": 0.7, "al'
    (tmp_path / ft.LOG_FILE).write_text(text, encoding="utf-8")
    curve = ft._curve(tmp_path, _settings())
    assert curve["epochs"] == [1, 2]
    assert curve["alpha_sd"] == pytest.approx([0.1, 0.2])
    # the run's record reads both its logs the same way (json.loads of every line raised)
    resume = {"epoch": 2, "step": 0, "batches": "epoch 2's from the seed, as the uninterrupted run"}
    resumes = json.dumps(resume) + "\n" + '{"epoch": 3, "st'
    (tmp_path / ft.RESUMES_FILE).write_text(resumes, encoding="utf-8")
    run = ft._finished(tmp_path, _settings())
    assert run.resumes == [resume] and run.curve["epochs"] == [1, 2]
