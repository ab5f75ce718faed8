#!/bin/bash
# the work folder beside the checkout (runs from the repository root)
export GPU_WORK=${GPU_WORK:-$(dirname "$PWD")/gpu-work}
# One call on a lent GPU machine, prepared by prepare_carry.sh (TABLES=<table>,
# GRID_LOGS=<the CPU runs' WORK_DIR>): a table's converged runs, every (mapping, seed) of JOBS
# its own `reproduce.py` process, side by side on the GPU, until TRAIN_UNTIL seconds.
#   - γ: `--gamma auto --gamma-seeds 1 --gamma-select-epochs 3`, read from the γ grid's
#     selection logs carried in .gpu/grid-logs (trained earlier, here or on another GPU; the
#     edge rule's extensions included), so that no grid run is trained here and each seed
#     trains at the γ seed 1's grid chose, recorded as `first` records it;
#   - each run trains until early stopping, then decodes and scores: its rows go into the
#     checkout's results/raw/<table>.jsonl (under the rows lock), beside the committed rows;
#   - $OUT/table-results.tgz: results/raw (rows, item and attention sidecars) and the
#     table's figures; $OUT/table-runs.tgz: each run's train.log, started.json and composed
#     config (no checkpoints); $OUT/device-table.log: this log.
# Runs stopped by TRAIN_UNTIL leave no row; their logs come back all the same.
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
TABLE=${TABLE:?set TABLE, e.g. table2}
JOBS=${JOBS:?set JOBS, e.g. "softmax:1,2,3 sparsemax:1,2,3"}
TRAIN_UNTIL=${TRAIN_UNTIL:-540}
LOGS=/tmp/table-logs
mkdir -p $LOGS
exec > >(tee -a $OUT/device-table.log) 2>&1
source .gpu/setup.sh
[ -z "$MISSING" ] || { echo "stopped before training: the runs could not be scored"; exit 1; }

el train
mkdir -p $GPU_WORK/checkpoints
cp -rn .gpu/grid-logs/. $GPU_WORK/checkpoints/
nvidia-smi dmon -s um -d 10 >$LOGS/dmon.log 2>&1 &
DMON=$!
for job in $JOBS; do
  mapping=${job%%:*}
  for seed in $(echo ${job#*:} | tr , ' '); do
    # its own process group (setsid), so that only these runs are stopped below
    setsid python3 scripts/reproduce.py $TABLE --scale small --mappings $mapping --seeds $seed \
      --gamma auto --gamma-seeds 1 --gamma-select-epochs 3 --data-dir $DATA_ROOT \
      --work-dir $GPU_WORK --gpus ${GPUS:-1} --threads 1 $ALLOW \
      >$LOGS/$TABLE-$mapping-seed$seed.log 2>&1 &
    PIDS+=($!)
  done
done
echo "${#PIDS[@]} runs started"
while [ $(($(date +%s) - T0)) -lt $TRAIN_UNTIL ] && [ "$(running)" -gt 0 ]; do
  sleep 20
  epochs=$(for f in $(find $GPU_WORK/checkpoints/$TABLE -path '*seed[0-9]/train.log'); do
    grep -c 'end of epoch' $f; done | sort -n | tr '\n' ' ')
  el "progress: $(running) running; epochs per run: $epochs; scored: $(grep -l '\[score\]' $LOGS/*.log 2>/dev/null | wc -l)"
done
stop_runs
kill $DMON 2>/dev/null
el stopped
for f in $LOGS/$TABLE-*.log; do
  echo "--- $(basename $f): $(grep -h -E '^\[(gamma|train|score)\]' $f | tail -3 | cut -c1-160 | tr '\n' ' ')"
  grep -h -E "Error|error:" $f | tail -2
done
el pack
tar czf $OUT/table-results.tgz results/raw results/figures results/$TABLE.md
(cd $GPU_WORK && find checkpoints/$TABLE -path '*seed[0-9]/*' \( -name train.log -o -name started.json \
  -o -name config.yaml \) ! -path '*select*' -print0 | tar czf $OUT/table-runs.tgz --null -T - -C $LOGS/.. $(basename $LOGS))
ls -la $OUT
el end
