"""The `transformers` backends (regattn.integrations.transformers) on tiny random models of the
three kinds: an encoder (BERT), a causal decoder with grouped-query attention (Llama: 4 query
heads, 2 key/value heads) and an encoder-decoder (BART). T5 (relative position bias) and
Gemma 2 (score soft-capping, sliding-window layers) join the equivalence test. Nothing is
downloaded."""

import sys
import textwrap

import children
import pytest
import torch
from hf_tiny_models import HEADS, KINDS, LENGTHS, PAD, tiny_batch, tiny_model
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from regattn.integrations import transformers as rt

rt.register()

# backend -> configure's parameters (None: the backend's defaults, not configured)
TRAINED = {
    "softmax": None,
    "sparsemax": None,
    "fusedmax": {"lam": 0.1},
    "oscarmax": {"lam": 0.01},
    "sq_pnorm_max": {"p": 1.5},
    "entmax15": None,
    "entmax": {"alpha": "learned"},
}


def exact_zero_checks(kind: str, out, batch) -> int:
    """Asserts that padded keys and future positions get exact zeros and that each row with
    an unmasked position sums to 1; returns the number of rows checked."""
    padded_keys = batch["attention_mask"] == 0  # (batch, keys)
    if kind == "encoder":
        groups = [(out.attentions, padded_keys, False)]
    elif kind == "decoder":
        groups = [(out.attentions, padded_keys, True)]
    else:
        no_padding = torch.zeros_like(batch["labels"], dtype=torch.bool)
        groups = [
            (out.encoder_attentions, padded_keys, False),
            (out.decoder_attentions, no_padding, True),
            (out.cross_attentions, padded_keys, False),
        ]
    rows = 0
    for attentions, padded, causal in groups:
        assert len(attentions) == 2
        for weights in attentions:
            removed = padded[:, None, None, :].expand_as(weights)
            if causal:
                queries, keys = weights.shape[-2:]
                future = torch.ones(queries, keys, dtype=torch.bool).triu(1)
                removed = removed | future
            assert torch.all(weights[removed] == 0)
            sums = weights.sum(-1)
            nonempty = ~removed.all(-1)
            torch.testing.assert_close(
                sums[nonempty], torch.ones_like(sums[nonempty]), atol=1e-5, rtol=0
            )
            rows += int(nonempty.sum())
    return rows


@pytest.mark.parametrize("kind", [*KINDS, "t5", "gemma2"])
def test_regattn_softmax_equals_eager_in_logits_and_gradients(kind):
    batch = tiny_batch(kind)
    results = {}
    for attn in ("eager", "regattn_softmax"):
        model = tiny_model(kind, attn, dtype=torch.float64)
        out = model(**batch)
        out.loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results[attn] = (out.logits.detach(), grads)
    (eager_logits, eager_grads), (logits, grads) = results["eager"], results["regattn_softmax"]
    torch.testing.assert_close(logits, eager_logits, atol=1e-6, rtol=0)
    assert grads.keys() == eager_grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[name], atol=1e-6, rtol=0, msg=name)


@pytest.mark.parametrize(
    "kind, backend",
    [(kind, backend) for kind in KINDS for backend in TRAINED] + [("t5", "fusedmax")],
)
def test_every_mapping_trains_and_masks_with_exact_zeros(kind, backend):
    model = tiny_model(kind, rt.PREFIX + backend, dropout=0.1)
    if TRAINED[backend] is not None:
        rt.configure(model, **TRAINED[backend])
    batch = tiny_batch(kind)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    model.train()
    for _ in range(6):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    model.eval()
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    assert exact_zero_checks(kind, out, batch) > 0


def test_sparse_mappings_give_zeros_beyond_the_mask():
    # a mapping that is sparse at all puts zeros on unmasked positions too, which softmax
    # never does: the returned weights are the mapping's, not softmax's
    batch = tiny_batch("encoder")
    model = tiny_model("encoder", "regattn_sparsemax")
    model.bert.encoder.layer[0].attention.self.query.weight.data.mul_(50)  # peaked scores
    with torch.no_grad():
        weights = model(**batch, output_attentions=True).attentions[0]
    unmasked = batch["attention_mask"][:, None, None, :].bool().expand_as(weights)
    assert torch.any(weights[unmasked] == 0)


