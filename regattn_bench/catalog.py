"""Every benchmark of the project, declared once: its name on the command line and in
``make bench-<name>``, the module whose ``main(argv)`` runs it, what it measures and what it
needs. ``python -m regattn_bench <name> [options]`` is the one command that runs them
(`regattn_bench.__main__`); each writes its record through `regattn_bench.run_record`.

The fairseq benchmarks live in `regattn_fairseq.benchmarks` (they train fairseq models). They
are named here by their module path and imported only when asked for, so that this package
still never imports `regattn_fairseq` and the mapping benchmarks run where fairseq is not
installed, e.g. on a GPU machine."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field

from regattn_checkout.errors import ReproError

__all__ = ["BENCHMARKS", "Benchmark", "find", "run"]


@dataclass(frozen=True)
class Benchmark:
    """One benchmark.

    Attributes
    ----------
    name : str
        its name: ``python -m regattn_bench <name>``, ``make bench-<name>`` (``-cuda`` appended
        where it needs CUDA).
    module : str
        the module whose ``main(argv)`` runs it.
    summary : str
        what it measures, and against what (one line).
    needs : str
        what it needs beyond `regattn` and torch: "" (nothing), "fairseq", "CUDA" or
        "the logs of a device run".
    environment : dict
        variables set before the module is imported (Triton reads its mode at import).
    """

    name: str
    module: str
    summary: str
    needs: str = ""
    environment: dict[str, str] = field(default_factory=dict)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "mappings",
        "regattn_bench.mapping_speed",
        "forward and forward+backward of every mapping against torch.softmax, entmax and "
        "torchsparseattn (--device cuda: the Triton kernels against AdaSplash)",
    ),
    Benchmark(
        "scaling",
        "regattn_bench.scaling",
        "time against the number of rows and the row length, fitted slopes and a figure",
    ),
    Benchmark(
        "kernel-passes",
        "regattn_bench.kernel_passes",
        "the Triton row kernels' reads and writes, reductions and search steps per row, "
        "counted in Triton's interpreter",
        environment={"TRITON_INTERPRET": "1"},
    ),
    Benchmark(
        "attention",
        "regattn_bench.attention_speed",
        "the fused sparse attention against the row-wise path, sdpa flash and AdaSplash, "
        "1k-16k tokens",
        needs="CUDA",
    ),
    Benchmark(
        "dp",
        "regattn_bench.dp_speed",
        "the smoothed Viterbi (entropy, l2) against autograd through the recursion and a hard "
        "Viterbi",
    ),
    Benchmark(
        "hf",
        "regattn_bench.hf_speed",
        "a Hugging Face model's training step per regattn backend against transformers' eager "
        "and sdpa softmax (--model minilm: the pinned all-MiniLM-L6-v2)",
    ),
    Benchmark(
        "model",
        "regattn_fairseq.benchmarks.model_throughput",
        "training tokens/s of the LSTM summarizer and the Transformer per mapping against softmax",
        needs="fairseq",
    ),
    Benchmark(
        "training",
        "regattn_fairseq.benchmarks.training_layout",
        "the LSTM seq2seq's training step by part, and tokens/s by process layout",
        needs="fairseq",
    ),
    Benchmark(
        "continuous",
        "regattn_fairseq.benchmarks.continuous_speed",
        "continuous attention against discrete softmax in the LSTM decoder: step time and "
        "training tokens/s",
        needs="fairseq",
    ),
    Benchmark(
        "finetune-batching",
        "regattn_fairseq.benchmarks.finetune_batching",
        "the pretrained-encoder table's fine-tuning with length-grouped batches against plain "
        "random batches: padding and real tokens/s",
        needs="fairseq",
    ),
    Benchmark(
        "gpu-training",
        "regattn_fairseq.benchmarks.gpu_training",
        "training on one GPU, read off the logs of a device run, against the CPU runs",
        needs="the logs of a device run",
    ),
)


def find(name: str) -> Benchmark:
    """The benchmark called `name`; a clear error listing the names otherwise."""
    for benchmark in BENCHMARKS:
        if benchmark.name == name:
            return benchmark
    names = ", ".join(b.name for b in BENCHMARKS)
    raise ReproError(f"no benchmark called {name!r}; the benchmarks are: {names}")


def run(name: str, argv: list[str]) -> None:
    """Run the benchmark `name` with its command-line options `argv`."""
    benchmark = find(name)
    os.environ.update(benchmark.environment)
    try:
        module = importlib.import_module(benchmark.module)
    except ModuleNotFoundError as error:
        raise ReproError(
            f"benchmark {name!r} needs {benchmark.needs or 'its module'}: importing "
            f"{benchmark.module} failed ({error})"
        ) from error
    module.main(argv)
