"""``python -m regattn_fairseq.hydra_train``: fairseq-hydra-train for regattn's train configs,
without Hydra's deprecation warnings (`fairseq_adapter.hydra_train`); the suite trains with it
(`experiments.train.train.train_command`)."""

from regattn_fairseq.fairseq_adapter import hydra_train

if __name__ == "__main__":
    hydra_train()
