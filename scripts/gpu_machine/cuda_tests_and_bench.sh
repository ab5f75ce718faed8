#!/bin/bash
# One call on a lent GPU machine, prepared by prepare_carry.sh: the Triton kernels' CUDA tests
# (tests/mappings/test_triton_cuda.py, with the cvxpy/Clarabel oracles) and bench_model.py
# --device cuda on a quiet GPU. Outputs under $OUT.
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 WANDB_MODE=disabled
T0=$(date +%s)
el() { echo "== $* at $(($(date +%s) - T0))s"; }
COMMIT=$(cat .gpu/commit)
exec > >(tee -a $OUT/device2.log) 2>&1
el setup
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || echo "SETUP: wheels failed"
mkdir -p /tmp/fs/fairseq_fixed-0.12.3.1.dist-info
tar xzf .gpu/fairseq_fixed-0.12.3.1.tar.gz -C /tmp/fs --strip-components=1 fairseq_fixed-0.12.3.1/fairseq fairseq_fixed-0.12.3.1/fairseq_cli
printf 'Metadata-Version: 2.1\nName: fairseq-fixed\nVersion: 0.12.3.1\n' >/tmp/fs/fairseq_fixed-0.12.3.1.dist-info/METADATA
(cd /tmp/fs && python3 $REPO/.gpu/build_fairseq.py -q build_ext --inplace -j 16 >/tmp/fs-build.log 2>&1) || echo "SETUP: fairseq build failed"
export PYTHONPATH=/tmp/site:/tmp/fs:$REPO
(python3 setup.py -q build_ext --inplace >/tmp/c-build.log 2>&1; echo "regattn._C build rc=$? at $(($(date +%s) - T0))s") &
CBUILD=$!
git config --global --add safe.directory '*'
if [ "$(git rev-parse HEAD 2>/dev/null)" != "$COMMIT" ]; then
  git rev-parse --git-dir >/dev/null 2>&1 || git init -q
  git fetch -q .gpu/head.bundle HEAD 2>&1 | tail -2
fi
printf '/.gpu/\n/.whl/\n' >>.git/info/exclude
git reset -q "$COMMIT"
python3 -c "from regattn_bench.provenance import git_state; s = git_state(); print('git', s['git_commit'], 'dirty', s['git_dirty'])"
el tests
timeout ${TEST_S:-140} python3 -m pytest -q -p no:cacheprovider -n 8 -o addopts="" tests/mappings/test_triton_cuda.py -W ignore::RuntimeWarning -rfs >$OUT/tests_cuda.log 2>&1
echo "tests rc=$?"; tail -12 $OUT/tests_cuda.log
wait $CBUILD
el bench
# the committed runs go along, so the returned model_gpu.json holds them and this one
cp results/bench/model_gpu.json $OUT/ 2>/dev/null
timeout ${BENCH_S:-75} python3 bench/bench_model.py --device cuda --steps 5 --repeats 3 --out-dir $OUT >$OUT/bench2.log 2>&1
echo "bench rc=$?"; cat $OUT/model_gpu.md 2>/dev/null | head -3
ls -la $OUT
el end
