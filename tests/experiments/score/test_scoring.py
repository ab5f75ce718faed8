"""Scorers against values computed by hand on tiny fixtures."""

import pytest

from regattn_fairseq.experiments.score import scorers as scoring


def test_bleu_perfect_and_signature():
    metrics, signature = scoring.bleu(["the cat sat on the mat ."], ["the cat sat on the mat ."])
    assert metrics == {"bleu": 100.0}
    assert "nrefs:1" in signature and "tok:13a" in signature


def test_bleu_hand_computed():
    # hyp "a b c d" vs ref "a b c e": precisions 3/4, 2/3, 1/2, 0/1 -> sacrebleu's default
    # 'exp' smoothing replaces the zero 4-gram count by 1/2^1 over 1 -> p4 = 0.5.
    # BP = 1; BLEU = (0.75 * 2/3 * 0.5 * 0.5)^(1/4) = 0.125^(1/4) = 0.5946
    metrics, _ = scoring.bleu(["a b c d"], ["a b c e"])
    assert metrics["bleu"] == pytest.approx(59.46, abs=0.01)


def test_rouge_f1_hand_computed():
    # hyp "police killed the gunman", ref "the gunman was killed by police"
    # unigram overlap 4: P = 4/4, R = 4/6 -> F1 = 0.8; bigram overlap {the gunman}: P 1/3, R 1/5
    # -> F1 = 0.25; LCS "the gunman"/"killed"... LCS length 2 -> P 2/4, R 2/6 -> F1 = 0.4
    metrics = scoring.rouge(
        ["police killed the gunman"], [["the gunman was killed by police"]], "fmeasure"
    )
    assert metrics == {"rouge1": 80.0, "rouge2": 25.0, "rougeL": 40.0}


def test_truncate_bytes_keeps_whole_characters():
    assert scoring.truncate_bytes("abc", 75) == "abc"
    assert scoring.truncate_bytes("x" * 80, 75) == "x" * 75
    assert scoring.truncate_bytes("é" * 40, 75) == "é" * 37  # 2 bytes each; 75 -> 37 chars


def test_rouge_recall_75_bytes_pooled_over_references():
    # The hypothesis is 11 x "alpha " (66 bytes) + "beta gamma" (76 bytes): cut at 75 bytes it
    # ends in "beta gamm", so "gamma" no longer matches.
    hypothesis = "alpha " * 11 + "beta gamma"
    references = [["beta gamma", "alpha"]]
    metrics = scoring.rouge([hypothesis], references, "recall", truncate=75)
    # ref 1 "beta gamma": 1 of 2 unigrams matched (gamma lost to truncation); ref 2 "alpha":
    # 1 of 1. ROUGE-1.5.5 (-f A) pools: (1 + 1) / (2 + 1) = 66.67, not the mean 75 of the
    # per-reference recalls.
    assert metrics["rouge1"] == 66.67
    # bigrams: ref 1 "beta gamma" not matched (0/1); ref 2 has no bigram (recall 0) -> 0.
    assert metrics["rouge2"] == 0.0
    untruncated = scoring.rouge([hypothesis], references, "recall")
    assert untruncated["rouge1"] == 100.0


def test_accuracy_and_exact_match_macro_average():
    assert scoring.accuracy(["a", "b", "c", "d"], ["a", "b", "x", "y"]) == {"accuracy": 50.0}
    result = scoring.exact_match(
        ["walked", "ran", "kävelin", "x"],
        ["walked", "run", "kävelin", "juoksin"],
        ["english", "english", "finnish", "finnish"],
    )
    # 1/2 per language -> macro average 50; a 3:1 split would differ from the micro average.
    assert result == {"accuracy": 50.0, "acc_english": 50.0, "acc_finnish": 50.0}
    skewed = scoring.exact_match(["a", "b", "c", "z"], ["a", "b", "c", "d"], ["x", "x", "x", "y"])
    assert skewed["accuracy"] == 50.0  # (100 + 0) / 2, not 75


def test_misaligned_outputs_fail():
    with pytest.raises(ValueError, match="2 outputs but 1 references"):
        scoring.accuracy(["a", "b"], ["a"])
