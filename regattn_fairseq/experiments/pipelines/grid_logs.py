"""Put the committed γ-grid selection logs back into a work folder.

`reproduce.py --gamma auto --gamma-select-epochs E` reads a finished selection run's validation
losses from its ``train.log`` and does not train it again. The grids trained on lent GPUs (and
the CPU's edge extensions) are committed under ``results/gamma_grids/<batch>/<table>-<mapping>-
gamma<γ>/`` as ``train.log.gz`` beside the run's composed ``config.yaml``. On a new machine, or
in a fresh work folder, this module writes each of them where the table run looks for it: the
folder above the ``checkpoint.save_dir`` its config names, re-rooted under ``--work-dir``.

A log already there is never overwritten (re-running is safe); where two batches hold the same
run (a γ trained again to compare devices), the first batch in name order is used and the other
is reported.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import yaml

from regattn_checkout.files import write_file
from regattn_checkout.paths import RESULTS_DIR

# the part of a save_dir after the work folder: checkpoints/<table>/<experiment>/...
_CHECKPOINTS = "checkpoints"


def selection_run_dir(config: dict, work_dir: Path) -> Path:
    """The selection run's folder under ``work_dir`` for a run's composed config.

    Parameters
    ----------
    config : dict
        the run's composed fairseq config (``config.yaml``); its ``checkpoint.save_dir`` is
        ``<its work folder>/checkpoints/<table>/.../seed<s>-select<E>epochs/checkpoints``.
    work_dir : Path
        the work folder to re-root it under.

    Returns
    -------
    Path
        ``work_dir/checkpoints/<table>/.../seed<s>-select<E>epochs``.
    """
    save_dir = Path(config["checkpoint"]["save_dir"])
    parts = save_dir.parts
    if parts[-1] != _CHECKPOINTS or not parts[-2].endswith("epochs") or "-select" not in parts[-2]:
        raise ValueError(f"not a γ selection run's save_dir: {save_dir}")
    # the first "checkpoints" is the work folder's (the last one is the run's own)
    try:
        start = parts.index(_CHECKPOINTS)
    except ValueError:
        raise ValueError(f"no checkpoints/ folder in save_dir {save_dir}") from None
    if start == len(parts) - 1:
        raise ValueError(f"no work folder's checkpoints/ in save_dir {save_dir}")
    return work_dir.joinpath(*parts[start:-1])


def restore(grids_dir: Path, work_dir: Path, tables: list[str] | None = None) -> dict:
    """Write every committed selection log of ``tables`` (all when None) into ``work_dir``.

    Returns
    -------
    dict
        ``{"written": [...], "kept": [...], "duplicates": [...]}``: the destination logs
        written, those already there (left as they are), and the committed runs skipped
        because an earlier batch holds the same run.
    """
    written, kept, duplicates, seen = [], [], [], set()
    runs = sorted(p.parent for p in grids_dir.glob("*/*/train.log.gz"))
    if not runs:
        raise FileNotFoundError(f"no <batch>/<run>/train.log.gz under {grids_dir}")
    for run in runs:
        config_file = run / "config.yaml"
        if not config_file.is_file():
            raise FileNotFoundError(
                f"{run}: train.log.gz without the config.yaml that says where it goes"
            )
        config = yaml.safe_load(config_file.read_text())
        target = selection_run_dir(config, work_dir)
        table = target.relative_to(work_dir / _CHECKPOINTS).parts[0]
        if tables is not None and table not in tables:
            continue
        if target in seen:
            duplicates.append(run)
            continue
        seen.add(target)
        log = target / "train.log"
        if log.exists():
            kept.append(log)
            continue
        target.mkdir(parents=True, exist_ok=True)
        write_file(log, gzip.decompress((run / "train.log.gz").read_bytes()))
        written.append(log)
    return {"written": written, "kept": kept, "duplicates": duplicates}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="the table runs' --work-dir")
    parser.add_argument(
        "--grids",
        type=Path,
        default=RESULTS_DIR / "gamma_grids",
        help="the committed grids (default: results/gamma_grids of this checkout)",
    )
    parser.add_argument(
        "tables", nargs="*", help="only these tables (nmt, table2, ...); default all"
    )
    args = parser.parse_args(argv)
    done = restore(args.grids, args.work_dir, args.tables or None)
    for log in done["written"]:
        print(f"written  {log}")
    for log in done["kept"]:
        print(f"kept     {log} (already there)")
    for run in done["duplicates"]:
        print(f"skipped  {run} (an earlier batch holds the same run)")
    counts = {kind: len(found) for kind, found in done.items()}
    print(f"{counts['written']} written, {counts['kept']} kept, {counts['duplicates']} duplicates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
