#!/bin/bash
# the work folder beside the checkout (runs from the repository root)
export GPU_WORK=${GPU_WORK:-$(dirname "$PWD")/gpu-work}
# One call on a lent GPU machine, prepared by prepare_carry.sh: the γ grids' selection runs
# (`reproduce.py --gamma auto --gamma-select-epochs 3 --gamma-select-only`, seed 1) of the
# tables and mappings in GRIDS (`table:mapping,mapping` for the table's gamma_grid, or
# `table:mapping@γ,γ` for those γ: the extension of a grid whose edge was chosen), every
# (table, mapping, γ) its own process, all side by side on
# the GPU, until GRID_UNTIL seconds. Their logs and configs (no checkpoints) come back in
# $OUT/gamma-grids.tgz; copied into WORK_DIR here, a table run reads a finished one's
# validation losses instead of training it (scripts/gpu_machine/README.md).
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
GRID_UNTIL=${GRID_UNTIL:-480}
GRIDS=${GRIDS:-"nmt:fusedmax,sq_pnorm_max table2:sparsemax,fusedmax,oscarmax,sq_pnorm_max inflection:sparsemax,entmax15"}
LOGS=/tmp/grid-logs
mkdir -p $LOGS
exec > >(tee -a $OUT/device-grids.log) 2>&1
source .gpu/setup.sh

el grids
nvidia-smi dmon -s um -d 10 >$LOGS/dmon.log 2>&1 &
DMON=$!
for job in $GRIDS; do
  table=${job%%:*}
  mappings=${job#*:}
  mappings=${mappings%%@*}
  if [[ $job == *@* ]]; then
    grid=$(echo ${job#*@} | tr , ' ')
  else
    grid=$(python3 -c "from regattn_fairseq.experiments.core.config import load_config; print(*load_config('reproduce', '$table').gamma_grid)" 2>&1 | tail -1)
  fi
  [[ $grid =~ ^[0-9.\ ]+$ ]] || { echo "GRIDS: no γ grid for $table: $grid"; exit 1; }
  for mapping in $(echo $mappings | tr , ' '); do
    for gamma in $grid; do
      # its own process group (setsid), so that only these trainings are stopped below
      setsid python3 scripts/reproduce.py $table --scale small --mappings $mapping --seeds 1 \
        --gamma auto --gamma-grid $gamma --gamma-seeds first --gamma-select-epochs 3 \
        --gamma-select-only --data-dir $DATA_ROOT --work-dir $GPU_WORK --gpus ${GPUS:-1} \
        --threads 1 $ALLOW >$LOGS/$table-$mapping-gamma$gamma.log 2>&1 &
      PIDS+=($!)
    done
  done
done
echo "${#PIDS[@]} selection runs started"
while [ $(($(date +%s) - T0)) -lt $GRID_UNTIL ] && [ "$(running)" -gt 0 ]; do
  sleep 30
  el "progress: $(running) running; finished: $(grep -l 'γ = ' $LOGS/*.log 2>/dev/null | wc -l)"
done
stop_runs
kill $DMON 2>/dev/null
el stopped
for f in $LOGS/*-gamma*.log; do echo "$(basename $f): $(grep -h '\[gamma\]' $f | tail -1 | cut -c1-150)"; grep -h -E "Error|error:" $f | tail -2; done
cp /tmp/fs-build.log $LOGS/ 2>/dev/null
(cd $GPU_WORK && tar czf $OUT/gamma-grids.tgz --exclude='*.pt' --exclude=wandb checkpoints -C $LOGS/.. $(basename $LOGS))
ls -la $OUT
el end
