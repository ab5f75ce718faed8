"""Stage 2, train: composing the Hydra config, launching fairseq-hydra-train, its logs and the
wandb run."""
