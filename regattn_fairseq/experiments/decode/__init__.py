"""Stage 3, decode: generating or classifying an evaluation set, attention exports, the NER
tagger's Viterbi decoding."""
