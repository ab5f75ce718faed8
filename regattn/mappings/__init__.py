"""Regularized attention mappings Pi_Omega(x) = argmax_{y in simplex} y.x - gamma Omega(y).

Pure torch (plus compiled row kernels); importing this package never imports fairseq.

    from regattn import mappings
    mappings.fusedmax(scores, dim=-1, mask=padding_is_false, gamma=1.0, lam=0.1)
    attn = mappings.build("oscarmax", lam=0.01)   # nn.Module: attn(scores, dim=-1, mask=None)

`normmax` (Omega = ||y||_alpha) and `budget_sparsemax` (sparsemax over the capped simplex)
are mappings too, in pure torch, outside NAMES (the fairseq plugin and `build` do not offer
them). A -inf score is a masked position in every mapping (combined with `mask=` by AND);
+inf and NaN scores are errors.

Every mapping takes `empty="error"` (a row with no unmasked position is a ValueError) or
`empty="zero"` (such a row gets zeros and zero gradient), and computes on each row minus its
max over the unmasked positions (it is invariant to that shift), so that its accuracy is set
by the spread of the scores, not by their magnitude.

Backends (see _kernels.py): CUDA tensors go through Triton kernels, CPU tensors through the
compiled C++ kernels, anything else (or a missing backend, with one warning) through pure
torch; `with mappings.backend("triton" | "cpu" | "reference"):` forces one, and
`mappings.sync_checks()` makes the Triton path's validation errors synchronous ValueErrors.

One declaration per mapping (`Declaration`, registered with `declare` in DECLARATIONS): its
name, module (whose constructor gives its parameters and defaults), regularizer Omega,
attention configs, the α-entmax it is and the configs it offers as an output layer. NAMES,
the fairseq plugin's --attention and --output-mapping choices, the model options
(OPTION_TO_PARAM), the fused attention's α, the Hugging Face backends and the suite's γ
mappings derive from it. REFERENCE_MAPPING (softmax) is the default wherever a mapping is
optional and the baseline the others are compared with.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from torch import nn

from ._kernels import BACKENDS, backend, torch_reference
from ._sync import sync_checks
from .budget import BudgetSparsemax, budget_sparsemax
from .entmax import Entmax, entmax
from .fused import Fusedmax, fusedmax, prox_tv1d
from .normmax import Normmax, normmax
from .oscar import Oscarmax, oscarmax, prox_pairwise_max
from .pnorm import SqPnormMax, sq_pnorm_max
from .simplex import Softmax, Sparsemax, Uniform, softmax, sparsemax, uniform


@dataclass(frozen=True)
class Parameter:
    """A regularization parameter the mappings share: its keyword in their constructors and
    functions, the model option that sets it (`attention_<...>` of configs/attention/base.yaml
    and the fairseq plugin's AttentionConfig) and the values it takes (each mapping checks its
    own, in its constructor).
    """

    name: str
    option: str
    values: str


# Every parameter a declared mapping may take; a mapping with a new one needs it here, in
# configs/attention/base.yaml and as an AttentionConfig field.
PARAMETERS = {
    p.name: p
    for p in (
        Parameter("gamma", "attention_gamma", "> 0, the temperature γ"),
        Parameter("lam", "attention_lambda", ">= 0"),
        Parameter("p", "attention_p", "in (1, 2]"),
        Parameter("alpha", "attention_alpha", ">= 1, or 'learned' (one per head and layer)"),
    )
}
# model option -> the parameter it sets: the one table the plugin, the suite's labels and row
# keys, and the Hugging Face fine-tuning read
OPTION_TO_PARAM = {p.option: p.name for p in PARAMETERS.values()}
LEARNED = "learned"


@dataclass(frozen=True)
class Declaration:
    """A mapping (or control): everything the library, the fairseq plugin, the Hugging Face
    backends and the suite know of it.

    Attributes
    ----------
    name : str
        its name (`build(name)`, `--attention name`, the backend regattn_<name>).
    module : type
        its nn.Module; its constructor's keyword arguments (besides `empty`) are its
        parameters, with their defaults (`defaults_of`), each one of PARAMETERS.
    omega : str or None
        the name of its regularizer Omega in `smoothed_max.REGULARIZERS`; None for a control,
        which is no regularized max (smoothed_max refuses it).
    configs : dict
        its attention configs (configs/attention/<config>.yaml, the suite's "mappings") and
        the parameters each one fixes; by default one config named after the mapping. A config
        that fixes only numbers is also a Hugging Face backend (regattn_<config>).
    control : bool
        a control (kept out of NAMES): uniform, the attention-free 1/n.
    ties : str or None
        the equal nonzero weights its regularizer promotes, which figures mark: ``"runs"``
        (adjacent positions, fused lasso), ``"clusters"`` (positions anywhere in the row,
        OSCAR); None for none. Its kernels are then the grouped ones (they return the groups).
    entmax_alpha : float or None
        the α of the α-entmax it is, a number (softmax 1, sparsemax 2) for a mapping without
        a parameter `alpha` (a mapping with one, entmax, is the α-entmax of that α); None for
        one that is no α-entmax. `regattn.attention.fused_alpha` reads it.
    outputs : tuple of str
        its configs offered as the decoder's output mapping (the plugin's
        `--output-mapping`, trained with its Fenchel-Young loss); none by default.
    """

    name: str
    module: type
    omega: str | None
    configs: dict = field(default_factory=dict)
    control: bool = False
    ties: str | None = None
    entmax_alpha: float | None = None
    outputs: tuple = ()

    def __post_init__(self):
        """By default, one config named after the mapping."""
        if not self.configs:
            object.__setattr__(self, "configs", {self.name: {}})

    @property
    def defaults(self) -> dict:
        """Its parameters with their defaults, read off the module's constructor."""
        return {
            k: p.default
            for k, p in inspect.signature(self.module).parameters.items()
            if k != "empty"
        }

    @property
    def takes_gamma(self) -> bool:
        """Whether it has a temperature γ (the suite's γ selection tunes it)."""
        return "gamma" in self.defaults


