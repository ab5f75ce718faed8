#!/bin/bash
# One call on a lent GPU machine, prepared by prepare_carry.sh: the Triton kernels' CUDA tests
# (tests/mappings/test_triton_cuda.py, with the cvxpy/Clarabel oracles, and the fused
# attention's tests/attention/test_attention_cuda.py, and the Hugging Face backends' fused path
# against their row-wise path, tests/integrations/test_transformers_fused_cuda.py, which skips
# itself where transformers is not carried); then, on the quiet GPU, the row kernels against
# torch.softmax and AdaSplash (`python -m regattn_bench mappings --device cuda`, one pass; its
# log keeps each result as it lands, should the step time out), the fused attention against
# the row-wise path, sdpa flash and AdaSplash when its wheel is carried (`... attention`), and,
# only when BENCH_S is set, whole training steps (`... model --device cuda`). Outputs under
# $OUT. Each step has its own timeout (TEST_S, MAPPINGS_S, ATTENTION_S, BENCH_S; 180 + 120 +
# 210 s and the setup: one 10-minute call). The attention bench runs 1k, 4k, 8k and 16k
# tokens, one pass, and starts no shape after ATTENTION_S - 60 s (its record names the shapes
# left out).
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
exec > >(tee -a $OUT/device2.log) 2>&1
source .gpu/setup.sh
el tests
timeout ${TEST_S:-180} python3 -m pytest -q -p no:cacheprovider -n 8 -o addopts="" tests/mappings/test_triton_cuda.py tests/attention/test_attention_cuda.py tests/integrations/test_transformers_fused_cuda.py -W ignore::RuntimeWarning -rfs >$OUT/tests_cuda.log 2>&1
echo "tests rc=$?"; tail -12 $OUT/tests_cuda.log
wait $CBUILD
el mappings bench
# the committed runs go along, so the returned mappings_gpu.json holds them and this one
cp results/bench/mappings_gpu.json $OUT/ 2>/dev/null
timeout ${MAPPINGS_S:-120} python3 -m regattn_bench mappings --device cuda --repeats 1 --min-run-time 0.1 \
  --out-dir $OUT >$OUT/bench_mappings.log 2>&1
echo "mappings bench rc=$?"; head -3 $OUT/mappings_gpu.md 2>/dev/null
if [ "${BENCH_S:-0}" -gt 0 ]; then
  el model bench
  cp results/bench/model_gpu.json $OUT/ 2>/dev/null
  timeout $BENCH_S python3 -m regattn_bench model --device cuda --models "LSTM summarizer" Transformer --steps 5 --repeats 3 --out-dir $OUT >$OUT/bench2.log 2>&1
  echo "model bench rc=$?"; cat $OUT/model_gpu.md 2>/dev/null | head -3
fi
el attention bench
# the committed runs go along here too (attention_gpu.json keeps every run)
cp results/bench/attention_gpu.json $OUT/ 2>/dev/null
timeout ${ATTENTION_S:-210} python3 -m regattn_bench attention --lengths 1024,4096,8192,16384 --repeats 1 \
  --budget-s $((${ATTENTION_S:-210} - 60)) --out-dir $OUT >$OUT/bench_attention.log 2>&1
echo "attention bench rc=$?"; tail -3 $OUT/bench_attention.log
ls -la $OUT
el end