def test_a_prepared_additive_mask_removes_the_same_keys_as_the_boolean_one():
    batch = tiny_batch("encoder")
    model = tiny_model("encoder", "regattn_sparsemax").eval()
    keep = batch["attention_mask"].bool()[:, None, None, :]
    additive = torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    with torch.no_grad():
        from_2d = model(**batch, output_attentions=True)
        from_4d = model(batch["input_ids"], attention_mask=additive, output_attentions=True)
    torch.testing.assert_close(from_4d.logits, from_2d.logits)
    for a, b in zip(from_4d.attentions, from_2d.attentions, strict=True):
        assert torch.equal(a == 0, b == 0)


def test_a_fully_padded_row_follows_the_empty_policy():
    # left padding: the padded query positions of a causal model have no key to attend to
    batch = tiny_batch("decoder", left_padding=True)
    model = tiny_model("decoder", "regattn_sparsemax")
    rt.configure(model, empty="zero")
    out = model(**batch, output_attentions=True)
    out.loss.backward()
    pads = (batch["attention_mask"] == 0).sum(-1)
    assert pads.tolist() == [0, 3, 5]
    for weights in out.attentions:
        for row, n in enumerate(pads.tolist()):
            assert torch.all(weights[row, :, :n] == 0)
            sums = weights[row, :, n:].sum(-1)
            torch.testing.assert_close(sums, torch.ones_like(sums))
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    rt.configure(model, empty="error")
    with pytest.raises(ValueError, match="no unmasked position"):
        model(**batch)


@pytest.mark.parametrize("kind", ["decoder", "encoder"])
def test_learned_alpha_gets_a_gradient_and_survives_save_and_load(kind, tmp_path):
    batch = tiny_batch(kind)
    model = tiny_model(kind, "regattn_entmax")
    rt.configure(model, alpha="learned", gamma=1.0)
    attention = [getattr(m, rt.MAPPING_ATTRIBUTE) for m in rt.attention_modules(model)]
    assert len(attention) == 2
    torch.testing.assert_close(attention[0].alpha(), torch.full((HEADS,), 1.5))
    model(**batch).loss.backward()
    for mapping in attention:
        assert mapping.alpha_logit.grad is not None and torch.all(mapping.alpha_logit.grad != 0)
    with torch.no_grad():  # distinct alphas per layer and head, so a lost one shows
        for layer, mapping in enumerate(attention):
            mapping.alpha_logit.copy_(torch.linspace(-2.0, 2.0, HEADS) + layer)
    model.eval()
    with torch.no_grad():
        logits = model(**batch).logits
    model.save_pretrained(tmp_path)
    loaded = rt.from_pretrained(type(model), tmp_path).eval()
    assert loaded.config._attn_implementation == "regattn_entmax"
    assert loaded.config.regattn_attention["params"] == {"alpha": "learned", "gamma": 1.0}
    loaded_attention = [getattr(m, rt.MAPPING_ATTRIBUTE) for m in rt.attention_modules(loaded)]
    for mapping, restored in zip(attention, loaded_attention, strict=True):
        torch.testing.assert_close(restored.alpha(), mapping.alpha())
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, logits)


def test_from_pretrained_loads_sharded_checkpoints_through_auto_classes(tmp_path):
    model = tiny_model("decoder", "regattn_entmax")
    rt.configure(model, alpha="learned")
    with torch.no_grad():
        model.model.layers[1].self_attn.regattn_mapping.alpha_logit.fill_(1.0)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / rt.WEIGHTS_INDEX).exists()
    loaded = rt.from_pretrained(AutoModelForCausalLM, tmp_path)
    assert isinstance(loaded, LlamaForCausalLM)
    torch.testing.assert_close(
        loaded.model.layers[1].self_attn.regattn_mapping.alpha_logit, torch.ones(HEADS)
    )


