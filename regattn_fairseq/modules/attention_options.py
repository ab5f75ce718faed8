"""The attention options every regattn model takes, and the one place they are validated:
the discrete mapping (`AttentionConfig`, every model) and continuous attention
(`ContinuousAttentionConfig`, the LSTM seq2seq and SNLI models).

Each model config inherits `AttentionConfig`, so the options are real dataclass fields: they
reach the model under `fairseq-train` (argparse) and `fairseq-hydra-train` (OmegaConf) alike.
`attention_spec_from_cfg` reads them without fallbacks: a config that lost them is an error,
never a silent softmax.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from regattn import continuous, mappings
from regattn.attention import MODEL_IMPLS

LEARNED = mappings.LEARNED
ATTENTION_DEVICES = ("same", "cpu")

# config field -> keyword of the mapping constructor it sets (the mappings' one table)
OPTION_TO_PARAM = mappings.OPTION_TO_PARAM


class AttentionOptionError(ValueError):
    """An invalid attention option. Under `fairseq-train` it ends the program as argparse's
    own errors do, one line and exit status 2 (`regattn_fairseq.cli_errors`), although the
    options can only be checked together, when the model is built."""


def cli_name(option: str) -> str:
    """`attention_lambda` -> `--attention-lambda (attention_lambda)`: errors name the option as
    both fairseq-train and fairseq-hydra-train users write it."""
    return f"--{option.replace('_', '-')} ({option})"


@dataclass
class AttentionConfig(FairseqDataclass):
    attention: ChoiceEnum(list(mappings.NAMES + mappings.CONTROL_NAMES)) = field(
        default=mappings.REFERENCE_MAPPING,
        metadata={"help": "mapping that normalizes attention scores into probabilities"},
    )
    attention_gamma: Optional[float] = field(
        default=None,
        metadata={
            "help": "temperature gamma of every mapping: argmax p.s - gamma Omega(p) "
            "(entmax: entmax(s / gamma); default: the papers' 1.0)"
        },
    )
    attention_lambda: Optional[float] = field(
        default=None,
        metadata={
            "help": "penalty weight lambda of fusedmax (default 0.1) or oscarmax "
            "(default 0.01), as in the paper"
        },
    )
    attention_p: Optional[float] = field(
        default=None,
        metadata={"help": "p in (1, 2] of sq_pnorm_max (default: the paper's 1.5)"},
    )
    attention_alpha: Optional[str] = field(
        default=None,
        metadata={
            "help": "alpha >= 1 of entmax (default 1.5), or 'learned': one alpha = "
            "1.01 + 0.99 * sigmoid(z) in [1.01, 2] per head and layer, starting "
            "at 1.5 (regattn_transformer only)"
        },
    )
    attention_device: ChoiceEnum(list(ATTENTION_DEVICES)) = field(
        default="same",
        metadata={
            "help": "'cpu' computes the mapping on the CPU and copies the result back "
            "(the paper's offload of sort-based mappings in GPU runs)"
        },
    )


@dataclass
class AttentionImplConfig(FairseqDataclass):
    """How the Transformer's multi-head attention is computed (regattn_transformer only: the
    other models attend one query at a time). Not a setting of the model's function: both
    paths compute the same attention, so configs leave it unset and row keys never see it.
    """

    attention_impl: ChoiceEnum(list(MODEL_IMPLS)) = field(
        default="auto",
        metadata={
            "help": "'fused': regattn.attention's flash-style kernels (sparsemax, alpha-entmax "
            "with alpha in (1, 2], fixed or learned; no scores matrix in memory), an error "
            "where they cannot run; 'rowwise': the scores matrix, the mapping, then P V; "
            "'auto': fused on CUDA where it can run (not with attention dropout in training, "
            "attention weights asked for, incremental decoding), rowwise otherwise"
        },
    )


def attention_impl_from_cfg(cfg) -> str:
    """The validated --attention-impl of `cfg` (no fallback: a config without it is an
    error, as for the other attention options)."""
    return _read_choice(cfg, "attention_impl", MODEL_IMPLS)


@dataclass(frozen=True)
class AttentionSpec:
    """A validated attention choice: the mapping, its resolved parameters (explicit values
    and the paper defaults), whether alpha is learned, and where the mapping runs."""

    name: str
    params: Dict[str, float]
    learned_alpha: bool
    device: str

    def describe(self) -> dict:
        params = dict(self.params)
        if self.learned_alpha:
            params["alpha"] = LEARNED
        return {"name": self.name, "params": params, "device": self.device}


def _read(cfg, option: str):
    try:
        return cfg[option] if isinstance(cfg, dict) else getattr(cfg, option)
    except (AttributeError, KeyError) as e:
        raise AttentionOptionError(
            f"model config has no {cli_name(option)}: it was built without regattn's "
            "AttentionConfig fields, so the attention choice would be lost"
        ) from e


def _read_choice(cfg, option: str, choices) -> str:
    # the parser checks choices; a Namespace or dict built in code has not been checked
    value = str(_read(cfg, option))
    if value not in choices:
        raise AttentionOptionError(
            f"{cli_name(option)}={value!r} is not one of {', '.join(choices)}"
        )
    return value


def _parse_alpha(value, allow_learned: bool, model_name: str):
    text = str(value).strip()
    if text == LEARNED:
        if not allow_learned:
            raise AttentionOptionError(
                f"{cli_name('attention_alpha')}={LEARNED} is not supported by "
                f"{model_name}; learned alpha exists only in regattn_transformer"
            )
        return LEARNED
    try:
        return float(text)
    except ValueError:
        raise AttentionOptionError(
            f"{cli_name('attention_alpha')} must be a number or '{LEARNED}', got {text!r}"
        ) from None


def attention_spec_from_cfg(
    cfg, model_name: str, allow_learned_alpha: bool = False
) -> AttentionSpec:
    """Validate the attention options of `cfg` (Namespace, dataclass or DictConfig) for the
    model `model_name`: an option that does not apply to the chosen mapping is an error."""
    name = _read_choice(cfg, "attention", mappings.NAMES + mappings.CONTROL_NAMES)
    takes = mappings.parameters_of(name)
    given = {}
    for option, param in OPTION_TO_PARAM.items():
        value = _read(cfg, option)
        if value is None:
            continue
        if param not in takes:
            usable = ", ".join(cli_name(o) for o, p in OPTION_TO_PARAM.items() if p in takes)
            raise AttentionOptionError(
                f"{cli_name(option)} does not apply to --attention {name} "
                f"(it takes: {usable or 'no options'})"
            )
        if param == "alpha":
            value = _parse_alpha(value, allow_learned_alpha, model_name)
        else:
            value = float(value)
        given[param] = value

    learned_alpha = given.get("alpha") == LEARNED
    if learned_alpha:
        del given["alpha"]
    try:
        mappings.build(name, **given)  # the mapping checks its own parameter ranges
    except ValueError as e:  # the mapping's own range checks
        options = ", ".join(
            f"{cli_name(o)}={_read(cfg, o)}" for o, p in OPTION_TO_PARAM.items() if p in given
        )
        raise AttentionOptionError(
            f"invalid attention options for --attention {name} ({options}): {e}"
        ) from e

    params = {
        p: given.get(p, default)
        for p, default in mappings.defaults_of(name).items()
        if not (learned_alpha and p == "alpha")
    }

    device = _read_choice(cfg, "attention_device", ATTENTION_DEVICES)
    return AttentionSpec(name=name, params=params, learned_alpha=learned_alpha, device=device)


# -- continuous attention (Martins et al. 2020; regattn.continuous) -------------------------

ATTENTION_DOMAINS = ("discrete", "continuous")
CONTINUOUS_COMBINES = ("none", "sum")
# where the density's mu and sigma^2 come from
CONTINUOUS_PARAMS = ("attention_moments", "learned_head")
# the value each continuous option takes when --attention-domain continuous leaves it unset
CONTINUOUS_DEFAULTS = {
    "continuous_density": continuous.REFERENCE_DENSITY,
    "continuous_basis": 64,
    "continuous_ridge": 0.01,
    "continuous_combine": "none",
    "continuous_params": "attention_moments",
}


@dataclass
class ContinuousAttentionConfig(FairseqDataclass):
    attention_domain: ChoiceEnum(list(ATTENTION_DOMAINS)) = field(
        default="discrete",
        metadata={
            "help": "'continuous': attend with a density over the source positions, placed at "
            "t = (l - 1/2) / L in [0, 1] (Martins et al. 2020), instead of a distribution over "
            "the positions"
        },
    )
    continuous_density: Optional[ChoiceEnum(list(continuous.DENSITIES))] = field(
        default=None,
        metadata={
            "help": "the attention density: gaussian (continuous softmax, the default) or "
            "truncated_parabola (continuous sparsemax, compact support)"
        },
    )
    continuous_basis: Optional[int] = field(
        default=None,
        metadata={
            "help": "number N >= 1 of Gaussian basis functions of the value function "
            f"(default {CONTINUOUS_DEFAULTS['continuous_basis']})"
        },
    )
    continuous_ridge: Optional[float] = field(
        default=None,
        metadata={
            "help": "ridge penalty >= 0 of the value function's regression onto the basis "
            f"(default {CONTINUOUS_DEFAULTS['continuous_ridge']}, the authors')"
        },
    )
    continuous_combine: Optional[ChoiceEnum(list(CONTINUOUS_COMBINES))] = field(
        default=None,
        metadata={
            "help": "'sum' adds the discrete attention's context to the continuous one, as "
            "the authors did for NMT (default none)"
        },
    )
    continuous_params: Optional[ChoiceEnum(list(CONTINUOUS_PARAMS))] = field(
        default=None,
        metadata={
            "help": "where mu and sigma^2 come from: attention_moments (default; the mean and "
            "variance of t under the discrete attention of --attention, the authors' recipe "
            "with softmax) or learned_head (a linear layer on the query and the mean source "
            "state)"
        },
    )


@dataclass(frozen=True)
class ContinuousSpec:
    """A validated continuous-attention choice (every option resolved to its value)."""

    density: str
    num_basis: int
    ridge: float
    combine: str
    params: str

    def describe(self) -> dict:
        return {
            "density": self.density,
            "num_basis": self.num_basis,
            "ridge": self.ridge,
            "combine": self.combine,
            "params": self.params,
        }


def _given_discrete_options(cfg):
    given = [o for o in OPTION_TO_PARAM if _read(cfg, o) is not None]
    if str(_read(cfg, "attention")) != mappings.REFERENCE_MAPPING:
        given.insert(0, "attention")
    if str(_read(cfg, "attention_device")) != "same":
        given.append("attention_device")
    return given


def continuous_spec_from_cfg(cfg) -> Optional[ContinuousSpec]:
    """Validate the continuous-attention options of `cfg`: None for --attention-domain
    discrete (where any continuous option is an error), else the resolved ContinuousSpec.
    An option that does not apply is an error naming it."""
    domain = _read_choice(cfg, "attention_domain", ATTENTION_DOMAINS)
    if domain == "discrete":
        for option in CONTINUOUS_DEFAULTS:
            if _read(cfg, option) is not None:
                raise AttentionOptionError(
                    f"{cli_name(option)} applies only with --attention-domain continuous"
                )
        return None

    def value(option):
        given = _read(cfg, option)
        return CONTINUOUS_DEFAULTS[option] if given is None else given

    density = str(value("continuous_density"))
    if density not in continuous.DENSITIES:
        raise AttentionOptionError(
            f"{cli_name('continuous_density')}={density!r} is not one of "
            f"{', '.join(continuous.DENSITIES)}"
        )
    combine = str(value("continuous_combine"))
    if combine not in CONTINUOUS_COMBINES:
        raise AttentionOptionError(
            f"{cli_name('continuous_combine')}={combine!r} is not one of "
            f"{', '.join(CONTINUOUS_COMBINES)}"
        )
    params = str(value("continuous_params"))
    if params not in CONTINUOUS_PARAMS:
        raise AttentionOptionError(
            f"{cli_name('continuous_params')}={params!r} is not one of "
            f"{', '.join(CONTINUOUS_PARAMS)}"
        )
    num_basis, ridge = value("continuous_basis"), value("continuous_ridge")
    try:
        continuous.ContinuousAttention(num_basis, density, ridge=float(ridge))
    except ValueError as e:
        raise AttentionOptionError(
            f"invalid continuous attention options ({cli_name('continuous_basis')}={num_basis}, "
            f"{cli_name('continuous_ridge')}={ridge}): {e}"
        ) from e
    if params == "learned_head":
        if combine == "sum":
            raise AttentionOptionError(
                f"{cli_name('continuous_combine')}=sum adds the discrete attention's context: "
                f"it needs {cli_name('continuous_params')}=attention_moments (with "
                "learned_head no discrete attention is computed)"
            )
        unused = _given_discrete_options(cfg)
        if unused:
            raise AttentionOptionError(
                f"{cli_name(unused[0])} does not apply with "
                f"{cli_name('continuous_params')}=learned_head: no discrete attention is "
                "computed"
            )
    return ContinuousSpec(
        density=density,
        num_basis=int(num_basis),
        ridge=float(ridge),
        combine=combine,
        params=params,
    )
