"""Sentence summarization (Gigaword train, DUC 2004 / Gigaword test), word-level, lowercased
titles; ROUGE references kept as distributed."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.data.gold import Gold
from regattn_fairseq.experiments.data.sources import Inputs, check_parallel, read_text_lines
from regattn_fairseq.experiments.data.text_processing import fairseq_preprocess, head, write_lines

TOOLS = ("fairseq-fixed",)
# raw/<evaluation set><this>: an evaluation set's articles with their digits, when the models
# read them digit-masked (the set's `replace_digits`)
DIGITS_KEPT_SUFFIX = ".article.digits_kept"


def _local_pair(inputs: Inputs, files) -> tuple[list[str], list[str]]:
    """Articles and titles of one split of the local layout (line-aligned files)."""
    paths = (inputs.local_path(files.src), inputs.local_path(files.tgt))
    sides = (read_text_lines(paths[0]), read_text_lines(paths[1]))
    check_parallel(paths, sides)
    return sides


def _evaluation(inputs: Inputs, name: str) -> tuple[list[str], list[list[str]]]:
    """The inputs and references (one list per reference) of evaluation set `name`."""
    source = inputs.split_source(name)
    if source == "online":
        columns = inputs.hub_columns(name)
        return columns["article"], [columns["title"]]
    if source == "local":
        files = inputs.local.evaluations[name]
        src = inputs.local_path(files.src)
        sources = read_text_lines(src)
        refs = []
        for ref_file in files.refs:
            path = inputs.local_path(ref_file)
            refs.append(read_text_lines(path))
            check_parallel((src, path), (sources, refs[-1]))
        return sources, refs
    files = inputs.spec.evaluations[name]
    return inputs.lines(files.src), [inputs.lines(ref_file) for ref_file in files.refs]


def _training_pool(inputs: Inputs, n_valid: int) -> tuple[tuple[list, list], tuple[list, list]]:
    """The training pairs and the validation pairs (articles, titles) before the scale's caps:
    the local layout's own validation split (its first n_valid pairs), else n_valid pairs held
    out from the end of the training pool.

    Raises
    ------
    ReproError
        too few training pairs for the held-out validation set.
    """
    spec = inputs.spec
    source = inputs.split_source("train")
    if source == "local":
        # the distribution has its own validation split: its first n_valid pairs
        articles, titles = _local_pair(inputs, inputs.local.train)
        valid = tuple(head(side, n_valid) for side in _local_pair(inputs, inputs.local.valid))
        return (articles, titles), valid
    if source == "online":
        columns = inputs.hub_columns("train")
        articles, titles = columns["article"], columns["title"]
    else:
        articles, titles, seen = [], [], set()
        # The offline Gigaword samples overlap partly; keep the first copy of each pair.
        for files in spec.offline.train:
            for article, title in zip(
                inputs.lines(files.src), inputs.lines(files.tgt), strict=False
            ):
                if (article, title) not in seen:
                    seen.add((article, title))
                    articles.append(article)
                    titles.append(title)
    # The validation pairs are held out from the end of the training pool.
    if len(articles) <= n_valid:
        raise ReproError(
            f"{spec.name}: only {len(articles)} training pairs, need more than n_valid={n_valid}"
        )
    return (articles[:-n_valid], titles[:-n_valid]), (articles[-n_valid:], titles[-n_valid:])


def _write_evaluation(
    inputs: Inputs, name: str, max_eval, root: Path
) -> tuple[tuple[list, list], dict]:
    """Write evaluation set `name`'s references (refs/<name>.ref<i>) and, for a digit-masked
    set, its articles as distributed; return its (articles, first reference) for fairseq and
    its entry of the evaluation sets (less its subset)."""
    options = inputs.spec.evaluations[name]
    sources, references = _evaluation(inputs, name)
    sources = head(sources, max_eval)
    digits_kept = {}
    if options.get("replace_digits"):
        # the articles as distributed, for the lead baseline as DUC scores it (its
        # references keep their digits; `rows.baselines.lead_digits_kept_outputs`)
        kept = root / "raw" / f"{name}{DIGITS_KEPT_SUFFIX}"
        write_lines(kept, sources)
        digits_kept = {"digits_kept_articles": kept.name}
        # Rush et al. replace digits by '#' in the training data; do the same to DUC inputs.
        sources = ["".join("#" if c.isdigit() else c for c in line) for line in sources]
    refs = []
    for ref_index, lines in enumerate(references):
        ref_path = root / "refs" / f"{name}.ref{ref_index}"
        write_lines(ref_path, head(lines, max_eval))
        refs.append(str(ref_path))
    # fairseq-generate needs a target side; the first reference serves (scoring uses refs/).
    pair = (sources, head(references[0], max_eval))
    return pair, {"refs": refs, "truncate_bytes": options.get("truncate_bytes"), **digits_kept}


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build a summarization dataset in `root` (see the package docstring).

    Parameters
    ----------
    inputs : Inputs
        reads the spec's files (offline), the hub's splits (online) or the sent-summary
        layout (local).
    opts : DictConfig
        the scale's options (n_valid, max_train, max_eval, vocab_size).
    root : Path
        the build folder.

    Returns
    -------
    dict
        The evaluation sets: name -> {"subset", "refs", "truncate_bytes"}.

    Raises
    ------
    ReproError
        too few training pairs for the held-out validation set, a malformed input or an
        input is missing.
    """
    (articles, titles), valid = _training_pool(inputs, int(opts.n_valid))
    splits = {
        "train": (head(articles, opts.max_train), head(titles, opts.max_train)),
        "valid": (head(valid[0], opts.max_eval), head(valid[1], opts.max_eval)),
    }
    evaluations = {}
    test_prefixes = []
    for index, name in enumerate(inputs.evaluation_names()):
        splits[name], entry = _write_evaluation(inputs, name, opts.max_eval, root)
        subset = "test" if index == 0 else f"test{index}"
        test_prefixes.append(str(root / "raw" / name))
        evaluations[name] = {"subset": subset, **entry}
    for split, (sources, targets) in splits.items():
        write_lines(root / "raw" / f"{split}.article", sources)
        write_lines(root / "raw" / f"{split}.title", [t.lower() for t in targets])
    fairseq_preprocess(
        [
            "--source-lang",
            "article",
            "--target-lang",
            "title",
            "--nwordssrc",
            str(opts.vocab_size),
            "--nwordstgt",
            str(opts.vocab_size),
            "--trainpref",
            str(root / "raw" / "train"),
            "--validpref",
            str(root / "raw" / "valid"),
            "--testpref",
            ",".join(test_prefixes),
            "--destdir",
            str(root / "bin"),
        ],
        root,
    )
    return evaluations


def load_gold(inputs: Inputs, spec: DictConfig, definition) -> Gold:
    """A test set's references as distributed (ROUGE lowercases), every reference of an item,
    with the set's ROUGE byte limit.

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
    files = spec.evaluations[definition.evaluation]
    columns = [inputs.lines(path) for path in files.refs]
    return Gold(
        [list(refs) for refs in zip(*columns, strict=True)],
        [],
        truncate_bytes=files.get("truncate_bytes"),
    )
