"""SIGMORPHON 2018 inflection: one multilingual character-level model. The encoding of
lemmas, tags and forms as token sequences, and its inverse for the model's predictions, are
defined here once (`encode_source`, `encode_target`, `decode_target`)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.sources import Inputs, line_error, read_text_lines
from regattn_fairseq.experiments.data.text_processing import fairseq_preprocess, head, write_lines

TOOLS = ("fairseq-fixed",)
# Spaces inside inflection lemmas/forms become this symbol so that every character is a token.
SPACE_SYMBOL = "\u2581"


def encode_source(lang: str, lemma: str, tags: str) -> str:
    """The source sequence of one inflection: language tag, lemma characters, feature tags.

    Parameters
    ----------
    lang : str
        the language (its tag ``<lang>`` leads: one model for all languages).
    lemma : str
        the lemma; a space inside it becomes `SPACE_SYMBOL`.
    tags : str
        the UniMorph features, ``;``-separated (each becomes one token ``<TAG>``).

    Returns
    -------
    str
        The tokens joined by spaces, e.g. ``"<toy> w a l k <V> <PST>"``.
    """
    characters = [SPACE_SYMBOL if c == " " else c for c in lemma]
    return " ".join([f"<{lang}>", *characters, *(f"<{tag}>" for tag in tags.split(";"))])


def encode_target(form: str) -> str:
    """The target sequence of an inflected form: its characters (space -> `SPACE_SYMBOL`).

    Parameters
    ----------
    form : str
        the inflected form.

    Returns
    -------
    str
        The characters joined by spaces.
    """
    return " ".join(SPACE_SYMBOL if c == " " else c for c in form)


def decode_target(tokens: str) -> str:
    """The form a target sequence (or a model's prediction) spells: the inverse of
    `encode_target`.

    Parameters
    ----------
    tokens : str
        space-separated characters, as `encode_target` or fairseq-generate writes them.

    Returns
    -------
    str
        The form, with `SPACE_SYMBOL` turned back into spaces.
    """
    return tokens.replace(" ", "").replace(SPACE_SYMBOL, " ")


def _available_languages(inputs: Inputs, setting: str) -> list[str]:
    """The languages with training data for `setting`: from the offline LANGUAGES.tsv table,
    or, in the release's layout (local), those with a ``<lang>-train-<setting>`` file."""
    if inputs.source == "local":
        folder = inputs.local_dir / inputs.local.folder
        suffix = f"-train-{setting}"
        return sorted(p.name[: -len(suffix)] for p in folder.glob(f"*{suffix}") if p.is_file())
    table = [line.split("\t") for line in inputs.lines(inputs.spec.offline.languages_table)]
    header, rows = table[0], table[1:]
    column = header.index(f"train-{setting}")
    return [row[0] for row in rows if row[column].strip() not in ("", "0", "-")]


def _triples(inputs: Inputs, name: str) -> list[list[str]]:
    """The (lemma, form, tags) lines of one SIGMORPHON file (blank lines skipped).

    Raises
    ------
    ReproError
        a line without exactly three tab-separated fields (the message names file and line).
    """
    if inputs.source == "local":
        path = inputs.local_path(f"{inputs.local.folder}/{name}")
    else:
        path = inputs.path(f"{inputs.spec.offline.folder}/{name}")
    triples = []
    for number, line in enumerate(read_text_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise line_error(path, number, f"expected lemma<TAB>form<TAB>tags, got {line!r}")
        triples.append(fields)
    return triples


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build the multilingual inflection data in `root` (see the package docstring).

    Parameters
    ----------
    inputs : Inputs
        reads the SIGMORPHON files (offline, or the release's layout: local).
    opts : DictConfig
        the scale's options (setting, languages, max_train, max_eval: words per language).
    root : Path
        the build folder.

    Returns
    -------
    dict
        The evaluation sets: {"test": {"subset", "refs", "languages", "characters"}}.

    Raises
    ------
    ReproError
        a language without data for the setting, a malformed line, or an input is missing.
    """
    available = _available_languages(inputs, opts.setting)
    languages = available if opts.languages == "all" else list(opts.languages)
    missing = sorted(set(languages) - set(available))
    if missing:
        raise ReproError(f"sigmorphon: no train-{opts.setting} data for {missing}")
    if not languages:
        raise ReproError(f"sigmorphon: no language has train-{opts.setting} data")
    splits = {"train": ([], []), "valid": ([], []), "test": ([], [])}
    test_languages = []
    for lang in languages:
        for split, suffix, limit in (
            ("train", f"train-{opts.setting}", opts.max_train),
            ("valid", "dev", opts.max_eval),
            ("test", "test", opts.max_eval),
        ):
            for lemma, form, tags in head(_triples(inputs, f"{lang}-{suffix}"), limit):
                # The language tag is the first source token (one multilingual model).
                splits[split][0].append(encode_source(lang, lemma, tags))
                splits[split][1].append(encode_target(form))
                if split == "test":
                    test_languages.append(lang)
    for split, (sources, targets) in splits.items():
        write_lines(root / "raw" / f"{split}.src", sources)
        write_lines(root / "raw" / f"{split}.tgt", targets)
    refs = root / "refs" / "test.forms"
    write_lines(refs, [decode_target(t) for t in splits["test"][1]])
    langs = root / "refs" / "test.languages"
    write_lines(langs, test_languages)
    fairseq_preprocess(
        [
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(root / "raw" / "train"),
            "--validpref",
            str(root / "raw" / "valid"),
            "--testpref",
            str(root / "raw" / "test"),
            "--destdir",
            str(root / "bin"),
        ],
        root,
    )
    return {
        "test": {"subset": "test", "refs": [str(refs)], "languages": str(langs), "characters": True}
    }


def load_gold(inputs: Inputs, spec: DictConfig, definition) -> Gold:
    """The gold test forms of every language with train data for the setting, as the
    prepared reference file holds them (through the model's encoding), with each item's
    language.

    Parameters
    ----------
    inputs : Inputs
        the offline data root, through the spec.
    spec : DictConfig
        configs/prepare/<dataset>.yaml.
    definition : TestSet
        the test set (`data.test_sets.TestSet`): its ``evaluation`` and ``setting``.

    Returns
    -------
    Gold
        The references, item by item (`data.test_sets.load_gold` adds the files read).
    """
    table = [line.split("\t") for line in inputs.lines(spec.offline.languages_table)]
    header, rows = table[0], table[1:]
    column = header.index(f"train-{definition.setting}")
    references, languages = [], []
    for row in rows:
        if row[column].strip() in ("", "0", "-"):
            continue
        for line in inputs.lines(f"{spec.offline.folder}/{row[0]}-test"):
            if line.strip():
                form = line.split("\t")[1]
                # The form as the tables' reference file holds it (through the model's encoding).
                references.append([decode_target(encode_target(form))])
                languages.append(row[0])
    return Gold(references, [], languages=languages)
