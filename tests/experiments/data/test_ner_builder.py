"""The NER data builder (data/builders/ner.py): IOB2 <-> IOBES conversion and CoNLL reading,
on hand examples."""

from regattn_fairseq.experiments.data.builders.ner import iob2_to_iobes, iobes_to_iob2, read_conll


def test_iob2_to_iobes_hand_example():
    iob2 = ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-ORG", "I-MISC"]
    iobes = ["B-PER", "I-PER", "E-PER", "O", "S-LOC", "B-LOC", "E-LOC", "O", "S-ORG", "S-MISC"]
    assert iob2_to_iobes(iob2) == iobes
    # back to IOB2: identical, except that the I-MISC which began an entity is now B-MISC
    assert iobes_to_iob2(iobes) == [*iob2[:-1], "B-MISC"]
    assert iob2_to_iobes(["I-PER", "I-PER"]) == ["B-PER", "E-PER"]  # IOB1-style start


def test_read_conll_drops_docstart_and_splits_sentences():
    lines = ["-DOCSTART- -DOCSTART- O", "", "De Art O", "Morgen N B-ORG", "", "", "Jan N B-PER"]
    assert read_conll(lines) == [(["De", "Morgen"], ["O", "B-ORG"]), (["Jan"], ["B-PER"])]
