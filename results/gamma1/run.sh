#!/usr/bin/env bash
# The runs behind results/gamma1/ (issue #17 item 7), in the order they ran, each from a clean
# checkout of branch gamma1-study (SCALE=small refuses a dirty tree). One thread per run.
#   bash results/gamma1/run.sh train-sparsemax   # B: sparsemax, γ = 1, 8 epochs
#   bash results/gamma1/run.sh train-softmax     # A: softmax, γ = 1, 8 epochs
#   bash results/gamma1/run.sh train-surrogate   # C: sparsemax forward, softmax backward, γ = 1
#   bash results/gamma1/run.sh train-gamma16     # D: sparsemax, γ = 16, 8 epochs
#   bash results/gamma1/run.sh measure NAME RUN_DIR... [--bleu test2016]
#   bash results/gamma1/run.sh figure OUT.png GRADIENTS.json...
# PY is the suite's python (default: this checkout's .venv; give another checkout's venv when
# this one has none); PYTHONPATH makes this checkout's code win, in fairseq's subprocesses too.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
PY=${PY:-.venv/bin/python}
WORK=${WORK:-$PWD/work}
RUNS=$WORK/checkpoints/nmt/multi30k_en_de/small-offline
EPOCHS=${EPOCHS:-8}
common=(nmt --scale small --work-dir "$WORK" --results-dir results/gamma1
    --override "optimization.max_epoch=$EPOCHS" --override checkpoint.no_epoch_checkpoints=false)

case "${1:-}" in
train-sparsemax) "$PY" scripts/reproduce.py "${common[@]}" --mappings sparsemax --gamma 1 ;;
train-softmax) "$PY" scripts/reproduce.py "${common[@]}" --mappings softmax --gamma 1 ;;
# γ given as an override (not --gamma): the run folder is then sparsemax/seed1, apart from
# run B's sparsemax/gamma1.0/seed1
train-surrogate)
    "$PY" scripts/reproduce.py "${common[@]}" --mappings sparsemax \
        --override model.attention_gamma=1.0 --override +model.attention_grad_surrogate=softmax
    ;;
train-gamma16) "$PY" scripts/reproduce.py "${common[@]}" --mappings sparsemax --gamma 16 ;;
measure)
    name=$2
    shift 2
    "$PY" -m regattn_fairseq.experiments.attention_gradients "$@" \
        --out "results/gamma1/gradients_$name.json" --init --max-sentences 400
    ;;
# one figure of the runs of several measure outputs (the JSON files named, in order)
figure)
    out=$2
    shift 2
    "$PY" - "$out" "$@" <<'PY'
import json, sys
from pathlib import Path
from regattn_fairseq.experiments.attention_gradients import plot_report
runs = [run for name in sys.argv[2:] for run in json.loads(Path(name).read_text())["runs"]]
print(plot_report({"runs": runs}, Path(sys.argv[1])))
PY
    ;;
*)
    echo "usage: $0 train-sparsemax|train-softmax|train-surrogate|train-gamma16|measure NAME RUN_DIR..." >&2
    echo "run folders: $RUNS/{sparsemax/gamma1.0,softmax/gamma1.0,sparsemax,sparsemax/gamma16.0}/seed1" >&2
    exit 2
    ;;
esac
