"""The attention options every regattn model takes, and the one place they are validated.

Each model config inherits `AttentionConfig`, so the options are real dataclass fields: they
reach the model under `fairseq-train` (argparse) and `fairseq-hydra-train` (OmegaConf) alike.
`attention_spec_from_cfg` reads them without fallbacks: a config that lost them is an error,
never a silent softmax.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from regattn import mappings

LEARNED = "learned"
ATTENTION_DEVICES = ("same", "cpu")

# config field -> keyword of the mapping constructor it sets
OPTION_TO_PARAM = {
    "attention_gamma": "gamma",
    "attention_lambda": "lam",
    "attention_p": "p",
    "attention_alpha": "alpha",
}


def cli_name(option: str) -> str:
    """`attention_lambda` -> `--attention-lambda (attention_lambda)`: errors name the option as
    both fairseq-train and fairseq-hydra-train users write it."""
    return f"--{option.replace('_', '-')} ({option})"


@dataclass
class AttentionConfig(FairseqDataclass):
    attention: ChoiceEnum(list(mappings.NAMES)) = field(
        default="softmax",
        metadata={"help": "mapping that normalizes attention scores into probabilities"},
    )
    attention_gamma: Optional[float] = field(
        default=None,
        metadata={
            "help": "temperature gamma of softmax, sparsemax, sq_pnorm_max, fusedmax, "
            "oscarmax (default: the paper's 1.0)"
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
        raise ValueError(
            f"model config has no {cli_name(option)}: it was built without regattn's "
            "AttentionConfig fields, so the attention choice would be lost"
        ) from e


def _read_choice(cfg, option: str, choices) -> str:
    # the parser checks choices; a Namespace or dict built in code has not been checked
    value = str(_read(cfg, option))
    if value not in choices:
        raise ValueError(f"{cli_name(option)}={value!r} is not one of {', '.join(choices)}")
    return value


def _parse_alpha(value, allow_learned: bool, model_name: str):
    text = str(value).strip()
    if text == LEARNED:
        if not allow_learned:
            raise ValueError(
                f"{cli_name('attention_alpha')}={LEARNED} is not supported by "
                f"{model_name}; learned alpha exists only in regattn_transformer"
            )
        return LEARNED
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"{cli_name('attention_alpha')} must be a number or '{LEARNED}', got {text!r}"
        ) from None


def attention_spec_from_cfg(
    cfg, model_name: str, allow_learned_alpha: bool = False
) -> AttentionSpec:
    """Validate the attention options of `cfg` (Namespace, dataclass or DictConfig) for the
    model `model_name`: an option that does not apply to the chosen mapping is an error."""
    name = _read_choice(cfg, "attention", mappings.NAMES)
    takes = mappings.parameters_of(name)
    given = {}
    for option, param in OPTION_TO_PARAM.items():
        value = _read(cfg, option)
        if value is None:
            continue
        if param not in takes:
            usable = ", ".join(cli_name(o) for o, p in OPTION_TO_PARAM.items() if p in takes)
            raise ValueError(
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
    except ValueError as e:
        options = ", ".join(
            f"{cli_name(o)}={_read(cfg, o)}" for o, p in OPTION_TO_PARAM.items() if p in given
        )
        raise ValueError(
            f"invalid attention options for --attention {name} ({options}): {e}"
        ) from e

    params = {
        p: given.get(p, default)
        for p, default in mappings.defaults_of(name).items()
        if not (learned_alpha and p == "alpha")
    }

    device = _read_choice(cfg, "attention_device", ATTENTION_DEVICES)
    return AttentionSpec(name=name, params=params, learned_alpha=learned_alpha, device=device)
