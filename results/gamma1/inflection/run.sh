#!/usr/bin/env bash
# The inflection runs behind results/gamma1/findings.md ("Inflection", issue #17 item 7), from a
# clean checkout of main, one thread per run (the runs ran side by side on a 2-core CPU).
#   bash results/gamma1/inflection/run.sh table MAPPING       # the tuned table (results/inflection.md):
#                                                             # γ grid 1, 4, 16 on seed 1, seeds 2, 3 at the chosen γ
#   bash results/gamma1/inflection/run.sh gamma1              # test scores of the grid's γ = 1 runs (no training)
#   bash results/gamma1/inflection/run.sh surrogate MAPPING   # γ = 1, the mapping forward, softmax's Jacobian backward
#   bash results/gamma1/inflection/run.sh epochs MAPPING      # γ = 1 again, one checkpoint per epoch kept (re-scored:
#                                                             # a second row of the gamma1 config, a determinism check)
#   bash results/gamma1/inflection/run.sh measure-epochs      # attention gradients of the epochs runs, every 3rd epoch
#   bash results/gamma1/inflection/run.sh measure-surrogate   # attention gradients of the surrogate runs, every 3rd epoch
#   bash results/gamma1/inflection/run.sh valid-losses        # per-epoch validation loss of the runs in SURROGATE_WORK
#                                                             # (their train.log stays on the machine) -> valid_losses.json
#   bash results/gamma1/inflection/run.sh valid-losses-rows   # name each of its runs' result row (run id, commits)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PY:-.venv/bin/python}
HERE=results/gamma1/inflection
RUNS=checkpoints/inflection/medium/small-offline
# the surrogate and epochs runs keep one checkpoint per epoch in their own work folder
SURROGATE_WORK=${SURROGATE_WORK:-/work/g1work}

case "${1:-}" in
table)
    "$PY" scripts/reproduce.py inflection --scale small --seeds 1,2,3 --gamma auto \
        --gamma-grid 1,4,16 --gamma-seeds first --mappings "$2"
    ;;
# the grid's γ = 1 folders are the runs --gamma 1 names: they are decoded and scored, not retrained
gamma1)
    "$PY" scripts/reproduce.py inflection --scale small --seeds 1 --gamma 1 \
        --mappings softmax sparsemax entmax15 --results-dir "$HERE"
    ;;
# γ given as an override (not --gamma): the run folder is then MAPPING/seed1 of SURROGATE_WORK
surrogate)
    "$PY" scripts/reproduce.py inflection --scale small --seeds 1 --mappings "$2" \
        --work-dir "$SURROGATE_WORK" --results-dir "$HERE" \
        --override model.attention_gamma=1.0 --override +model.attention_grad_surrogate=softmax \
        --override checkpoint.no_epoch_checkpoints=false
    ;;
# --retrain: the gamma1 rows are finished; the same config is trained again in SURROGATE_WORK
# (the config hash leaves checkpointing out) and scored again
epochs)
    "$PY" scripts/reproduce.py inflection --scale small --seeds 1 --gamma 1 --mappings "$2" \
        --work-dir "$SURROGATE_WORK" --results-dir "$HERE" --retrain \
        --override checkpoint.no_epoch_checkpoints=false
    ;;
measure-epochs)
    dirs=()
    for mapping in softmax sparsemax entmax15; do
        dir="$SURROGATE_WORK/$RUNS/$mapping/gamma1.0/seed1"
        if [ -d "$dir" ]; then dirs+=("$dir"); fi
    done
    "$PY" -m regattn_fairseq.experiments.attention_gradients "${dirs[@]}" \
        --every 3 --init --max-sentences 400 --out "$HERE/gradients_gamma1.json"
    ;;
measure-surrogate)
    "$PY" -m regattn_fairseq.experiments.attention_gradients \
        "$SURROGATE_WORK/$RUNS/sparsemax/seed1" "$SURROGATE_WORK/$RUNS/entmax15/seed1" \
        --every 3 --max-sentences 400 --out "$HERE/gradients_surrogate.json"
    ;;
valid-losses)
    test ! -e "$HERE/valid_losses.json" || { echo "$HERE/valid_losses.json exists" >&2; exit 1; }
    "$PY" - "$SURROGATE_WORK/$RUNS" "$HERE/valid_losses.json" <<'PYTHON'
import json, sys
from pathlib import Path
from regattn_fairseq.experiments.fairseq_logs import json_records
root, out = Path(sys.argv[1]), Path(sys.argv[2])
runs = {
    str(log.parent.relative_to(root)): [
        {"epoch": int(r["epoch"]), "valid_loss": float(r["valid_loss"])}
        for r in json_records(log.read_text()) if "valid_loss" in r
    ]
    for log in sorted(root.glob("*/**/train.log"))
}
out.write_text(json.dumps({"source": "fairseq train.log valid records", "runs": runs}, indent=1) + "\n")
print(out)
PYTHON
    bash "$0" valid-losses-rows
    ;;
valid-losses-rows)
    # name, for each run of valid_losses.json, its result row (run id, commits, config) in
    # raw/inflection.jsonl, matched by the run's checkpoint folder
    "$PY" - "$SURROGATE_WORK/$RUNS" "$HERE" <<'PYTHON'
import json, sys
from pathlib import Path
root, here = Path(sys.argv[1]), Path(sys.argv[2])
target = here / "valid_losses.json"
losses = json.loads(target.read_text())
rows = [json.loads(line) for line in (here / "raw" / "inflection.jsonl").open()]
linked = {}
for run in losses["runs"]:
    folder = str(root / run) + "/"
    [row] = {r["run_id"]: r for r in rows if r["train"]["checkpoint"].startswith(folder)}.values()
    linked[run] = {
        "run_id": row["run_id"],
        "attention": row["mapping"],
        "seed": row["seed"],
        "config_sha256": row.get("config_sha256"),
        "trained_at": row["train"]["started"]["git_commit"],
        "git_commit": row["git_commit"],
    }
losses["rows"] = linked
target.write_text(json.dumps(losses, indent=1) + "\n")
print(target, linked)
PYTHON
    ;;
*)
    echo "usage: $0 table MAPPING|gamma1|surrogate MAPPING|epochs MAPPING|measure-epochs|measure-surrogate|valid-losses|valid-losses-rows" >&2
    exit 2
    ;;
esac
