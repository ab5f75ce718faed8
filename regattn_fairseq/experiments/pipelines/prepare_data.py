#!/usr/bin/env python
"""Prepare (tokenize, segment, binarize) one dataset at one scale; cached under data/.

    python scripts/prepare_data.py multi30k --scale small [--source online] [--data-dir DIR]
    python scripts/prepare_data.py snli --scale paper --source local --local-data DIR

Datasets are the files in configs/prepare/. Normally scripts/reproduce.py calls this itself."""

import argparse

from regattn_checkout.errors import ReproError
from regattn_fairseq.experiments.core.cli import OneLineParser, run_main
from regattn_fairseq.experiments.core.config import check_scale
from regattn_fairseq.experiments.core.paths import PREPARE_CONFIG_DIR
from regattn_fairseq.experiments.data.prepare import prepare
from regattn_fairseq.experiments.pipelines.arguments import add_data_arguments


def main() -> None:
    datasets = sorted(p.stem for p in PREPARE_CONFIG_DIR.glob("*.yaml"))
    parser = OneLineParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", choices=datasets)
    add_data_arguments(parser)
    args = parser.parse_args()
    try:
        check_scale(args.scale)  # before any work (issue #26)
    except ReproError as error:
        parser.error(str(error))

    def run() -> None:
        prepared = prepare(
            args.dataset,
            args.scale,
            data_dir=args.data_dir,
            source=args.source,
            work_dir=args.work_dir,
            local_dir=args.local_data,
        )
        print(prepared.root)

    run_main(run)  # errors and Ctrl-C end in one message


if __name__ == "__main__":
    main()
