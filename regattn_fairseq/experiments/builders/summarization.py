"""Sentence summarization (Gigaword train, DUC 2004 / Gigaword test), word-level, lowercased
titles; ROUGE references kept as distributed."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from ..common import ReproError
from ..data_sources import Inputs
from ..text_processing import fairseq_preprocess, head, write_lines

TOOLS = ("fairseq-fixed",)


def build(inputs: Inputs, opts: DictConfig, root: Path) -> dict:
    """Build a summarization dataset in `root` (see the package docstring).

    Parameters
    ----------
    inputs : Inputs
        reads the spec's files (offline) or the train split (online).
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
        too few training pairs for the held-out validation set, or an input is
        missing.
    """
    spec = inputs.spec
    if inputs.split_source("train") == "online":
        rows = inputs.online_rows("train")
        articles, titles = [r["document"] for r in rows], [r["summary"] for r in rows]
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
    n_valid = int(opts.n_valid)
    if len(articles) <= n_valid:
        raise ReproError(
            f"{spec.name}: only {len(articles)} training pairs, need more than n_valid={n_valid}"
        )
    splits = {
        "train": (
            head(articles[:-n_valid], opts.max_train),
            head(titles[:-n_valid], opts.max_train),
        ),
        "valid": (head(articles[-n_valid:], opts.max_eval), head(titles[-n_valid:], opts.max_eval)),
    }
    evaluations = {}
    test_prefixes = []
    for index, (name, files) in enumerate(spec.evaluations.items()):
        sources = head(inputs.lines(files.src), opts.max_eval)
        if files.get("replace_digits"):
            # Rush et al. replace digits by '#' in the training data; do the same to DUC inputs.
            sources = ["".join("#" if c.isdigit() else c for c in line) for line in sources]
        refs = []
        for ref_index, ref_file in enumerate(files.refs):
            ref_path = root / "refs" / f"{name}.ref{ref_index}"
            write_lines(ref_path, head(inputs.lines(ref_file), opts.max_eval))
            refs.append(str(ref_path))
        # fairseq-generate needs a target side; the first reference serves (scoring uses refs/).
        splits[name] = (sources, head(inputs.lines(files.refs[0]), opts.max_eval))
        subset = "test" if index == 0 else f"test{index}"
        test_prefixes.append(str(root / "raw" / name))
        evaluations[name] = {
            "subset": subset,
            "refs": refs,
            "truncate_bytes": files.get("truncate_bytes"),
        }
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
