"""The plugin's drafted-per-position counter moved from `vllm:` to `specpilot:`: for one release the dashboards'
and alerts' PromQL (promql.py) read a pod exporting either name, checked by promtool on input series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specpilot.observability import promql
from specpilot.observability.promql import counter
from specpilot_runtime import vllm_metrics as vm

PROMTOOL = shutil.which("promtool")
(OLD, NEW), = vm.DEPRECATED_NAMES.items()
POS = vm.LABEL_POSITION


def _series(metric: str, values: str, deployment: str, position: str | None = None) -> dict[str, str]:
    labels = f'deployment="{deployment}", pod="{deployment}-0"' + (f', {POS}="{position}"' if position else "")
    return {"series": f"{metric}{{{labels}}}", "values": values}


def test_both_names_are_read_by_the_acceptance_queries(tmp_path: Path) -> None:
    if PROMTOOL is None:
        pytest.fail("promtool is missing: run `make tools`")
    assert NEW == vm.SPEC_DRAFTED_PER_POS and NEW.startswith("specpilot:") and OLD.startswith("vllm:")
    inputs = []
    # Two pods drafting 10 tokens/s at position 0 and 5/s at position 1, accepting half: one exports the new
    # name, the other (the previous plugin) the deprecated one.
    for deployment, drafted in (("new", NEW), ("old", OLD)):
        inputs += [_series(counter(vm.SPEC_DRAFTS), "0+600x10", deployment),
                   _series(counter(vm.SPEC_ACCEPTED_TOKENS), "0+450x10", deployment),
                   _series(counter(vm.SPEC_DRAFT_TOKENS), "0+1200x10", deployment),
                   _series(counter(drafted), "0+600x10", deployment, "0"),
                   _series(counter(drafted), "0+300x10", deployment, "1"),
                   _series(counter(vm.SPEC_ACCEPTED_PER_POS), "0+300x10", deployment, "0"),
                   _series(counter(vm.SPEC_ACCEPTED_PER_POS), "0+150x10", deployment, "1")]
    by = "deployment"
    expected_rate = [{"labels": f'{{deployment="{d}"}}', "value": 0.5} for d in ("new", "old")]
    expected_pos = [{"labels": f'{{deployment="{d}", {POS}="{p}"}}', "value": 0.5} for d in ("new", "old")
                    for p in ("0", "1")]
    # Without either name the queries fall back to all drafts: position 1 would read 0.25, the rate 0.375.
    tests = {"rule_files": [], "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": [
        {"expr": f"round({promql.acceptance_rate('', by, '5m')}, 0.001)", "eval_time": "8m",
         "exp_samples": expected_rate},
        {"expr": f"round({promql.survival_by_position('', by, '5m')}, 0.001)", "eval_time": "8m",
         "exp_samples": expected_pos},
    ]}]}
    path = tmp_path / "renamed.test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
