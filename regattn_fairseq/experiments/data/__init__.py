"""Stage 1, data: sources (offline, hub, local), text processing, the dataset builders, prepared
data and the test sets."""
