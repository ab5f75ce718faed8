# Sourced first by every call on a lent GPU machine (train_nmt_and_bench.sh,
# the work folder beside the checkout (runs from the repository root)
export GPU_WORK=${GPU_WORK:-$(dirname "$PWD")/gpu-work}
# cuda_tests_and_bench.sh, gamma_grids.sh), from the repository's root, prepared by
# prepare_carry.sh. The machine has Python 3.12, torch, triton, numpy and Cython, but no
# network and none of fairseq, hydra, omegaconf or wandb:
#   - the carried wheels, fairseq-fixed from its sdist (its Cython helpers only), fairseq's
#     console scripts beside the interpreter;
#   - the prepared data at the paths their stamps name (so it is reused, not rebuilt);
#   - the checkout's commit (so rows and runs are not marked dirty);
#   - regattn._C, built in the background (CBUILD: its process).
# Defines el, PIDS, running and stop_runs. Sets REPO, COMMIT, DATA_ROOT, MISSING (files the prepared data names that are not here), ALLOW (--allow-dirty where the tree is not the commit),
# CBUILD, PYTHONPATH and el (prints a step with the seconds since T0).
REPO=$PWD
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 WANDB_MODE=disabled
T0=${T0:-$(date +%s)}
el() { echo "== $* at $(($(date +%s) - T0))s"; }
# the side-by-side processes a call starts, each in its own process group (setsid): PIDS
PIDS=()
# how many of them are still running
running() { local n=0 p; for p in "${PIDS[@]}"; do kill -0 $p 2>/dev/null && n=$((n + 1)); done; echo $n; }
# stop them (their groups only, so that nothing else on the machine is touched)
stop_runs() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM -- -$p 2>/dev/null; done
  sleep 3
  for p in "${PIDS[@]}"; do kill -KILL -- -$p 2>/dev/null; done
}
COMMIT=$(cat .gpu/commit)
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
# the compiled CPU kernels (decoding, --attention-device cpu in the bench)
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
# the prepared data and the raw files their stamps name, at the paths the stamps name
DATA_ROOT=$(cat .gpu/data_root)
mkdir -p $DATA_ROOT $GPU_WORK/data
[ -n "$SIMULATION" ] || cp -r .gpu/data/. $DATA_ROOT/
cp -r .gpu/work/. $GPU_WORK/data/
# the prepared data's manifests name the folder it was prepared in (its references, for
# scoring): that path, here, leads to the copy
PREP=$(cat .gpu/prep_root 2>/dev/null)
if [ -n "$PREP" ] && [ ! -e "$PREP" ]; then mkdir -p "$(dirname $PREP)" && ln -s $GPU_WORK/data "$PREP"; fi
# every file a manifest names must be here before any training starts, not at scoring time
MISSING=$(python3 - <<'PY'
import json, os, pathlib
def paths(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from paths(v)
    elif isinstance(value, list):
        for v in value:
            yield from paths(v)
    elif isinstance(value, str) and value.startswith("/") and "\n" not in value and " " not in value:
        yield value
for stamp in pathlib.Path(os.environ["GPU_WORK"], "data").glob("*/*/stamp.json"):
    for path in paths(json.loads(stamp.read_text()).get("manifest", {})):
        if not pathlib.Path(path).exists():
            print(stamp.parent.name, path)
PY
)
[ -z "$MISSING" ] || { echo "SETUP: files the prepared data names are missing:"; echo "$MISSING" | head -5; }
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
