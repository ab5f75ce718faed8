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

.PHONY: help setup test test-slow bench clean-venv

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv with pinned torch, fairseq-fixed and this package (idempotent)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q $(TORCH_PIN)
	$(PIP) install -q -r requirements.txt $(TORCH_PIN)
	@mkdir -p $(WHEEL_CACHE)
	@ls $(WHEEL_CACHE)/fairseq_fixed-0.12.3.1-*.whl >/dev/null 2>&1 || \
	  { echo "building $(FAIRSEQ_PIN) (about 4 minutes, cached in $(WHEEL_CACHE))"; \
	    $(PIP) wheel -q --no-build-isolation --no-deps $(FAIRSEQ_PIN) -w $(WHEEL_CACHE); }
	$(PIP) install -q --no-deps $(WHEEL_CACHE)/fairseq_fixed-0.12.3.1-*.whl
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PY) -c "import torch, fairseq, regattn_fairseq.mappings; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	@touch $(STAMP)

test: setup ## run the test suite (the CI command)
	$(PY) -m pytest -q

test-slow: setup ## run the slow end-to-end tests too
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup ## time every mapping against torch.softmax and the reference libraries
	$(PY) bench/bench_mappings.py

clean-venv: ## remove .venv (the cached fairseq wheel stays)
	rm -rf $(VENV)
