"""A deleted SpeculativeDeployment leaves no series behind (docs/operator.md), counters included."""

from __future__ import annotations

from prometheus_client import generate_latest

from specpilot.controller.metrics import OperatorMetrics
from specpilot.controller.tuning.metrics import TunerMetrics


def test_every_per_object_series_goes_with_the_object() -> None:
    ops = OperatorMetrics()
    tuner = TunerMetrics(ops.registry)
    for name in ("gone", "kept"):
        ops.reconciles.labels("ns", name, "applied").inc()
        ops.errors.labels("ns", name, "KubeError").inc()
        ops.n.labels("ns", name, "stable").set(3)
        ops.ready.labels("ns", name).set(1)
        tuner.decisions.labels("ns", name, "hold").inc()
        tuner.last.labels("ns", name).set(1.0)
    ops.forget("ns", "gone")
    tuner.drop("ns", "gone")
    text = generate_latest(ops.registry).decode()
    assert 'deployment="gone"' not in text
    assert text.count('deployment="kept"') >= 6
