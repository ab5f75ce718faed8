"""Data-parallel training (GPUS=N) on the CPU: two processes under torchrun, gloo, fairseq's
torch-DDP training, through the suite's own launch (`runs.train` with a `launch.Launch`). Each
rank writes its parameters at the checkpoint (fairseq_adapter.save_parameters_on_every_rank);
both ranks must end identical, and equal to the checkpoint rank 0 saved. The ranks train on
different halves of each batch, so ranks whose gradients were not averaged would differ.

A tiny Transformer on the first Multi30k lines (every attention of the model, learned α
included, goes through the mapping); one mapping in the default suite, the others slow. Also
slow: NODES=2 simulated by two commands on this machine (machine 0 alone scores)."""

import contextlib
import json
import socket
import sys

import children
import pytest
import torch
from omegaconf import OmegaConf
from wandb_offline import offline_runs

from regattn_checkout.errors import ReproError
from regattn_checkout.paths import REPO_ROOT
from regattn_fairseq.experiments.core.config import MAPPINGS
from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.rows import keys as rowkeys
from regattn_fairseq.experiments.train import train as runs
from regattn_fairseq.experiments.train.launch import Launch
from regattn_fairseq.fairseq_adapter import RANK_PARAMETERS_DIR_ENV

EXPERIMENT = OmegaConf.create(
    {
        "name": "multi30k_en_de_transformer",
        "train_config": "nmt_multi30k_transformer",
        "scale_group": "transformer",
        "dataset": "multi30k",
    }
)
TWO_CPU_PROCESSES = Launch(cpu_processes=2)
DEFAULT_SUITE_MAPPING = "fusedmax"


@pytest.fixture(scope="module")
def multi30k_smoke(shared_data, tmp_path_factory):
    return prepare(
        "multi30k", "smoke", data_dir=shared_data, work_dir=tmp_path_factory.mktemp("work")
    )


def _train_on_two_processes(mapping, prepared, run_dir, monkeypatch):
    monkeypatch.setenv(RANK_PARAMETERS_DIR_ENV, str(run_dir / "ranks"))
    return runs.train(
        EXPERIMENT,
        "smoke",
        mapping,
        1,
        prepared,
        run_dir,
        # a few updates are enough: a missed gradient average shows after the first
        [*TWO_CPU_PROCESSES.overrides(), "optimization.max_update=4"],
        TWO_CPU_PROCESSES,
    )


def _check_identical_ranks(model, run_dir):
    log = (run_dir / "train.log").read_text()
    assert "distributed init (rank 1)" in log and "distributed init (rank 0)" in log
    ranks = [torch.load(run_dir / "ranks" / f"rank{r}.pt") for r in (0, 1)]
    assert ranks[0].keys() == ranks[1].keys()
    for name, value in ranks[0].items():
        assert torch.equal(value, ranks[1][name]), name
    saved = torch.load(model.checkpoint, weights_only=False)["model"]
    for name, value in ranks[0].items():
        assert torch.equal(value, saved[name]), name
    # the world size is part of the run's composed config, hence of its rows' key
    assert runs.composed_config(model)["distributed_world_size"] == 2
    # one wandb run, from rank 0 (fairseq logs from rank 0 only)
    [wandb_run] = offline_runs(run_dir)
    assert wandb_run["config"]["world_size"] == 2 and "train/loss" in wandb_run["history_keys"]


@pytest.mark.parametrize(
    "mapping",
    [
        pytest.param(m, marks=[] if m == DEFAULT_SUITE_MAPPING else [pytest.mark.slow])
        for m in MAPPINGS
    ],
)
def test_two_cpu_processes_end_with_identical_parameters(
    mapping, multi30k_smoke, tmp_path, monkeypatch
):
    run_dir = tmp_path / mapping
    model = _train_on_two_processes(mapping, multi30k_smoke, run_dir, monkeypatch)
    _check_identical_ranks(model, run_dir)
    if mapping == "entmax_learned":  # α is a parameter: learned, and kept in step too
        assert any("alpha" in name for name in torch.load(run_dir / "ranks" / "rank0.pt"))


