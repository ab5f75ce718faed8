"""The regattn mappings as attention backends of Hugging Face `transformers`: any model whose
attention goes through `transformers`' AttentionInterface computes

    mapping(Q K^T * scaling + bias, mask) V

with the model's own scaling, dropout, grouped-query heads and causal or padding masks, where
the masked positions are removed from the mapping's problem (they get exact zeros; no -inf
enters the scores).

    from regattn.integrations import transformers as rt
    rt.register()
    model = AutoModel.from_pretrained(path, attn_implementation="regattn_sparsemax")
    rt.configure(model, mapping="fusedmax", lam=0.1)    # parameters per model

Backends (IMPLEMENTATIONS): regattn_softmax, regattn_sparsemax, regattn_fusedmax,
regattn_oscarmax, regattn_sq_pnorm_max, regattn_entmax15, regattn_entmax (alpha-entmax,
alpha a number or "learned": one alpha per head, an nn.Parameter of each attention module, see
`configure`) and the attention-free control regattn_uniform (1/n over the unmasked keys, whatever
the scores). A model that is not configured runs its backend's mapping with its default
parameters (`regattn.mappings.defaults_of`).

`configure` records its settings in `model.config` (saved by `save_pretrained`); `from_pretrained`
here loads such a model back with its settings and learned alphas.

The fused path: where the mapping is one `regattn.attention.sparse_attention` computes
(sparsemax, 1.5-entmax, alpha-entmax with alpha in (1, 2] fixed or learned per head, any
temperature gamma), the attention runs flash-style in its Triton kernels on CUDA, with no
(queries x keys) score matrix in memory; elsewhere it keeps the row-wise path above.
`configure(model, attention_impl=...)` chooses: "auto" (the default: fused on CUDA where it can
run), "fused" (an error naming why where it cannot) or "rowwise"; `fused_blocker` says why a
call cannot take the fused path. A call with output_attentions takes the row-wise path under
each (only it forms the weights).

Fully masked rows: with left padding, a causal model's padded query positions have no key to
attend to. `transformers` discards their outputs, so the backends give them zeros by default
(`empty="zero"`); `configure(model, empty="error")` makes such a row a ValueError instead.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch
from torch import nn
from transformers import AttentionInterface, AutoConfig
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from regattn import attention, mappings
from regattn.mappings.learned_alpha import ALPHA_INIT, alpha_from_logit, alpha_logit_for

PREFIX = "regattn_"
# backend -> (the library's mapping, the parameters the backend fixes), from the mappings'
# declarations: each mapping and control (uniform, 1/n over the unmasked keys) under its name,
# and entmax15 (entmax with alpha 1.5)
BACKENDS = mappings.transformers_backends()
IMPLEMENTATIONS = tuple(PREFIX + backend for backend in BACKENDS)
LEARNED = mappings.LEARNED
DEFAULT_EMPTY = "zero"
ATTENTION_IMPLS = attention.MODEL_IMPLS
DEFAULT_ATTENTION_IMPL = "auto"
# the attribute of each attention module that holds its AttentionMapping, and the key of the
# model config that records `configure`'s settings
MAPPING_ATTRIBUTE = "regattn_mapping"
CONFIG_KEY = "regattn_attention"
# where save_pretrained puts the weights (one file, or shards listed by an index)
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


def backend_of(name: str) -> str:
    """The backend a mapping or implementation name stands for.

    Parameters
    ----------
    name : str
        a backend ("fusedmax") or its implementation name ("regattn_fusedmax").

    Returns
    -------
    str
        The backend, a key of BACKENDS.

    Raises
    ------
    ValueError
        if `name` is neither.
    """
    backend = name.removeprefix(PREFIX) if isinstance(name, str) else name
    if backend not in BACKENDS:
        raise ValueError(
            f"unknown regattn attention {name!r}; choose one of {', '.join(BACKENDS)} "
            f"(attn_implementation: {', '.join(IMPLEMENTATIONS)})"
        )
    return backend


class AttentionMapping(nn.Module):
    """The mapping one attention module applies to its scores (batch, heads, queries, keys),
    with the parameters `configure` set; with alpha="learned", alpha-entmax with one alpha per
    head, alpha = 1.01 + 0.99 sigmoid(alpha_logit) (regattn.mappings.learned_alpha), starting
    at 1.5.

    Parameters
    ----------
    backend : str
        a key of BACKENDS.
    num_heads : int, optional
        the number of query heads; needed for a learned alpha only.
    empty : str
        what a row with no unmasked position gets: "zero" or "error" (a ValueError).
    attention_impl : str
        "auto", "fused" or "rowwise": how the attention is computed (see `fused_blocker`).
    **params
        the mapping's parameters (`regattn.mappings.parameters_of`), except those the backend
        fixes (regattn_entmax15's alpha); alpha="learned" for regattn_entmax.

    Raises
    ------
    ValueError
        on an unknown backend, a parameter the mapping does not take or the backend fixes, a
        value out of range, a learned alpha without `num_heads` or off regattn_entmax, or an
        unknown `empty` or `attention_impl`.
    """

    def __init__(
        self,
        backend: str,
        num_heads: int | None = None,
        empty=DEFAULT_EMPTY,
        attention_impl: str = DEFAULT_ATTENTION_IMPL,
        **params,
    ):
        super().__init__()
        if attention_impl not in ATTENTION_IMPLS:
            raise ValueError(
                f"attention_impl must be one of {', '.join(ATTENTION_IMPLS)}, got "
                f"{attention_impl!r}"
            )
        self.attention_impl = attention_impl
        self.backend = backend_of(backend)
        name, fixed = BACKENDS[self.backend]
        fixed_here = sorted(set(params) & set(fixed))
        if fixed_here:
            raise ValueError(
                f"{PREFIX}{self.backend} fixes {', '.join(fixed_here)}; use {PREFIX}entmax to "
                "choose alpha"
            )
        learned = params.get("alpha") == LEARNED
        if learned:
            if "alpha" not in mappings.parameters_of(name):
                raise ValueError(
                    f"alpha='learned' is for {PREFIX}entmax, not {PREFIX}{self.backend}"
                )
            if num_heads is None:
                raise ValueError("a learned alpha needs the number of heads")
            params = {key: value for key, value in params.items() if key != "alpha"}
        # builds (and so checks) the mapping; with a learned alpha its gamma and empty are used
        self.mapping = mappings.build(name, empty=empty, **fixed, **params)
        self.alpha_logit = (
            nn.Parameter(torch.full((num_heads,), alpha_logit_for(ALPHA_INIT))) if learned else None
        )

    def alpha(self) -> torch.Tensor:
        """The learned alpha of each head (float32), or a ValueError if alpha is not learned."""
        if self.alpha_logit is None:
            raise ValueError(f"this {PREFIX}{self.backend} attention has no learned alpha")
        return alpha_from_logit(self.alpha_logit)

    def fused_alpha(self) -> float | torch.Tensor | None:
        """The alpha with which the fused attention computes this mapping (the learned
        per-head tensor, differentiable), or None where it computes another mapping.
        """
        if self.alpha_logit is not None:
            return self.alpha()
        name = BACKENDS[self.backend][0]
        params = {key: getattr(self.mapping, key) for key in mappings.parameters_of(name)}
        return attention.fused_alpha(name, params)

    def forward(self, scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The attention weights of `scores` over the last dim (mask: True may be attended)."""
        if self.alpha_logit is None:
            return self.mapping(scores, dim=-1, mask=mask)
        if scores.dim() < 3 or scores.shape[-3] != self.alpha_logit.shape[0]:
            raise ValueError(
                f"learned alpha has {self.alpha_logit.shape[0]} heads, the scores "
                f"{tuple(scores.shape)} are not laid out (..., heads, queries, keys) with as many"
            )
        return mappings.entmax(
            scores,
            dim=-1,
            mask=mask,
            alpha=self.alpha().view(-1, 1, 1),
            gamma=self.mapping.gamma,
            empty=self.mapping.empty,
        )

    def extra_repr(self) -> str:
        """The backend and its parameters, as the module's repr shows them."""
        impl = f", attention_impl={self.attention_impl!r}"
        if self.alpha_logit is None:
            return f"{PREFIX}{self.backend}: {self.mapping.extra_repr()}{impl}"
        mapping = self.mapping
        return (
            f"{PREFIX}{self.backend}: alpha=learned, gamma={mapping.gamma}, "
            f"empty={mapping.empty!r}{impl}"
        )


_DEFAULT_MAPPINGS: dict[str, AttentionMapping] = {}


def _mapping_for(module: nn.Module, backend: str) -> AttentionMapping:
    mapping = getattr(module, MAPPING_ATTRIBUTE, None)
    if mapping is None:
        if backend not in _DEFAULT_MAPPINGS:
            _DEFAULT_MAPPINGS[backend] = AttentionMapping(backend)
        return _DEFAULT_MAPPINGS[backend]
    if mapping.backend != backend:
        raise ValueError(
            f"the model runs {PREFIX}{backend} but was configured for {PREFIX}{mapping.backend}; "
            f"call configure(model, mapping={backend!r}, ...) to switch"
        )
    return mapping


def _split_mask(attention_mask: torch.Tensor | None):
    """(allowed, bias) of a `transformers` attention mask: allowed bool (True may be attended)
    or None; bias the additive float mask's finite rest (None for a boolean mask).
    """
    if attention_mask is None or attention_mask.dtype == torch.bool:
        return attention_mask, None
    # an additive mask: the dtype's minimum (or -inf) removes a key; a finite rest is a bias
    allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2
    return allowed, attention_mask.masked_fill(~allowed, 0)


def fused_blocker(
    mapping: AttentionMapping,
    module: nn.Module,
    query: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    softcap: float | None = None,
    **kwargs,
) -> str | None:
    """Why a call of the attention cannot take the fused path (`regattn.attention`), in
    words, or None when it can. The arguments are `regattn_attention_forward`'s.

    The fused kernels compute entmax(scale * q k^T, boolean mask) v and nothing else, so the
    row-wise path stays for: the mappings they do not compute (softmax, the structured ones,
    the uniform control), dropout on the attention weights in training (the kernels have no
    dropout; dropping weights after the mapping needs them), a position bias, a soft cap or
    an additive mask with finite nonzero entries (a bias on the scores), and tensors the
    kernels do not take (the device, float64, head dims above 256). A float mask is read on
    the host once for its bias (a device synchronization; the regattn backends' own masks are
    boolean and cost none). A call that asks for the weights (`wants_weights`) is no reason
    here: it takes the row-wise path whatever attention_impl says.
    """
    if mapping.fused_alpha() is None:
        return (
            "the fused kernels compute sparsemax and alpha-entmax with alpha in (1, 2], not "
            f"{PREFIX}{mapping.backend} ({mapping.mapping.extra_repr()})"
        )
    if module.training and dropout > 0:
        return (
            f"dropout {dropout} on the attention weights in training: the fused kernels have "
            "no dropout"
        )
    if position_bias is not None:
        return "a position bias is added to the scores: the fused kernels take no bias"
    if softcap is not None:
        return "the scores are soft-capped: the fused kernels map the scores as they are"
    why_not = attention.fused_unsupported(
        query.device, query.dtype, max(query.shape[-1], value.shape[-1])
    )
    if why_not is not None:
        return why_not
    _, bias = _split_mask(attention_mask)
    if bias is not None and bool(bias.any()):
        return "the additive attention mask adds a bias to the scores: the fused kernels take none"
    return None


def wants_weights(module: nn.Module, **kwargs) -> bool:
    """Whether a call asks for the attention weights (output_attentions, as an argument or in
    the model config), which only the row-wise path forms: such a call takes it whatever
    attention_impl says, as `transformers`' own eager path serves it for sdpa models.
    """
    config = getattr(module, "config", None)
    return bool(kwargs.get("output_attentions") or getattr(config, "output_attentions", False))


def _fused_attention(mapping, query, key, value, attention_mask, scaling) -> torch.Tensor:
    """The fused path of `regattn_attention_forward`: its output (batch, queries, heads,
    head_dim). transformers' masks already say which keys each query sees (causal, sliding
    windows, a KV cache's offset), so the kernel gets the boolean mask, never its own causal
    flag (top-left aligned, which a cached decoding step is not).
    """
    allowed, _ = _split_mask(attention_mask)
    if mapping.mapping.empty == "error" and allowed is not None and not bool(allowed.any(-1).all()):
        # the row-wise path raises on such a row; the kernels give it zeros
        raise ValueError(
            f"{PREFIX}{mapping.backend}: a query row has no unmasked position (empty='error'; "
            "configure(model, empty='zero') gives such rows zeros)"
        )
    output = attention.sparse_attention(
        query,
        key,
        value,
        alpha=mapping.fused_alpha(),
        mask=allowed,
        scale=scaling / mapping.mapping.gamma,
        impl="fused",
    )
    return output.transpose(1, 2).contiguous()


def regattn_attention_forward(
    backend: str,
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention with a regattn mapping, in the signature of `transformers`' attention functions.

    Parameters
    ----------
    backend : str
        a key of BACKENDS (`register` binds it).
    module : nn.Module
        the calling attention module; its AttentionMapping (set by `configure`) or else the
        backend's default mapping normalizes the scores; dropout applies in training mode.
    query, key, value : torch.Tensor
        (batch, heads, queries, head_dim) and (batch, kv_heads, keys, head_dim); with fewer
        key/value heads than query heads (grouped-query attention) each serves
        heads / kv_heads consecutive query heads, as `transformers`' repeat_kv does.
    attention_mask : torch.Tensor, optional
        broadcastable to (batch, heads, queries, keys): bool, True where a key may be attended
        (what the registered mask function makes), or additive float, where the dtype's
        minimum or -inf removes a key and other values are added to the scores.
    scaling : float, optional
        the scores' scale (default head_dim ** -0.5).
    dropout : float
        dropout probability on the attention weights, in training mode.
    position_bias : torch.Tensor, optional
        added to the scores (T5's relative position bias).
    softcap : float, optional
        scores become softcap * tanh(scores / softcap) (Gemma 2).
    **kwargs
        the model's other keyword arguments; attention sinks (s_aux) are not supported.

    Returns
    -------
    tuple[torch.Tensor, torch.Tensor or None]
        The output (batch, queries, heads, head_dim) and the attention weights (batch, heads,
        queries, keys), after dropout as `transformers`' eager attention returns them; None
        on the fused path, which never forms them (as `transformers`' sdpa backend).

    Raises
    ------
    ValueError
        on attention sinks, a fully masked row with empty="error", a mapping error, or
        attention_impl="fused" where the fused path cannot run (`fused_blocker` names why;
        a call that asks for the weights takes the row-wise path).
    """
    if kwargs.get("s_aux") is not None:
        raise ValueError(f"{PREFIX}{backend} does not support attention sinks (s_aux)")
    mapping = _mapping_for(module, backend)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    impl = mapping.attention_impl
    # "auto" asks only for CUDA tensors: on the CPU the row-wise path is taken unasked
    asks = impl == "fused" or (impl == "auto" and query.device.type == "cuda")
    if asks and not wants_weights(module, **kwargs):
        why_not = fused_blocker(
            mapping, module, query, value, attention_mask, dropout, position_bias, softcap,
            **kwargs,
        )  # fmt: skip
        if attention.use_fused(impl, query.device, why_not, option="attention_impl"):
            return _fused_attention(mapping, query, key, value, attention_mask, scaling), None
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    allowed, bias = _split_mask(attention_mask)
    if bias is not None:
        scores = scores + bias
    weights = mapping(scores, allowed)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def boolean_mask(*args, **kwargs) -> torch.Tensor | None:
    """The mask function of the regattn backends: `transformers`' boolean sdpa mask (True may
    be attended), always materialized for causal attention (sdpa may skip it and rely on its
    is_causal flag, which a regattn backend does not read). None only where nothing is masked.
    """
    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def _bound_forward(backend: str):
    def forward(module, query, key, value, attention_mask, **kwargs):
        return regattn_attention_forward(
            backend, module, query, key, value, attention_mask, **kwargs
        )

    forward.__name__ = f"{PREFIX}{backend}_attention_forward"
    forward.__doc__ = f"regattn_attention_forward with the {backend} backend."
    return forward


def register() -> None:
    """Registers every backend (IMPLEMENTATIONS) with `transformers`' AttentionInterface and
    its mask function with AttentionMaskInterface, so that models load with
    attn_implementation="regattn_<mapping>". Calling it again is harmless.
    """
    for backend in BACKENDS:
        AttentionInterface.register(PREFIX + backend, _bound_forward(backend))
        AttentionMaskInterface.register(PREFIX + backend, boolean_mask)


def _calls_attention_interface(cls: type) -> bool:
    # transformers' own heuristic (PreTrainedModel._can_set_attn_implementation) reads the
    # source too: an attention module is one whose forward dispatches through the interface
    try:
        return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of `model` whose forward calls `transformers`' attention interface.

    Parameters
    ----------
    model : nn.Module
        a `transformers` model.

    Returns
    -------
    list[nn.Module]
        Its attention modules (self- and cross-attention), in `model.modules()` order.
    """
    return [module for module in model.modules() if _calls_attention_interface(type(module))]


def _num_heads(module: nn.Module) -> int:
    for name in ("num_heads", "num_attention_heads", "n_heads", "n_head"):
        if isinstance(getattr(module, name, None), int):
            return getattr(module, name)
    config = getattr(module, "config", None)
    if isinstance(getattr(config, "num_attention_heads", None), int):
        return config.num_attention_heads
    raise ValueError(f"cannot tell the number of heads of {type(module).__name__}")


def configure(
    model: nn.Module,
    mapping: str | None = None,
    empty: str = DEFAULT_EMPTY,
    attention_impl: str = DEFAULT_ATTENTION_IMPL,
    **params,
):
    """Sets the mapping and its parameters of every attention module of a model.

    The model switches to attn_implementation "regattn_<mapping>"; each attention module gets
    an AttentionMapping (its `regattn_mapping` attribute), holding with alpha="learned" the
    nn.Parameter `alpha_logit` of its heads (so it trains and is saved with the model). The
    settings are recorded in `model.config.regattn_attention`, so that `save_pretrained` saves
    them and `from_pretrained` (here) restores them. Each call replaces the previous settings:
    parameters not given take the mapping's defaults.

    Parameters
    ----------
    model : nn.Module
        a `transformers` model (PreTrainedModel).
    mapping : str, optional
        a backend ("fusedmax") or implementation name ("regattn_fusedmax"); default: the
        model's current regattn implementation.
    empty : str
        what a row with no unmasked position gets: "zero" (default) or "error".
    attention_impl : str
        "auto" (default): the fused path (`regattn.attention.sparse_attention`) for CUDA
        tensors where it can run (`fused_blocker`), the row-wise path otherwise; "fused": the
        fused path, a ValueError naming why at a call where it cannot run; "rowwise": the
        row-wise path (the scores matrix, the mapping, P V).
    **params
        the mapping's parameters, e.g. lam=0.1, gamma=1.0; alpha=1.3 or alpha="learned" for
        "entmax".

    Returns
    -------
    nn.Module
        The model, changed in place.

    Raises
    ------
    ValueError
        on an unknown mapping (or, without `mapping`, a model not on a regattn backend), a
        parameter the mapping does not take, a value out of range, an unknown
        attention_impl, or a model without attention modules; the model is then left
        unchanged.
    """
    backend = backend_of(mapping if mapping is not None else model.config._attn_implementation)
    modules = attention_modules(model)
    if not modules:
        raise ValueError(
            f"{type(model).__name__} has no module that calls transformers' AttentionInterface"
        )
    learned = params.get("alpha") == LEARNED
    built = [
        AttentionMapping(
            backend, _num_heads(module) if learned else None, empty, attention_impl, **params
        )
        for module in modules
    ]
    register()
    if model.config._attn_implementation != PREFIX + backend:
        model.set_attn_implementation(PREFIX + backend)
    for module, built_mapping in zip(modules, built, strict=True):
        weight = next(module.parameters(), None)
        setattr(
            module,
            MAPPING_ATTRIBUTE,
            built_mapping.to(weight.device) if weight is not None else built_mapping,
        )
    settings = {"mapping": backend, "empty": empty, "params": params}
    if attention_impl != DEFAULT_ATTENTION_IMPL:  # configs saved before the option read as auto
        settings["attention_impl"] = attention_impl
    setattr(model.config, CONFIG_KEY, settings)
    return model


def _checkpoint_tensors(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors `names` that the safetensors checkpoint under `path` holds."""
    from safetensors import safe_open

    index = path / WEIGHTS_INDEX
    if index.exists():
        file_of = json.loads(index.read_text())["weight_map"]
    elif (path / WEIGHTS_FILE).exists():
        file_of = dict.fromkeys(names, WEIGHTS_FILE)
    else:
        raise ValueError(f"no {WEIGHTS_FILE} or {WEIGHTS_INDEX} under {path}")
    tensors = {}
    for file in {file_of[name] for name in names if name in file_of}:
        with safe_open(path / file, framework="pt") as handle:
            held = set(handle.keys())
            tensors.update({name: handle.get_tensor(name) for name in names if name in held})
    return tensors


def from_pretrained(model_class, path, attention_impl: str | None = None, **kwargs):
    """Loads a model saved after `configure` with its regattn settings and learned alphas.

    `model_class.from_pretrained` alone builds the model before it reads the weights, without
    the alpha parameters that `configure` adds (it reports them as unexpected keys); this
    loads the model, configures it from `config.regattn_attention` and then reads the alphas.
    A model saved without regattn settings is loaded as `model_class.from_pretrained` does.

    Parameters
    ----------
    model_class
        a `transformers` model class or Auto class, e.g. AutoModelForCausalLM.
    path
        a local folder written by `save_pretrained`.
    attention_impl : str, optional
        "auto", "fused" or "rowwise" (see `configure`); default: the saved one.
    **kwargs
        passed to `model_class.from_pretrained`; attn_implementation defaults to the saved
        regattn backend.

    Returns
    -------
    PreTrainedModel
        The model.

    Raises
    ------
    ValueError
        if the settings ask for learned alphas the checkpoint does not hold, or attention_impl
        is given for a model saved without regattn settings.
    """
    register()
    path = Path(path)
    settings = getattr(AutoConfig.from_pretrained(path), CONFIG_KEY, None)
    if settings is not None:
        kwargs.setdefault("attn_implementation", PREFIX + settings["mapping"])
    elif attention_impl is not None:
        raise ValueError(
            f"{path} holds a model saved without regattn settings, which attention_impl does not "
            "apply to; load it, then configure(model, mapping, attention_impl=...)"
        )
    model = model_class.from_pretrained(path, **kwargs)
    if settings is None:
        return model
    if attention_impl is None:
        attention_impl = settings.get("attention_impl", DEFAULT_ATTENTION_IMPL)
    configure(model, settings["mapping"], settings["empty"], attention_impl, **settings["params"])
    names = [
        name for name in model.state_dict() if name.endswith(f"{MAPPING_ATTRIBUTE}.alpha_logit")
    ]
    if names:
        tensors = _checkpoint_tensors(path, names)
        missing = sorted(set(names) - set(tensors))
        if missing:
            raise ValueError(f"{path} has no learned alpha for {', '.join(missing)}")
        model.load_state_dict(tensors, strict=False)
    return model
