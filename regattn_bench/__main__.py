"""``python -m regattn_bench <name> [options]``: run one benchmark (`regattn_bench.catalog`);
``python -m regattn_bench list``: what each measures and needs; ``<name> --help``: its options."""

from __future__ import annotations

import sys

from regattn_bench.catalog import BENCHMARKS, run
from regattn_checkout.errors import ReproError

USAGE = "usage: python -m regattn_bench {list | <name> [options]}"


def describe() -> str:
    """The benchmarks, one per line: name, what it measures, what it needs."""
    width = max(len(b.name) for b in BENCHMARKS)
    lines = [
        USAGE,
        "",
        "benchmarks (make bench-<name> runs the same; bench-<name>-cuda where it needs CUDA):",
    ]
    for benchmark in BENCHMARKS:
        needs = f" [needs {benchmark.needs}]" if benchmark.needs else ""
        lines.append(f"  {benchmark.name:<{width}}  {benchmark.summary}{needs}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("list", "-h", "--help"):
        print(describe())
        return 0 if argv else 2
    name, options = argv[0], argv[1:]
    # the benchmark's own argparse names itself by sys.argv[0] in its usage and errors
    sys.argv = [f"python -m regattn_bench {name}", *options]
    try:
        run(name, options)
    except ReproError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
