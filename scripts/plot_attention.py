#!/usr/bin/env python
"""Heatmaps of one sentence's attention, one panel per trained model, side by side, in the

Entry point; the code and its full documentation:
regattn_fairseq.experiments.report.attention_plots."""

from regattn_fairseq.experiments.report.attention_plots import main

if __name__ == "__main__":
    main()