# what a declaration's `ties` may say
TIES = (None, "runs", "clusters")
DECLARATIONS: dict[str, Declaration] = {}
MODULES: dict[str, type] = {}
CONTROLS: dict[str, type] = {}
NAMES: tuple = ()
CONTROL_NAMES: tuple = ()


def declare(declaration: Declaration) -> None:
    """Register a mapping or control: `build`, NAMES (or CONTROL_NAMES) and everything derived
    from the declarations (the plugin's --attention choices, the Hugging Face backends, the
    suite's γ mappings) know it. Modules that derive constants read the declarations when they
    are imported, so a mapping is declared here, in this package, before they are.

    Raises
    ------
    ValueError
        on a name declared twice, a parameter that is not one of PARAMETERS, a config
        fixing a parameter the mapping does not take, `ties` not one of TIES, an
        `entmax_alpha` beside a parameter `alpha`, or an output that is none of its configs.
    """
    global NAMES, CONTROL_NAMES
    name = declaration.name
    if name in DECLARATIONS:
        raise ValueError(f"attention mapping {name!r} is declared twice")
    unknown = sorted(set(declaration.defaults) - set(PARAMETERS))
    if unknown:
        raise ValueError(
            f"attention mapping {name!r} takes {unknown}, none of the declared PARAMETERS "
            f"({', '.join(PARAMETERS)}); declare a new parameter there first"
        )
    for config, fixed in declaration.configs.items():
        if set(fixed) - set(declaration.defaults):
            raise ValueError(
                f"config {config!r} of {name!r} fixes {sorted(fixed)}, but {name!r} takes "
                f"{sorted(declaration.defaults)}"
            )
    if declaration.ties not in TIES:
        raise ValueError(f"{name!r} declares ties={declaration.ties!r}, none of {TIES}")
    if declaration.entmax_alpha is not None and "alpha" in declaration.defaults:
        raise ValueError(f"{name!r} takes alpha, so it declares no fixed entmax_alpha")
    if set(declaration.outputs) - set(declaration.configs):
        raise ValueError(
            f"{name!r} offers outputs {list(declaration.outputs)}, but its configs are "
            f"{list(declaration.configs)}"
        )
    DECLARATIONS[name] = declaration
    (CONTROLS if declaration.control else MODULES)[name] = declaration.module
    NAMES, CONTROL_NAMES = tuple(MODULES), tuple(CONTROLS)


for _declaration in (
    Declaration("softmax", Softmax, omega="shannon", entmax_alpha=1.0, outputs=("softmax",)),
    Declaration(
        "sparsemax", Sparsemax, omega="squared_l2", entmax_alpha=2.0, outputs=("sparsemax",)
    ),
    Declaration("sq_pnorm_max", SqPnormMax, omega="squared_p_norm"),
    Declaration("fusedmax", Fusedmax, omega="fused_lasso", ties="runs"),
    Declaration("oscarmax", Oscarmax, omega="oscar", ties="clusters"),
    Declaration(
        "entmax",
        Entmax,
        omega="tsallis",
        configs={"entmax15": {"alpha": 1.5}, "entmax_learned": {"alpha": LEARNED}},
        outputs=("entmax15",),
    ),
    # uniform is the attention-free control of the tables' claims (1/n, whatever the scores):
    # built and checked like the mappings, kept out of NAMES (what the library's mapping tests
    # and figures iterate over)
    Declaration("uniform", Uniform, omega=None, control=True),
):
    declare(_declaration)

# softmax: the default wherever a mapping is optional (the plugin's --attention and
# --output-mapping, the Fenchel-Young loss) and the baseline the other mappings are compared
# with (the tables' p-values and claims, the benchmarks' ratios)
REFERENCE_MAPPING = "softmax"


def declaration(name: str) -> Declaration:
    """The declaration of a mapping or control (ValueError on an unknown name)."""
    check_name(name)
    return DECLARATIONS[name]


