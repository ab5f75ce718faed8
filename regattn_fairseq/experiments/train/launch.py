"""Where and on how many processes a training run executes: the CPU (the default), one GPU, or
fairseq's data-parallel training (torch DDP) over several GPUs, machines or CPU processes.

Several processes are started by `torchrun`, and fairseq is told each process's rank through
its own options (`distributed_init_method=env://`, rank and device from torchrun's environment,
`distributed_no_spawn`). fairseq's own launcher cannot start them on CPUs: it asserts that the
world size is at most `torch.cuda.device_count()` and spawns that many processes, and its
torchrun inference divides by the GPU count; with torchrun the CPU runs (the tests) take the
code path the GPUs take. torch DDP on CPU also needs `fairseq_adapter.allow_cpu_data_parallel`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import torch

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.cli import whole_number
from regattn_fairseq.experiments.core.tools import tool_path


@dataclass(frozen=True)
class Launch:
    """How one training run is launched.

    Attributes
    ----------
    gpus : int
        GPUs per machine; 0 trains on the CPU.
    cpu_processes : int
        data-parallel processes on the CPU (gloo) when `gpus` is 0: a stand-in for several GPUs
        (tests) or a CPU cluster.
    nodes : int
        machines; each runs the same command with its own `node_rank`.
    node_rank : int
        this machine's rank (0 .. nodes-1); machine 0 hosts the rendezvous.
    master : str | None
        ``host:port`` of machine 0 (required when nodes > 1).
    """

    gpus: int = 0
    cpu_processes: int = 1
    nodes: int = 1
    node_rank: int = 0
    master: str | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.cpu_processes < 1 or self.nodes < 1:
            raise ReproError(
                f"GPUS={self.gpus}, CPU processes {self.cpu_processes}, NODES={self.nodes}: "
                "GPUS must be >= 0, the others >= 1"
            )
        if self.gpus and self.cpu_processes > 1:
            raise ReproError("CPU processes and GPUS are exclusive: DDP runs on one or the other")
        if not 0 <= self.node_rank < self.nodes:
            raise ReproError(f"NODE_RANK={self.node_rank} is not in 0..{self.nodes - 1}")
        if self.nodes > 1 and (not self.master or ":" not in self.master):
            raise ReproError(
                f"NODES={self.nodes} needs MASTER=host:port, the address of machine 0 "
                f"(got {self.master!r})"
            )

    @property
    def processes_per_node(self) -> int:
        return self.gpus or self.cpu_processes

    @property
    def world_size(self) -> int:
        return self.processes_per_node * self.nodes

    @property
    def scores(self) -> bool:
        """Whether this machine decodes, scores and writes result rows: machine 0 only (the
        others train and stop)."""
        return self.node_rank == 0

    def check_visible_gpus(self) -> None:
        """Refuses GPUS=N on a machine that sees fewer GPUs: fairseq would train on the CPU
        without a word (`common.cpu=false` only allows CUDA).

        Raises
        ------
        ReproError
            fewer than `gpus` CUDA devices are visible here.
        """
        if not self.gpus:
            return
        import torch

        visible = torch.cuda.device_count()
        if visible < self.gpus:
            raise ReproError(
                f"GPUS={self.gpus}, but this machine sees {visible} CUDA device(s) "
                f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            )

    def overrides(self) -> list[str]:
        """The Hydra overrides of the training run.

        Returns
        -------
        list[str]
            ``common.cpu=false`` on GPUs; with several processes fairseq's distributed options,
            the world size as a literal (it is part of the composed config a row records: the
            effective batch is world size x the configured batch) and each process's rank and
            device from torchrun's environment.
        """
        device = ["common.cpu=false"] if self.gpus else []
        if self.world_size == 1:
            return device
        return [
            *device,
            f"distributed_training.distributed_world_size={self.world_size}",
            "distributed_training.distributed_init_method=env://",
            "distributed_training.distributed_rank=${oc.env:RANK}",
            "distributed_training.device_id=${oc.env:LOCAL_RANK}",
            "distributed_training.distributed_no_spawn=true",
            f"distributed_training.distributed_backend={'nccl' if self.gpus else 'gloo'}",
        ]

    def command(self, train_command: list[str]) -> list[str]:
        """`train_command` itself for one process, else under torchrun.

        Parameters
        ----------
        train_command : list[str]
            the fairseq-hydra-train command line (`train.train_command`).

        Returns
        -------
        list[str]
            The command to run on this machine.
        """
        if self.world_size == 1:
            return train_command
        if self.nodes == 1:
            rendezvous = ["--standalone"]
        else:
            host, port = self.master.rsplit(":", 1)
            rendezvous = [
                f"--nnodes={self.nodes}",
                f"--node-rank={self.node_rank}",
                f"--master-addr={host}",
                f"--master-port={port}",
            ]
        return [
            tool_path("torchrun"),
            *rendezvous,
            f"--nproc-per-node={self.processes_per_node}",
            "--no-python",
            *train_command,
        ]


# the default: one process on the CPU
ONE_PROCESS = Launch()


def use_threads(threads: int) -> None:
    """Run this process and the training and decoding processes it starts with `threads`
    intra-op threads (OpenMP and MKL read the environment when a child starts; this process's
    own torch is set directly, and its `provenance` records the number)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    torch.set_num_threads(threads)


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The command-line options of a `Launch` (scripts/reproduce.py and scripts/sweep.py).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        the parser to extend.
    """
    group = parser.add_argument_group(
        "devices",
        "where training runs (experiments/launch.py); decoding and scoring stay on the CPU",
    )
    group.add_argument(
        "--gpus",
        type=int,
        default=0,
        help="GPUs per machine (GPUS=N); 2 or more: fairseq's data-parallel training (torch "
        "DDP, NCCL) under torchrun, each GPU taking a batch of the configured size",
    )
    group.add_argument(
        "--cpu-processes",
        type=int,
        default=1,
        help="data-parallel training processes on the CPU (gloo), without GPUs",
    )
    group.add_argument(
        "--threads",
        type=whole_number(1),
        default=None,
        help="intra-op threads of each training and decoding process on the CPU (THREADS=N, "
        "default: the table's recipe, else 1): the LSTMs' small matrix products scale poorly "
        "over threads, and a "
        "2-thread run collapses when another process takes a core, so two 1-thread runs "
        "(--workers 2) use two cores best (results/bench/training_cpu.md)",
    )
    group.add_argument("--nodes", type=int, default=1, help="machines (NODES=M)")
    group.add_argument(
        "--node-rank", type=int, default=0, help="this machine's rank (NODE_RANK=0..M-1)"
    )
    group.add_argument("--master", help="host:port of machine 0 when --nodes > 1 (MASTER=...)")


def launch_from_args(args: argparse.Namespace) -> Launch:
    """The `Launch` of parsed `add_launch_arguments` options.

    Raises
    ------
    ReproError
        an inconsistent combination (see `Launch`).
    """
    return Launch(args.gpus, args.cpu_processes, args.nodes, args.node_rank, args.master)