def test_launch_commands_and_overrides():
    one = Launch()
    assert one.command(["fairseq-hydra-train"]) == ["fairseq-hydra-train"]
    assert one.overrides() == []
    assert Launch(gpus=1).overrides() == ["common.cpu=false"]
    eight = Launch(gpus=8, nodes=2, node_rank=1, master="node0:29500")
    command = eight.command(["fairseq-hydra-train", "--multirun"])
    assert command[0].endswith("torchrun")
    assert "--nnodes=2" in command and "--node-rank=1" in command
    assert "--master-addr=node0" in command and "--master-port=29500" in command
    assert "--nproc-per-node=8" in command
    assert command[-2:] == ["fairseq-hydra-train", "--multirun"]
    assert "distributed_training.distributed_world_size=16" in eight.overrides()
    assert "distributed_training.distributed_backend=nccl" in eight.overrides()
    assert not eight.scores and Launch(gpus=8, nodes=2, master="node0:1").scores
    assert "--standalone" in TWO_CPU_PROCESSES.command(["x"])
    assert "distributed_training.distributed_backend=gloo" in TWO_CPU_PROCESSES.overrides()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpus_without_a_gpu_is_an_error():
    # fairseq would otherwise train on the CPU silently
    with pytest.raises(ReproError, match="GPUS=1, but this machine sees 0 CUDA device"):
        Launch(gpus=1).check_visible_gpus()
    Launch(cpu_processes=2).check_visible_gpus()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gpus": -1}, "GPUS must be >= 0"),
        ({"gpus": 2, "cpu_processes": 2}, "exclusive"),
        ({"nodes": 2}, "MASTER=host:port"),
        ({"nodes": 2, "node_rank": 2, "master": "h:1"}, "NODE_RANK=2"),
    ],
)
def test_bad_launch_is_named(kwargs, message):
    with pytest.raises(ReproError, match=message):
        Launch(**kwargs)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_machines_on_localhost(shared_data, tmp_path):
    # NODES=2: the same command twice, NODE_RANK 0 and 1, one CPU process each, torchrun's
    # static rendezvous at "machine" 0; both train, machine 0 alone scores and writes the row
    port = _free_port()
    with contextlib.ExitStack() as machines:
        processes = []
        for rank in (0, 1):
            work = tmp_path / f"machine{rank}"
            work.mkdir()
            command = [
                sys.executable,
                "scripts/reproduce.py",
                "nmt",
                "--scale",
                "smoke",
                "--mappings",
                "fusedmax",
                "--data-dir",
                str(shared_data),
                "--work-dir",
                str(work),
                "--results-dir",
                str(work / "results"),
                "--nodes",
                "2",
                "--node-rank",
                str(rank),
                "--master",
                f"localhost:{port}",
            ]
            # output to files, not pipes: a full pipe would stall one machine and so both
            child = children.started(command, cwd=REPO_ROOT, output=work / "reproduce.log")
            processes.append((work, machines.enter_context(child)))
        for work, process in processes:
            process.wait(timeout=900)
            assert process.returncode == 0, (work / "reproduce.log").read_text()[-3000:]
    (first, _), (second, _) = processes
    # the training's log (the terminal shows only its progress lines)
    [log] = (second / "checkpoints").rglob("fusedmax/seed1/train.log")
    assert "distributed init (rank 1)" in log.read_text()
    assert not (second / "results").exists()  # machine 1 trained only, not even the baseline
    rows = [
        json.loads(line)
        for line in (first / "results" / "raw" / "nmt.jsonl").read_text().splitlines()
    ]
    # the table's baseline, scored by machine 0 before training (rows.baselines), and the model
    assert sorted(row["mapping"] for row in rows) == ["baseline: copy source", "fusedmax"]
    [row] = [row for row in rows if not rowkeys.is_baseline(row)]
    assert row["train"]["config"]["distributed_world_size"] == 2
    assert 0.0 <= row["metrics"]["bleu"] <= 100.0
