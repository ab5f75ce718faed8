"""fairseq-hydra-train for regattn's train configs, without Hydra's deprecation warnings
(issue #46); the suite trains with it (`experiments.train.train.HYDRA_TRAIN`):

    python -m regattn_fairseq.hydra_train --config-dir configs --config-name snli ...

It is fairseq's entry point (`fairseq_cli.hydra_train`, the same arguments, search path and
job) but for two things: fairseq's schema is registered under a name of its own
(`fairseq_adapter.register_fairseq_schema`) rather than under the config's name, and
`hydra.main` is given ``version_base="1.1"``, the behaviour fairseq's assumes without one. The
job function is defined here so that Hydra names the job after this file, ``hydra_train``, as
under fairseq-hydra-train (its log is ``hydra_train.log``, which the sweeps read).
"""

import hydra

from regattn_fairseq.fairseq_adapter import fairseq_config_dir, register_fairseq_schema, train_job


def hydra_train(cfg) -> float:
    """One training job (`fairseq_adapter.train_job`)."""
    return train_job(cfg)


if __name__ == "__main__":
    register_fairseq_schema()
    hydra.main(config_path=str(fairseq_config_dir()), config_name="config", version_base="1.1")(
        hydra_train
    )()
