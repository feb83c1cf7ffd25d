"""The chart's RBAC with its default values (the operator watches every namespace) against what the operator
really calls, on a real kube-apiserver that enforces it: rbac_audit.py says how."""

from __future__ import annotations

from pathlib import Path

from rbac_audit import CLUSTER_WIDE, assert_chart_rbac_allows_every_call_and_grants_nothing_unused


async def test_chart_rbac_allows_every_call_and_grants_nothing_unused(tmp_path: Path) -> None:
    await assert_chart_rbac_allows_every_call_and_grants_nothing_unused(CLUSTER_WIDE, tmp_path)
