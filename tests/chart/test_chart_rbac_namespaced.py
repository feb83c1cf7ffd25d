"""The chart's RBAC with `watch.namespaces` set (the operator watches only those namespaces) against what the
operator really calls, on a real kube-apiserver that enforces it: rbac_audit.py says how."""

from __future__ import annotations

from pathlib import Path

from rbac_audit import NAMESPACED, assert_chart_rbac_allows_every_call_and_grants_nothing_unused


async def test_chart_rbac_allows_every_call_and_grants_nothing_unused(tmp_path: Path) -> None:
    await assert_chart_rbac_allows_every_call_and_grants_nothing_unused(NAMESPACED, tmp_path)
