"""Data preparation: read a dataset (offline from DATA_DIR or online through `datasets`),
tokenize / segment it as the field does, binarize it with fairseq-preprocess, and cache the
result under <work_dir>/data/<dataset>/<scale>/ behind a stamp (hash of inputs + options).

What is read and how is declared in configs/prepare/<dataset>.yaml; this module holds one
builder per kind of data (translation, summarization, snli, inflection)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .common import (
    REPO_ROOT,
    ReproError,
    check_scale,
    load_config,
    require_file,
    resolve_data_dir,
    run_logged,
    sha256_file,
    venv_tool,
    write_json,
)

SNLI_LABELS = ("entailment", "neutral", "contradiction")
# SNLI train subset from the `cat` repository: label ids by inspection (see its SOURCE.txt).
CAT_SNLI_LABELS = {"1": "neutral", "2": "contradiction", "3": "entailment"}
# Spaces inside inflection lemmas/forms become this symbol so that every character is a token.
SPACE_SYMBOL = "\u2581"


@dataclass
class PreparedData:
    """A binarized dataset ready for fairseq plus what scoring needs (references, languages)."""

    root: Path
    manifest: dict

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def evaluation(self, name: str) -> dict:
        try:
            return self.manifest["evaluations"][name]
        except KeyError:
            raise ReproError(
                f"dataset {self.manifest['dataset']} has no evaluation set {name!r}; "
                f"it has {sorted(self.manifest['evaluations'])}"
            ) from None


class _Inputs:
    """Reads input files for a builder and remembers them for the cache stamp."""

    def __init__(self, data_dir: Path, source: str, spec: DictConfig):
        self.data_dir = data_dir
        self.source = source
        self.spec = spec
        self.files: dict[str, str] = {}

    def path(self, relative: str) -> Path:
        path = require_file(self.data_dir / relative)
        self.files[relative] = sha256_file(path)
        return path

    def lines(self, relative: str) -> list[str]:
        path = self.path(relative)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle]

    def online_rows(self, split: str) -> list[dict]:
        """Rows of one split from the `datasets` library (the only place that downloads)."""
        online = self.spec.get("online")
        if online is None or split not in online.splits:
            raise ReproError(f"{self.spec.name}: no online source configured for split {split!r}")
        import datasets

        print(f"[prepare] downloading {online.hf_id} {online.get('config') or ''} {split}", flush=True)
        rows = datasets.load_dataset(online.hf_id, online.get("config"), split=online.splits[split])
        self.files[f"online:{online.hf_id}/{online.get('config')}/{online.splits[split]}"] = rows._fingerprint
        return list(rows)

    def split_source(self, split: str) -> str:
        """'online' only where an online split is configured and online was asked for."""
        online = self.spec.get("online")
        if self.source == "online" and online is not None and split in online.splits:
            return "online"
        if self.spec.offline.get(split) is None:
            raise ReproError(
                f"{self.spec.name}: the {split} split is not available offline in {self.data_dir} "
                f"(use DATA_SOURCE=online to obtain it through the `datasets` library)"
            )
        return "offline"


def _head(items: list, limit) -> list:
    return items if limit is None else items[: int(limit)]


def _write_lines(path: Path, lines) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def _fairseq_preprocess(args: list[str], root: Path) -> None:
    run_logged([venv_tool("fairseq-preprocess"), "--workers", "1", *args], root / "preprocess.log", echo=False)


class _MosesPipeline:
    """Moses punctuation normalization + tokenization (sacremoses), as WMT-style setups do."""

    def __init__(self, lang: str, lowercase: bool):
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        self.normalizer = MosesPunctNormalizer(lang=lang)
        self.tokenizer = MosesTokenizer(lang=lang)
        self.lowercase = lowercase

    def __call__(self, line: str) -> str:
        text = self.tokenizer.tokenize(self.normalizer.normalize(line), escape=False, return_str=True)
        return text.lower() if self.lowercase else text


def _bpe_segment(root: Path, merges: int, train_lines: list[str], splits: dict[str, list[str]]) -> dict[str, list[str]]:
    """Learn joint subword-nmt BPE on the training text and apply it to every split."""
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    codes_path = root / "raw" / "bpe.codes"
    codes_path.parent.mkdir(parents=True, exist_ok=True)
    with open(codes_path, "w", encoding="utf-8") as codes:
        learn_bpe(train_lines, codes, merges)
    with open(codes_path, encoding="utf-8") as codes:
        bpe = BPE(codes)
    return {name: [bpe.process_line(line) for line in lines] for name, lines in splits.items()}


def _build_translation(inputs: _Inputs, opts: DictConfig, root: Path) -> dict:
    spec = inputs.spec
    src, tgt = spec.src, spec.tgt
    pairs: dict[str, tuple[list[str], list[str]]] = {}
    # Evaluation sets are the standard offline files; train/valid may come from online.
    for split in ("train", "valid", *spec.evaluations.keys()):
        if split in spec.evaluations:
            files = spec.evaluations[split]
            pair = (inputs.lines(files.src), inputs.lines(files.tgt))
        elif inputs.split_source(split) == "online":
            rows = inputs.online_rows(split)
            pair = ([r["translation"][src] for r in rows], [r["translation"][tgt] for r in rows])
        else:
            files = spec.offline[split]
            pair = (inputs.lines(files.src), inputs.lines(files.tgt))
        limit = opts.max_train if split == "train" else opts.max_eval
        pairs[split] = (_head(pair[0], limit), _head(pair[1], limit))
        if len(pairs[split][0]) != len(pairs[split][1]):
            raise ReproError(f"{spec.name} {split}: {len(pair[0])} {src} lines but {len(pair[1])} {tgt} lines")

    print(f"[prepare] {spec.name}: Moses tokenization", flush=True)
    tokenizers = {lang: _MosesPipeline(lang, spec.lowercase) for lang in (src, tgt)}
    tokenized = {}
    for split, (src_lines, tgt_lines) in pairs.items():
        if split in spec.evaluations and spec.evaluations[split].get("tokenized"):
            # Test sets distributed tokenized (IWSLT14's fairseq split) are used as they are.
            tokenized[f"{split}.{src}"], tokenized[f"{split}.{tgt}"] = src_lines, tgt_lines
        else:
            tokenized[f"{split}.{src}"] = [tokenizers[src](x) for x in src_lines]
            tokenized[f"{split}.{tgt}"] = [tokenizers[tgt](x) for x in tgt_lines]
    print(f"[prepare] {spec.name}: BPE with {opts.bpe_merges} merges", flush=True)
    segmented = _bpe_segment(root, opts.bpe_merges, tokenized[f"train.{src}"] + tokenized[f"train.{tgt}"], tokenized)
    for name, lines in segmented.items():
        _write_lines(root / "raw" / name, lines)

    evaluations = {}
    test_prefixes = []
    for index, name in enumerate(spec.evaluations):
        subset = "test" if index == 0 else f"test{index}"
        test_prefixes.append(str(root / "raw" / name))
        refs = root / "refs" / f"{name}.{tgt}"
        # BLEU is computed by sacrebleu on detokenized text: references are kept (or made)
        # untokenized, and lowercased when the whole pipeline is lowercased.
        references = pairs[name][1]
        if spec.evaluations[name].get("tokenized"):
            from sacremoses import MosesDetokenizer

            detokenizer = MosesDetokenizer(lang=tgt)
            references = [detokenizer.detokenize(x.split()) for x in references]
        _write_lines(refs, [x.lower() for x in references] if spec.lowercase else references)
        evaluations[name] = {"subset": subset, "refs": [str(refs)], "detokenize": tgt}
    _fairseq_preprocess(
        ["--source-lang", src, "--target-lang", tgt, "--joined-dictionary",
         "--trainpref", str(root / "raw" / "train"), "--validpref", str(root / "raw" / "valid"),
         "--testpref", ",".join(test_prefixes), "--destdir", str(root / "bin")],
        root,
    )
    return evaluations


def _build_summarization(inputs: _Inputs, opts: DictConfig, root: Path) -> dict:
    spec = inputs.spec
    if inputs.split_source("train") == "online":
        rows = inputs.online_rows("train")
        articles, titles = [r["document"] for r in rows], [r["summary"] for r in rows]
    else:
        articles, titles, seen = [], [], set()
        # The offline Gigaword samples overlap partly; keep the first copy of each pair.
        for files in spec.offline.train:
            for article, title in zip(inputs.lines(files.src), inputs.lines(files.tgt)):
                if (article, title) not in seen:
                    seen.add((article, title))
                    articles.append(article)
                    titles.append(title)
    # The validation pairs are held out from the end of the training pool.
    n_valid = int(opts.n_valid)
    if len(articles) <= n_valid:
        raise ReproError(f"{spec.name}: only {len(articles)} training pairs, need more than n_valid={n_valid}")
    splits = {
        "train": (_head(articles[:-n_valid], opts.max_train), _head(titles[:-n_valid], opts.max_train)),
        "valid": (_head(articles[-n_valid:], opts.max_eval), _head(titles[-n_valid:], opts.max_eval)),
    }
    evaluations = {}
    test_prefixes = []
    for index, (name, files) in enumerate(spec.evaluations.items()):
        sources = _head(inputs.lines(files.src), opts.max_eval)
        if files.get("replace_digits"):
            # Rush et al. replace digits by '#' in the training data; do the same to DUC inputs.
            sources = ["".join("#" if c.isdigit() else c for c in line) for line in sources]
        refs = []
        for ref_index, ref_file in enumerate(files.refs):
            ref_path = root / "refs" / f"{name}.ref{ref_index}"
            _write_lines(ref_path, _head(inputs.lines(ref_file), opts.max_eval))
            refs.append(str(ref_path))
        # fairseq-generate needs a target side; the first reference serves (scoring uses refs/).
        splits[name] = (sources, _head(inputs.lines(files.refs[0]), opts.max_eval))
        subset = "test" if index == 0 else f"test{index}"
        test_prefixes.append(str(root / "raw" / name))
        evaluations[name] = {"subset": subset, "refs": refs, "truncate_bytes": files.get("truncate_bytes")}
    for split, (sources, targets) in splits.items():
        _write_lines(root / "raw" / f"{split}.article", sources)
        _write_lines(root / "raw" / f"{split}.title", [t.lower() for t in targets])
    _fairseq_preprocess(
        ["--source-lang", "article", "--target-lang", "title",
         "--nwordssrc", str(opts.vocab_size), "--nwordstgt", str(opts.vocab_size),
         "--trainpref", str(root / "raw" / "train"), "--validpref", str(root / "raw" / "valid"),
         "--testpref", ",".join(test_prefixes), "--destdir", str(root / "bin")],
        root,
    )
    return evaluations


def _snli_offline_train(inputs: _Inputs, files, limit) -> tuple[list, list, list]:
    from sacremoses import MosesTokenizer

    # The train subset is raw text while dev/test are PTB-tokenized: Moses tokenization
    # (no escaping) splits punctuation the same way for the common cases.
    tokenizer = MosesTokenizer(lang="en")
    premises, hypotheses, labels = [], [], []
    for relative in files:
        with open(inputs.path(relative), encoding="utf-8", newline="") as handle:
            for row in csv.reader(handle, delimiter="\t"):
                if limit is not None and len(labels) >= int(limit):
                    break
                premises.append(tokenizer.tokenize(row[2], escape=False, return_str=True))
                hypotheses.append(tokenizer.tokenize(row[3], escape=False, return_str=True))
                labels.append(CAT_SNLI_LABELS[row[0]])
    return premises, hypotheses, labels


def _build_snli(inputs: _Inputs, opts: DictConfig, root: Path) -> dict:
    spec = inputs.spec
    splits = {}
    for split in ("train", "valid", "test"):
        if inputs.split_source(split) == "online":
            from sacremoses import MosesTokenizer

            tokenizer = MosesTokenizer(lang="en")
            rows = [r for r in inputs.online_rows(split) if r["label"] in (0, 1, 2)]
            data = (
                [tokenizer.tokenize(r["premise"], escape=False, return_str=True) for r in rows],
                [tokenizer.tokenize(r["hypothesis"], escape=False, return_str=True) for r in rows],
                [SNLI_LABELS[r["label"]] for r in rows],
            )
        elif split == "train":
            data = _snli_offline_train(inputs, spec.offline.train, opts.max_train)
        else:
            files = spec.offline[split]
            data = (inputs.lines(files.premise), inputs.lines(files.hypothesis), inputs.lines(files.label))
        limit = opts.max_train if split == "train" else opts.max_eval
        premises, hypotheses, labels = (_head([x.strip() for x in column], limit) for column in data)
        bad = sorted(set(labels) - set(SNLI_LABELS))
        if bad:
            raise ReproError(f"snli {split}: unexpected labels {bad}")
        splits[split] = (premises, hypotheses, labels)
        _write_lines(root / "raw" / f"{split}.premise", premises)
        _write_lines(root / "raw" / f"{split}.hypothesis", hypotheses)
        _write_lines(root / "bin" / "label" / f"{split}.label", labels)
    # One dictionary for premise and hypothesis, built from both training sides.
    _write_lines(root / "raw" / "train.both", splits["train"][0] + splits["train"][1])
    _fairseq_preprocess(
        ["--only-source", "--dict-only", "--trainpref", str(root / "raw" / "train.both"),
         "--destdir", str(root / "raw" / "dict"), "--nwordssrc", str(opts.vocab_size)],
        root,
    )
    for column, side in (("input0", "premise"), ("input1", "hypothesis")):
        _fairseq_preprocess(
            ["--only-source", "--srcdict", str(root / "raw" / "dict" / "dict.txt"),
             *[arg for split in ("train", "valid", "test")
               for arg in (f"--{'trainpref' if split == 'train' else split + 'pref'}", str(root / "raw" / f"{split}.{side}"))],
             "--destdir", str(root / "bin" / column)],
            root,
        )
    return {"test": {"subset": "test", "refs": [str(root / "bin" / "label" / "test.label")]}}


def _inflection_source(lang: str, lemma: str, tags: str) -> str:
    characters = [SPACE_SYMBOL if c == " " else c for c in lemma]
    return " ".join([f"<{lang}>", *characters, *(f"<{tag}>" for tag in tags.split(";"))])


def _inflection_target(form: str) -> str:
    return " ".join(SPACE_SYMBOL if c == " " else c for c in form)


def _build_inflection(inputs: _Inputs, opts: DictConfig, root: Path) -> dict:
    spec = inputs.spec
    table = [line.split("\t") for line in inputs.lines(spec.offline.languages_table)]
    header, rows = table[0], table[1:]
    column = header.index(f"train-{opts.setting}")
    available = [row[0] for row in rows if row[column].strip() not in ("", "0", "-")]
    languages = available if opts.languages == "all" else list(opts.languages)
    missing = sorted(set(languages) - set(available))
    if missing:
        raise ReproError(f"sigmorphon: no train-{opts.setting} data for {missing}")
    splits = {"train": ([], []), "valid": ([], []), "test": ([], [])}
    test_languages = []
    for lang in languages:
        for split, suffix, limit in (("train", f"train-{opts.setting}", opts.max_train_per_language),
                                     ("valid", "dev", opts.max_eval_per_language),
                                     ("test", "test", opts.max_eval_per_language)):
            triples = [line.split("\t") for line in inputs.lines(f"{spec.offline.folder}/{lang}-{suffix}") if line.strip()]
            for lemma, form, tags in _head(triples, limit):
                # The language tag is the first source token (one multilingual model).
                splits[split][0].append(_inflection_source(lang, lemma, tags))
                splits[split][1].append(_inflection_target(form))
                if split == "test":
                    test_languages.append(lang)
    for split, (sources, targets) in splits.items():
        _write_lines(root / "raw" / f"{split}.src", sources)
        _write_lines(root / "raw" / f"{split}.tgt", targets)
    refs = root / "refs" / "test.forms"
    _write_lines(refs, [t.replace(" ", "").replace(SPACE_SYMBOL, " ") for t in splits["test"][1]])
    langs = root / "refs" / "test.languages"
    _write_lines(langs, test_languages)
    _fairseq_preprocess(
        ["--source-lang", "src", "--target-lang", "tgt",
         "--trainpref", str(root / "raw" / "train"), "--validpref", str(root / "raw" / "valid"),
         "--testpref", str(root / "raw" / "test"), "--destdir", str(root / "bin")],
        root,
    )
    return {"test": {"subset": "test", "refs": [str(refs)], "languages": str(langs), "characters": True}}


BUILDERS = {
    "translation": _build_translation,
    "summarization": _build_summarization,
    "snli": _build_snli,
    "inflection": _build_inflection,
}


def _options_key(spec: DictConfig, opts: DictConfig, source: str) -> str:
    payload = {
        "spec": OmegaConf.to_container(spec, resolve=True),
        "options": OmegaConf.to_container(opts, resolve=True),
        "source": source,
        # A change to the preparation code invalidates the cache as well.
        "code": sha256_file(Path(__file__)),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _stamp_is_current(stamp: dict, options_key: str, data_dir: Path) -> bool:
    """Same options and code, and every offline input file still has the recorded hash
    (online inputs are identified by their `datasets` fingerprint and not re-fetched)."""
    if stamp.get("options_key") != options_key or stamp.get("data_dir") != str(data_dir):
        return False
    for relative, digest in stamp["manifest"]["inputs"].items():
        if relative.startswith("online:"):
            continue
        path = data_dir / relative
        if not path.is_file() or sha256_file(path) != digest:
            return False
    return True


def prepare(dataset: str, scale: str, *, data_dir=None, source: str | None = None,
            work_dir: Path = REPO_ROOT, overrides: dict | None = None) -> PreparedData:
    """Prepare `dataset` at `scale` (options from configs/prepare/<dataset>.yaml), cached."""
    check_scale(scale)
    spec = load_config("prepare", dataset)
    opts = OmegaConf.merge(spec.scales[scale], overrides or {})
    source = source or opts.source
    if source not in ("offline", "online"):
        raise ReproError(f"unknown data source {source!r}; choose offline or online")
    data_dir = resolve_data_dir(data_dir)
    variant = f"{dataset}-{opts.setting}" if opts.get("setting") else dataset
    root = Path(work_dir).resolve() / "data" / variant / f"{scale}-{source}"
    stamp_path = root / "stamp.json"
    options_key = _options_key(spec, opts, source)
    if stamp_path.is_file():
        stamp = json.loads(stamp_path.read_text())
        if _stamp_is_current(stamp, options_key, data_dir):
            print(f"[prepare] {variant} ({scale}, {source}) is up to date: {root}", flush=True)
            return PreparedData(root, stamp["manifest"])

    print(f"[prepare] building {variant} ({scale}, {source}) in {root}", flush=True)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    inputs = _Inputs(data_dir, source, spec)
    evaluations = BUILDERS[spec.kind](inputs, opts, root)
    manifest = {
        "dataset": dataset,
        "variant": variant,
        "scale": scale,
        "source": source,
        "description": f"{spec.description} [{source}; {opts.note}]",
        "evaluations": evaluations,
        "inputs": inputs.files,
    }
    write_json(stamp_path, {"options_key": options_key, "data_dir": str(data_dir), "manifest": manifest})
    return PreparedData(root, manifest)
