#!/bin/bash
# One call on a lent GPU machine (issue #30), prepared by prepare_carry.sh: fairseq on CUDA.
#   1. setup: the carried wheels, fairseq-fixed from its sdist (Cython helpers only), its
#      console scripts, the prepared Multi30k, the checkout's commit, regattn._C (background)
#   2. the NMT table's six mappings, seed 1, trained on the GPU side by side until TRAIN_UNTIL
#   3. their rows, logs and curves packed under $OUT
#   4. bench_model.py --device cuda on a quiet GPU (the trainings stopped), into $OUT
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 WANDB_MODE=disabled
T0=$(date +%s)
el() { echo "== $* at $(($(date +%s) - T0))s"; }
TRAIN_UNTIL=${TRAIN_UNTIL:-420}
BENCH_S=${BENCH_S:-95}
COMMIT=$(cat .gpu/commit)
RES=/tmp/gpu-results
mkdir -p $RES/logs
exec > >(tee -a $OUT/device.log) 2>&1

el setup
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sys, torch, triton, numpy; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__, numpy.__version__, torch.cuda.get_device_name())"
echo "cores $(nproc)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || echo "SETUP: wheels failed"
mkdir -p /tmp/fs/fairseq_fixed-0.12.3.1.dist-info
tar xzf .gpu/fairseq_fixed-0.12.3.1.tar.gz -C /tmp/fs --strip-components=1 \
  fairseq_fixed-0.12.3.1/fairseq fairseq_fixed-0.12.3.1/fairseq_cli
printf 'Metadata-Version: 2.1\nName: fairseq-fixed\nVersion: 0.12.3.1\n' \
  >/tmp/fs/fairseq_fixed-0.12.3.1.dist-info/METADATA
(cd /tmp/fs && python3 $REPO/.gpu/build_fairseq.py -q build_ext --inplace -j 16 >/tmp/fs-build.log 2>&1) ||
  { echo "SETUP: fairseq build failed"; tail -20 /tmp/fs-build.log; }
export PYTHONPATH=/tmp/site:/tmp/fs:$REPO
# the compiled CPU kernels (decoding runs on the CPU; --attention-device cpu in the bench)
(python3 setup.py -q build_ext --inplace >/tmp/c-build.log 2>&1; echo "regattn._C build rc=$? at $(($(date +%s) - T0))s") &
CBUILD=$!
# fairseq's console scripts beside the interpreter (tools.tool_path looks only there)
PYEXE=$(python3 -c "import sys; print(sys.executable)")
for pair in hydra_train:fairseq-hydra-train generate:fairseq-generate preprocess:fairseq-preprocess \
  validate:fairseq-validate train:fairseq-train; do
  printf '#!%s\nfrom fairseq_cli.%s import cli_main\ncli_main()\n' "$PYEXE" "${pair%%:*}" \
    >"$(dirname $PYEXE)/${pair##*:}"
  chmod +x "$(dirname $PYEXE)/${pair##*:}"
done
# the prepared data, at the paths its stamp names (so it is reused, not rebuilt)
DATA_ROOT=$(cat .gpu/data_root)
mkdir -p $DATA_ROOT /work/gpu-work/data/multi30k
[ -n "$SIMULATION" ] || cp -r .gpu/data/multi30k $DATA_ROOT/
cp -r .gpu/work/multi30k/small-offline /work/gpu-work/data/multi30k/
# the commit: this call's .git may be older than the tree, or absent; the bundle holds HEAD
git config --global --add safe.directory '*'
if [ "$(git rev-parse HEAD 2>/dev/null)" != "$COMMIT" ]; then
  echo "git HEAD was $(git rev-parse HEAD 2>&1 | head -1)"
  git rev-parse --git-dir >/dev/null 2>&1 || git init -q
  git fetch -q .gpu/head.bundle HEAD 2>&1 | tail -2
fi
printf '/.gpu/\n/.whl/\n' >>.git/info/exclude
git reset -q "$COMMIT" 2>&1 | tail -2
DIRTY=$(python3 -c "from regattn_bench.provenance import git_state; s = git_state(); print(s['git_commit'], s['git_dirty'])" 2>&1 | tail -1)
echo "git state: $DIRTY"
ALLOW=""
[ "$DIRTY" = "$COMMIT False" ] || { ALLOW="--allow-dirty"; git status --porcelain | head; }
python3 -c "import fairseq, hydra, omegaconf, regattn, regattn_fairseq; from fairseq.data import data_utils_fast; print('imports ok: fairseq', fairseq.__version__, fairseq.__file__)" 2>&1 | grep -v -E "^(DEBUG|INFO)" | tail -3

el train
# γ as the CPU table chose it on 3-epoch runs (results/nmt.md), 4 where it had not chosen yet
declare -A GAMMA=([softmax]=4 [sparsemax]=16 [entmax15]=16 [oscarmax]=4 [fusedmax]=4 [sq_pnorm_max]=4)
nvidia-smi dmon -s um -d 10 >$RES/logs/dmon.log 2>&1 &
DMON=$!
PIDS=()
for m in softmax sparsemax entmax15 oscarmax fusedmax sq_pnorm_max; do
  # its own process group (setsid), so that only these trainings are stopped below
  setsid python3 scripts/reproduce.py nmt --scale small --mappings $m --seeds 1 --gamma ${GAMMA[$m]} \
    --data-dir $DATA_ROOT --work-dir /work/gpu-work --results-dir $RES --gpus ${GPUS:-1} \
    --threads 2 $ALLOW >$RES/logs/$m.log 2>&1 &
  PIDS+=($!)
done
running() { for p in "${PIDS[@]}"; do kill -0 $p 2>/dev/null && return 0; done; return 1; }
while [ $(($(date +%s) - T0)) -lt $TRAIN_UNTIL ] && running; do
  sleep 30
  el progress
  for m in softmax sparsemax entmax15 oscarmax fusedmax sq_pnorm_max; do
    echo "$m: $(grep -h -E '\][[](train_inner|train|valid)\]' /work/gpu-work/checkpoints/nmt/multi30k_en_de/small-offline/$m/*/seed1/train.log 2>/dev/null | tail -1 | cut -c1-190)"
  done
done
for p in "${PIDS[@]}"; do kill -TERM -- -$p 2>/dev/null; done
sleep 3
for p in "${PIDS[@]}"; do kill -KILL -- -$p 2>/dev/null; done
kill $DMON 2>/dev/null
el trainings stopped
for m in softmax sparsemax entmax15 oscarmax fusedmax sq_pnorm_max; do echo "--- $m"; grep -v -E "^(DEBUG|INFO)" $RES/logs/$m.log | tail -4; done

el pack
cp /tmp/fs-build.log /tmp/c-build.log $RES/logs/ 2>/dev/null
tar czf $OUT/gpu-results.tgz -C /tmp gpu-results
(cd /work/gpu-work && tar czf $OUT/gpu-runs.tgz --exclude='*.pt' --exclude=wandb checkpoints)
wait $CBUILD
el bench
# the committed runs go along, so the returned model_gpu.json holds them and this one
cp results/bench/model_gpu.json $OUT/ 2>/dev/null
timeout $BENCH_S python3 bench/bench_model.py --device cuda --steps 5 --repeats 3 --out-dir $OUT >$OUT/bench.log 2>&1
echo "bench rc=$?"
grep -v -E "^(DEBUG|INFO)" $OUT/bench.log | tail -8

ls -la $OUT
el end
