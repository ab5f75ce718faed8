#!/bin/bash
# Fill .gpu/ and .whl/ (both ignored through .git/info/exclude) with what a lent GPU machine
# needs to train through fairseq: it has Python 3.12, torch, triton, numpy and Cython, but no
# network, no fairseq, hydra, omegaconf or wandb. Run here, in the repository's root, after
# committing: the machine records the commit it is given (.gpu/commit), checked against the
# bundle of HEAD it carries (.gpu/head.bundle), so its rows are not marked dirty.
#
#   PY=<that python> bash scripts/gpu_machine/prepare_carry.sh
#   then the device tool: run "bash .gpu/<call>.sh" (train_nmt_and_bench, cuda_tests_and_bench,
#   gamma_grids, train_table), carry [".gpu", ".whl"]
set -euo pipefail
# the Python of the suite's environment (make setup's), e.g. PY=<its bin>/python
PY=${PY:?set PY to the Python interpreter of the suite environment}
DATA_DIR=${REGATTN_DATA_DIR:-$(cd .. && pwd)/shared/data}
grep -qx '/.gpu/' .git/info/exclude || echo /.gpu/ >>.git/info/exclude
grep -qx '/.whl/' .git/info/exclude || echo /.whl/ >>.git/info/exclude
rm -rf .gpu .whl && mkdir -p .gpu/data .gpu/work .whl
# pure-Python or cp312 wheels of what fairseq and the suite import and the machine lacks
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3 sacremoses==0.2.0 subword-nmt==0.3.8
$PY -m pip wheel -q --no-deps antlr4-python3-runtime==4.9.3 -w .whl # an sdist only on PyPI
# the CUDA tests' oracles (cvxpy with Clarabel; scs, osqp, highspy and sparsediffpy, 60 MB, are
# not imported for it) and the entmax package the benchmarks compare with
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl cvxpy==1.9.3 clarabel==0.11.1 qdldl==0.1.9.post1 cffi==2.1.1 pycparser==3.12 entmax==1.3
# fairseq-fixed's sdist; the machine compiles only its Cython helpers (build_fairseq.py)
$PY -m pip download -q --no-deps --no-build-isolation --no-binary :all: fairseq-fixed==0.12.3.1 -d .gpu
cp scripts/gpu_machine/build_fairseq.py scripts/gpu_machine/*.sh .gpu/
# the small-scale data of TABLES, prepared, and the raw files their stamps name (the machine
# recreates $DATA_DIR, which the stamps name, and puts them there)
$PY scripts/gpu_machine/prepare_table_data.py --data-dir "$DATA_DIR" --work-dir .gpu/prep \
  --inputs-to .gpu/data ${TABLES:-nmt table2 inflection}
echo "$DATA_DIR" >.gpu/data_root
# the γ grids' selection logs of TABLES from a CPU work folder (train_table.sh reads them
# instead of training the grid): GRID_LOGS=<that WORK_DIR>
if [ -n "${GRID_LOGS:-}" ]; then
  mkdir -p .gpu/grid-logs
  (cd "$GRID_LOGS/checkpoints" && find ${TABLES:-nmt table2 inflection} -path '*-select*epochs/train.log' -print0 |
    tar cf - --null -T -) | tar xf - -C .gpu/grid-logs
fi
mv .gpu/prep/data/* .gpu/work/ && rm -rf .gpu/prep
# the manifests name that folder (setup.sh links it to the copy on the machine)
echo "$PWD/.gpu/prep/data" >.gpu/prep_root
git rev-parse HEAD >.gpu/commit
git bundle create -q .gpu/head.bundle HEAD
du -sh .gpu .whl
