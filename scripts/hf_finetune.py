#!/usr/bin/env python
"""Fine-tune a Hugging Face sequence classifier on SNLI with a regattn attention mapping, and
report its accuracy and how sparse its attention is.

Entry point; the code and its full documentation:
regattn_fairseq.experiments.pipelines.finetune_example."""

from regattn_fairseq.experiments.pipelines.finetune_example import main

if __name__ == "__main__":
    main()