def _fixes_numbers(fixed: dict) -> bool:
    return all(isinstance(v, (int, float)) for v in fixed.values())


def attention_configs() -> dict[str, tuple[str, dict]]:
    """The attention configs, config name -> (mapping, the parameters it fixes)
    (configs/attention/*.yaml), of every declared mapping and control.
    """
    return {
        config: (d.name, dict(fixed))
        for d in DECLARATIONS.values()
        for config, fixed in d.configs.items()
    }


def gamma_configs() -> tuple[str, ...]:
    """The attention configs that take a temperature γ: those of a mapping with a γ that fix
    no learned parameter (a learned α's entmax trains at its config's values).
    """
    return tuple(
        config
        for d in DECLARATIONS.values()
        if d.takes_gamma
        for config, fixed in d.configs.items()
        if _fixes_numbers(fixed)
    )


def output_mappings() -> dict[str, tuple[str, dict]]:
    """The decoder's output mappings (the fairseq plugin's --output-mapping choices): config
    -> (mapping, the parameters it fixes), each config a mapping offers (its `outputs`).
    """
    return {
        config: (d.name, dict(d.configs[config]))
        for d in DECLARATIONS.values()
        for config in d.outputs
    }


def transformers_backends() -> dict[str, tuple[str, dict]]:
    """The Hugging Face backends (regattn.integrations.transformers.BACKENDS): backend ->
    (mapping, the parameters it fixes): every mapping and control under its
    name (any parameters configurable), and each config that fixes numbers (entmax15).
    """
    table = {}
    for d in DECLARATIONS.values():
        for config, fixed in d.configs.items():
            if config != d.name and _fixes_numbers(fixed):
                table[config] = (d.name, dict(fixed))
        table[d.name] = (d.name, {})
    return table


def defaults_of(name: str) -> dict:
    """The regularization parameters of a mapping, with their (paper) defaults.

    Parameters
    ----------
    name : str
        one of NAMES or CONTROL_NAMES.

    Returns
    -------
    dict
        A dict such as {"gamma": 1.0, "lam": 0.1} for fusedmax (read off the module's
        constructor; `empty`, which is not a parameter of the mapping, is left out).

    Raises
    ------
    ValueError
        if `name` is not one of NAMES.
    """
    return declaration(name).defaults


def parameters_of(name: str) -> tuple:
    """The names of the regularization parameters of a mapping.

    Parameters
    ----------
    name : str
        one of NAMES.

    Returns
    -------
    tuple
        A tuple such as ("gamma", "lam") for fusedmax.

    Raises
    ------
    ValueError
        if `name` is not one of NAMES.
    """
    return tuple(defaults_of(name))


def check_name(name: str) -> None:
    """Raises ValueError unless `name` is one of NAMES or CONTROL_NAMES."""
    if name not in DECLARATIONS:
        raise ValueError(
            f"unknown attention mapping {name!r}; choose one of {', '.join(NAMES)} (or the "
            f"control {', '.join(CONTROL_NAMES)})"
        )


def build(name: str, empty: str = "error", **params) -> nn.Module:
    """A mapping as an nn.Module, called as module(scores, dim=-1, mask=None).

    Parameters
    ----------
    name : str
        one of NAMES.
    empty : str
        what a row with no unmasked position gets: "error" (a ValueError) or "zero"
        (all zeros, zero gradient).
    **params
        the mapping's parameters (see parameters_of); missing ones take their
        defaults (defaults_of).

    Returns
    -------
    nn.Module
        The module (Softmax, Sparsemax, SqPnormMax, Fusedmax, Oscarmax, Entmax, or the
        control Uniform).

    Raises
    ------
    ValueError
        on an unknown name, a parameter the mapping does not take (an error, not
        ignored), a parameter out of range, or an unknown `empty`.
    """
    allowed = parameters_of(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"attention mapping {name!r} takes no parameter {', '.join(map(repr, unknown))}; "
            f"its parameters are: {', '.join(allowed) or 'none'}"
        )
    return declaration(name).module(**params, empty=empty)


__all__ = [
    "NAMES",
    "CONTROL_NAMES",
    "DECLARATIONS",
    "Declaration",
    "declare",
    "declaration",
    "PARAMETERS",
    "Parameter",
    "OPTION_TO_PARAM",
    "REFERENCE_MAPPING",
    "attention_configs",
    "gamma_configs",
    "output_mappings",
    "transformers_backends",
    "build",
    "defaults_of",
    "parameters_of",
    "softmax",
    "sparsemax",
    "sq_pnorm_max",
    "fusedmax",
    "oscarmax",
    "entmax",
    "uniform",
    "normmax",
    "budget_sparsemax",
    "prox_tv1d",
    "prox_pairwise_max",
    "torch_reference",
    "backend",
    "BACKENDS",
    "sync_checks",
    "Softmax",
    "Sparsemax",
    "SqPnormMax",
    "Fusedmax",
    "Oscarmax",
    "Entmax",
    "Uniform",
    "Normmax",
    "BudgetSparsemax",
]
