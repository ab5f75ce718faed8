"""Each kind of experiment is one `ExperimentTrainer`, found by its config's ``trainer:``."""

import pytest
from omegaconf import OmegaConf

from regattn_fairseq.experiments.core.cli import UsageError
from regattn_fairseq.experiments.pipelines import fairseq_trainer, pretrained
from regattn_fairseq.experiments.pipelines.trainers import TRAINERS, trainer_of


def test_an_experiment_without_a_trainer_is_fairseq_and_huggingface_is_pretrained():
    assert trainer_of(OmegaConf.create({"name": "nmt"})) is fairseq_trainer.TRAINER
    experiment = OmegaConf.create({"name": "snli_minilm", "trainer": "huggingface"})
    assert trainer_of(experiment) is pretrained.TRAINER
    assert set(TRAINERS) == {"fairseq", "huggingface"}


def test_an_unknown_trainer_is_refused_by_name():
    # before, any other value silently trained with fairseq
    experiment = OmegaConf.create({"name": "snli", "trainer": "hugginface"})
    with pytest.raises(UsageError, match=r"snli: trainer 'hugginface' is none of"):
        trainer_of(experiment)


def test_softmax_takes_gamma_in_fairseq_but_not_in_the_pretrained_encoder():
    # the pretrained weights were trained under softmax at γ = 1 (`pretrained.GAMMA_MAPPINGS`)
    assert "softmax" in fairseq_trainer.TRAINER.gamma_mappings
    assert "softmax" not in pretrained.TRAINER.gamma_mappings
    assert "sparsemax" in pretrained.TRAINER.gamma_mappings
