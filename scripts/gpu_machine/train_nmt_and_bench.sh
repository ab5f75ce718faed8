#!/bin/bash
# the work folder beside the checkout (runs from the repository root)
export GPU_WORK=${GPU_WORK:-$(dirname "$PWD")/gpu-work}
# One call on a lent GPU machine (issue #30), prepared by prepare_carry.sh: fairseq on CUDA.
#   1. setup: the carried wheels, fairseq-fixed from its sdist (Cython helpers only), its
#      console scripts, the prepared Multi30k, the checkout's commit, regattn._C (background)
#   2. the NMT table's six mappings, seed 1, trained on the GPU side by side until TRAIN_UNTIL
#   3. their rows, logs and curves packed under $OUT
#   4. bench_model.py --device cuda on a quiet GPU (the trainings stopped), into $OUT
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
TRAIN_UNTIL=${TRAIN_UNTIL:-420}
BENCH_S=${BENCH_S:-95}
RES=/tmp/gpu-results
mkdir -p $RES/logs
exec > >(tee -a $OUT/device.log) 2>&1
source .gpu/setup.sh

el train
# γ as the CPU table chose it on 3-epoch runs (results/nmt.md), 4 where it had not chosen yet
declare -A GAMMA=([softmax]=4 [sparsemax]=16 [entmax15]=16 [oscarmax]=4 [fusedmax]=4 [sq_pnorm_max]=4)
nvidia-smi dmon -s um -d 10 >$RES/logs/dmon.log 2>&1 &
DMON=$!
for m in softmax sparsemax entmax15 oscarmax fusedmax sq_pnorm_max; do
  # its own process group (setsid), so that only these trainings are stopped below
  setsid python3 scripts/reproduce.py nmt --scale small --mappings $m --seeds 1 --gamma ${GAMMA[$m]} \
    --data-dir $DATA_ROOT --work-dir $GPU_WORK --results-dir $RES --gpus ${GPUS:-1} \
    --threads 2 $ALLOW >$RES/logs/$m.log 2>&1 &
  PIDS+=($!)
done
while [ $(($(date +%s) - T0)) -lt $TRAIN_UNTIL ] && [ "$(running)" -gt 0 ]; do
  sleep 30
  el progress
  for m in softmax sparsemax entmax15 oscarmax fusedmax sq_pnorm_max; do
    echo "$m: $(grep -h -E '\][[](train_inner|train|valid)\]' $GPU_WORK/checkpoints/nmt/multi30k_en_de/small-offline/$m/*/seed1/train.log 2>/dev/null | tail -1 | cut -c1-190)"
  done
done
stop_runs
kill $DMON 2>/dev/null
el trainings stopped
for m in softmax sparsemax entmax15 oscarmax fusedmax sq_pnorm_max; do echo "--- $m"; grep -v -E "^(DEBUG|INFO)" $RES/logs/$m.log | tail -4; done

el pack
cp /tmp/fs-build.log /tmp/c-build.log $RES/logs/ 2>/dev/null
tar czf $OUT/gpu-results.tgz -C /tmp gpu-results
(cd $GPU_WORK && tar czf $OUT/gpu-runs.tgz --exclude='*.pt' --exclude=wandb checkpoints)
wait $CBUILD
el bench
# the committed runs go along, so the returned model_gpu.json holds them and this one
cp results/bench/model_gpu.json $OUT/ 2>/dev/null
timeout $BENCH_S python3 -m regattn_bench model --device cuda --steps 5 --repeats 3 --out-dir $OUT >$OUT/bench.log 2>&1
echo "bench rc=$?"
grep -v -E "^(DEBUG|INFO)" $OUT/bench.log | tail -8

ls -la $OUT
el end
