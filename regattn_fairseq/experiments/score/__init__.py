"""Stage 4, score: the metric registry, the scorers (BLEU, ROUGE, accuracy, exact match, entity F1)
and significance."""
