"""The ROUGE-1.5.5-compatible scorer: hand-computed cases, the script's stemming, and
agreement with numbers the official Perl script printed (rouge155_official.json)."""

import hashlib
import json
from pathlib import Path

import pytest

from regattn_fairseq.experiments.core.paths import DEFAULT_DATA_DIR
from regattn_fairseq.experiments.score import rouge, rouge_perl
from regattn_fairseq.experiments.score import scorers as scoring

HERE = Path(__file__).parent
OFFICIAL = json.loads((HERE / "rouge155_official.json").read_text())
SYNTHETIC = json.loads((HERE / "synthetic_items.json").read_text())


def test_references_are_pooled_not_averaged():
    # hyp tokens (stemmed): polic arrest three men after bank robberi (7)
    # ref 1 "three men arrested" -> three men arrest: 3 of 3 unigrams matched
    # ref 2 (15 tokens: polic sai a bank wa rob by arm men on fridai night in the citi): 3 matched
    # pooled recall (6/18) differs from the mean of the per-reference recalls ((3/3 + 3/15) / 2).
    hypothesis = "police arrest three men after bank robbery"
    references = [
        "three men arrested",
        "police say a bank was robbed by armed men on friday night in the city",
    ]
    recall, precision, fmeasure = rouge.item_scores(hypothesis, references)["rouge1"]
    assert recall == pytest.approx(6 / 18, abs=1e-5)
    assert precision == pytest.approx(6 / 14, abs=1e-5)  # the hypothesis counted once per reference
    assert fmeasure == pytest.approx(0.375, abs=1e-5)
    assert scoring.rouge([hypothesis], [references], "recall")["rouge1"] == 33.33
    averaged = sum(rouge.item_scores(hypothesis, [r])["rouge1"][0] for r in references) / 2
    assert averaged == pytest.approx(0.6, abs=1e-5)


def test_rouge_l_pools_lcs_over_reference_lengths():
    # LCS with "a b c d": ref "a c d" -> 3, ref "d c" -> 1; recall (3 + 1) / (3 + 2)
    recall, precision, _ = rouge.item_scores("a b c d", ["a c d", "d c"])["rougeL"]
    assert recall == pytest.approx(0.8)
    assert precision == pytest.approx(4 / 8)


def test_byte_limit_cuts_hypothesis_and_every_reference():
    reference = "x" * 74 + " alpha"  # 81 bytes: "alpha" lies beyond byte 75
    assert rouge.item_scores("alpha", [reference])["rouge1"][0] == pytest.approx(0.5)
    assert rouge.item_scores("alpha", [reference], truncate=75)["rouge1"][0] == 0.0
    hypothesis = "y" * 72 + " alpha"  # cut to "yyy... al": the fragment "al" is a token
    assert rouge.tokenize(rouge.truncate_bytes(hypothesis, 75), stem=False) == ["y" * 72, "al"]
    assert scoring.rouge([hypothesis], [["alpha"]], "recall", truncate=75)["rouge1"] == 0.0


def test_truncate_bytes_keeps_whole_characters():
    assert scoring.truncate_bytes("é" * 40, 75) == "é" * 37


@pytest.mark.parametrize(
    "token, stem",
    [
        ("sent", "send"),
        ("found", "find"),
        ("denied", "deny"),
        ("made", "make"),
        ("been", "be"),
        ("turkey", "turkei"),
        ("best", "well"),
        ("better", "well"),  # the official DB's merge order (adv after adj)
        ("agreement", "agreem"),
        ("experimental", "experi"),  # ROUGE-1.5.5's step 4
        ("run", "run"),
        ("was", "was"),  # 3 characters or fewer: left alone
    ],
)
def test_stemming_as_rouge_155(token, stem):
    assert rouge.stem_token(token) == stem


def test_tokens_ascii_lowercase_hyphens_split():
    assert rouge.tokenize("U.S.-led Oil-for-Food, $5bn", stem=False) == [
        "u",
        "s",
        "led",
        "oil",
        "for",
        "food",
        "5bn",
    ]
    # the Kelvin sign lowercases to an ASCII k in Python; the script drops it
    assert rouge.tokenize("\u212aelvin", stem=False) == ["elvin"]


@pytest.mark.parametrize("item", SYNTHETIC, ids=[item["name"] for item in SYNTHETIC])
def test_synthetic_items_match_the_official_script(item):
    ours = rouge.corpus_scores(
        [item["hypothesis"]], [item["references"]], item.get("truncate_bytes")
    )
    official = OFFICIAL["synthetic"]["items"][item["name"]]
    for rouge_type in rouge.ROUGE_TYPES:
        for measure in rouge.MEASURES:
            assert ours[rouge_type][measure] == pytest.approx(
                official[rouge_type][measure], abs=1e-3
            )


def _real_sample(name):
    folder = DEFAULT_DATA_DIR / {"duc2004": "duc2004", "gigaword": "gigaword/test_1951"}[name]
    spec = OFFICIAL[name]
    for file, digest in spec["files"].items():
        path = folder / file
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            pytest.skip(f"{path} absent or not the file the fixture was made from")
    n = spec["items"]

    def lines(file):
        return (folder / file).read_text(encoding="utf-8").split("\n")[:n]

    if name == "duc2004":
        references = [
            list(r) for r in zip(*(lines(f"task1_ref{k}.txt") for k in range(4)), strict=True)
        ]
        return lines("input.txt"), references
    return [" ".join(s.split()[:8]) for s in lines("input.txt")], [
        [r] for r in lines("task1_ref0.txt")
    ]


@pytest.mark.parametrize("name", ["duc2004", "gigaword"])
def test_real_baselines_within_005_of_the_official_script(name):
    hypotheses, references = _real_sample(name)
    ours = rouge.corpus_scores(hypotheses, references, OFFICIAL[name]["truncate_bytes"])
    for rouge_type in rouge.ROUGE_TYPES:
        for measure in rouge.MEASURES:
            assert ours[rouge_type][measure] == pytest.approx(
                OFFICIAL[name]["scores"][rouge_type][measure], abs=0.05
            )


def test_signature_and_measures():
    assert scoring.rouge_signature("recall", 75, 4) == (
        "ROUGE-1.5.5-compatible -m -n 2 -w 1.2 -b 75 -a, recall, 4 refs, "
        f"regattn scorer v{rouge.SCORER_VERSION}"
    )
    assert ", F1, 1 ref," in scoring.rouge_signature("fmeasure", None, 1)
    with pytest.raises(ValueError, match="unknown ROUGE measure"):
        scoring.rouge(["a"], [["a"]], "f1")


def test_official_script_cross_check_when_available():
    folder = rouge_perl.find_rouge_perl()
    if folder is None:
        pytest.skip(f"${rouge_perl.ROUGE_PERL_ENV} not set (optional cross-check)")
    item = SYNTHETIC[0]
    official = rouge_perl.perl_rouge(folder, [item["hypothesis"]], [item["references"]])
    ours = rouge.corpus_scores([item["hypothesis"]], [item["references"]])
    assert official["rouge1"]["recall"] == pytest.approx(ours["rouge1"]["recall"], abs=1e-3)
