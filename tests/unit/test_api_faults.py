"""Retries under API faults: the reconcile Scheduler retries transient answers (409 included) until one
works, with capped jittered backoff; the sandbox's fault rules decide per request as configured."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from specpilot_harness.sandbox.faults import FaultInjector, parse

from specpilot.controller.handlers import Scheduler
from specpilot.controller.kube import Backoff, KubeError
from specpilot.controller.metrics import OperatorMetrics


class Flaky:
    """A Reconciler stand-in failing `failures` times with `status`, then succeeding."""

    def __init__(self, failures: int, status: int) -> None:
        self.failures, self.status, self.calls = failures, status, 0

    def reconcile(self, namespace: str, name: str) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise KubeError(self.status, "Injected", "fault")
        return "applied"

    def forget(self, namespace: str, name: str) -> None:
        return None


async def _settle(scheduler: Scheduler) -> None:
    for _ in range(400):
        await asyncio.sleep(0.005)
        if not scheduler._tasks:
            return


@pytest.mark.parametrize("status", [0, 409, 429, 503])
def test_transient_failures_are_retried_past_the_attempt_count(status: int) -> None:
    flaky = Flaky(failures=8, status=status)
    scheduler = Scheduler(flaky, OperatorMetrics(CollectorRegistry()), Backoff(attempts=5, base_s=0.001, cap_s=0.004))

    async def run() -> None:
        scheduler.request("ns", "sd")
        await _settle(scheduler)

    asyncio.run(run())
    assert flaky.calls == 9


def test_an_answer_that_will_not_change_is_not_retried() -> None:
    flaky = Flaky(failures=8, status=422)
    scheduler = Scheduler(flaky, OperatorMetrics(CollectorRegistry()), Backoff(attempts=5, base_s=0.001, cap_s=0.004))

    async def run() -> None:
        scheduler.request("ns", "sd")
        await _settle(scheduler)

    asyncio.run(run())
    assert flaky.calls == 1


def test_fault_rules_match_client_method_path_and_schedule() -> None:
    injector = FaultInjector(seed=1)
    injector.rules = parse([{"kind": "error", "status": 409, "methods": ["WRITE"], "path": "/namespaces/a/"},
                            {"kind": "error", "status": 429, "retry_after_s": 3, "path": "/leases"},
                            {"kind": "latency", "latency_s": 2.0, "path": "/namespaces/b/", "count": 1}])
    decide: Any = injector.decide
    assert decide("PATCH", "/api/v1/namespaces/a/configmaps/x", "specpilot/main", False, None).status == 409
    assert decide("GET", "/api/v1/namespaces/a/configmaps/x", "specpilot/main", False, None).status is None
    assert decide("PATCH", "/api/v1/namespaces/a/configmaps/x", "kubectl/v1.32", False, None).status is None
    got = decide("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l", "specpilot/x", False, None)
    assert (got.status, got.retry_after_s) == (429, 3)
    assert decide("GET", "/api/v1/namespaces/b/pods", "specpilot/x", False, None).delay_s == 2.0
    assert decide("GET", "/api/v1/namespaces/b/pods", "specpilot/x", False, None).delay_s == 0.0  # count 1
    assert [r.injected for r in injector.rules] == [1, 1, 1]
    assert len(injector.rules[0].times) == 1  # only requests matching every filter are counted


def test_gone_hits_only_watches_resuming_from_before_the_compaction() -> None:
    injector = FaultInjector()
    injector.rules = parse([{"kind": "gone"}])
    assert injector.decide("GET", "/api/v1/pods", "specpilot/x", True, 5).status is None  # not compacted yet
    injector.rules[0].compacted_rv = 10
    assert injector.decide("GET", "/api/v1/pods", "specpilot/x", True, 10).status == 410
    assert injector.decide("GET", "/api/v1/pods", "specpilot/x", True, 11).status is None
    assert injector.decide("GET", "/api/v1/pods", "specpilot/x", False, None).status is None


def test_unknown_fault_fields_are_refused() -> None:
    with pytest.raises(ValueError):
        parse([{"kind": "error", "statuss": 500}])
    with pytest.raises(ValueError):
        parse([{"kind": "explode"}])