def test_generate_with_the_kv_cache():
    prompt = tiny_batch("decoder", left_padding=True)
    prompt.pop("labels")
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=PAD, eos_token_id=None)
    tokens = {}
    for attn in ("eager", "regattn_softmax", "regattn_sparsemax"):
        model = tiny_model("decoder", attn).eval()
        for use_cache in (True, False):
            tokens[attn, use_cache] = model.generate(**prompt, use_cache=use_cache, **settings)
    assert tokens["eager", True].shape == (3, max(LENGTHS) + 6)
    assert torch.equal(tokens["regattn_softmax", True], tokens["eager", True])
    for attn in ("eager", "regattn_softmax", "regattn_sparsemax"):
        assert torch.equal(tokens[attn, True], tokens[attn, False]), attn


def test_bad_settings_are_value_errors_and_leave_the_model_unchanged():
    model = tiny_model("encoder", "regattn_fusedmax")
    rt.configure(model, lam=0.2)
    cases = [
        ({"mapping": "sparsemaxx"}, "unknown regattn attention 'sparsemaxx'"),
        ({"mapping": "fusedmax", "lam": -1.0}, "lam"),
        ({"mapping": "fusedmax", "alpha": 1.5}, "takes no parameter 'alpha'"),
        ({"mapping": "entmax15", "alpha": 1.2}, "regattn_entmax15 fixes alpha"),
        ({"mapping": "sparsemax", "alpha": "learned"}, "alpha='learned' is for regattn_entmax"),
        ({"mapping": "entmax", "alpha": 0.5}, "alpha"),
        ({"mapping": "softmax", "empty": "nan"}, "empty"),
    ]
    for settings, message in cases:
        with pytest.raises(ValueError, match=message):
            rt.configure(model, **settings)
    assert model.config._attn_implementation == "regattn_fusedmax"
    assert model.config.regattn_attention == {
        "mapping": "fusedmax",
        "empty": "zero",
        "params": {"lam": 0.2},
    }
    eager = tiny_model("encoder", "eager")
    with pytest.raises(ValueError, match="unknown regattn attention 'eager'"):
        rt.configure(eager)


def test_a_model_switched_to_another_backend_without_configure_is_an_error():
    model = tiny_model("encoder", "regattn_fusedmax")
    rt.configure(model, lam=0.2)
    model.set_attn_implementation("regattn_sparsemax")
    with pytest.raises(ValueError, match="configured for regattn_fusedmax"):
        model(**tiny_batch("encoder"))


def test_regattn_imports_without_transformers():
    code = """
        import sys
        sys.modules["transformers"] = None  # any import of transformers now raises ImportError
        import regattn, regattn.integrations
        try:
            import regattn.integrations.transformers
        except ImportError:
            print("ok")
    """
    proc = children.run([sys.executable, "-c", textwrap.dedent(code)], cwd="/")
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_attention_sinks_are_refused():
    module = torch.nn.Module()
    q = k = v = torch.zeros(1, HEADS, 3, 8)
    with pytest.raises(ValueError, match="attention sinks"):
        rt.regattn_attention_forward("sparsemax", module, q, k, v, None, s_aux=torch.zeros(HEADS))


@pytest.mark.parametrize("backend", list(rt.BACKENDS))
def test_neg_inf_in_the_mask_or_the_scores_removes_keys(backend):
    """An additive mask with -inf or with the dtype's minimum (what `transformers` builds),
    and -inf reaching the scores themselves (here through a position bias), all remove the
    same keys as the boolean mask: the mappings take a -inf score as a masked position."""
    g = torch.Generator().manual_seed(5)
    query, key, value = (torch.randn(2, 3, 4, 8, generator=g) for _ in range(3))
    keep = torch.rand(2, 1, 1, 4, generator=g) > 0.3
    keep[..., 0] = True
    module = torch.nn.Module().eval()
    expected, weights = rt.regattn_attention_forward(backend, module, query, key, value, keep)
    assert (weights.masked_select(~keep.expand_as(weights)) == 0).all()
    for fill in (float("-inf"), torch.finfo(torch.float32).min):
        additive = torch.zeros(keep.shape).masked_fill(~keep, fill)
        out, _ = rt.regattn_attention_forward(backend, module, query, key, value, additive)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    bias = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    out, _ = rt.regattn_attention_forward(
        backend, module, query, key, value, None, position_bias=bias
    )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
