"""Prepare the small-scale data of some tables for a lent GPU machine (prepare_carry.sh).

    python scripts/gpu_machine/prepare_table_data.py --work-dir .gpu/prep --inputs-to .gpu/data \
        nmt table2 inflection

Each table's small-scale experiments are prepared as `scripts/reproduce.py` prepares them
(`data.prepare.prepare`, with the experiment's dataset options) into WORK_DIR/data/, and the
raw files each prepared folder was built from (its stamp's ``inputs``) are copied under
INPUTS_TO at the same relative paths: the machine recreates the data root the stamps name and
puts them there, so the stamps are current and nothing is rebuilt there.
"""

import argparse
import shutil
from pathlib import Path

from regattn_fairseq.experiments.core.config import data_root, load_config
from regattn_fairseq.experiments.data.prepare import prepare

SCALE = "small"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", help="names of configs/reproduce/<table>.yaml")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--inputs-to", type=Path, required=True)
    parser.add_argument("--data-dir", help="the offline data root (default: as reproduce.py)")
    args = parser.parse_args()
    root = data_root(args.data_dir)
    for table in args.tables:
        spec = load_config("reproduce", table)
        for experiment in spec.experiments:
            if SCALE not in experiment.scales:
                continue
            data = prepare(
                experiment.dataset,
                SCALE,
                data_dir=root,
                work_dir=args.work_dir,
                overrides=experiment.get("dataset_options"),
            )
            inputs = data.manifest["inputs"]
            for relative in inputs:
                target = args.inputs_to / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / relative, target)
            print(f"{table} {experiment.name}: {data.root} ({len(inputs)} input files)")


if __name__ == "__main__":
    main()
