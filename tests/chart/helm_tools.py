"""The chart under test and the real helm binary that `make tools` installs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specpilot"
HELM = ROOT / ".tools" / "bin" / "helm"
KUBECTL = ROOT / ".tools" / "bin" / "kubectl"
RELEASE = "specpilot"
NAMESPACE = "specpilot-system"
# Kinds whose schemas come from CRDs no Kubernetes release bundles (the Prometheus Operator's).
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PodMonitor"),
             ("monitoring.coreos.com/v1", "PrometheusRule")}


def helm_template(*args: str) -> str:
    """`helm template` of the chart as release RELEASE in NAMESPACE; raises with helm's message."""
    proc = subprocess.run([str(HELM), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"helm template {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def render(*args: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(helm_template(*args)) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]
