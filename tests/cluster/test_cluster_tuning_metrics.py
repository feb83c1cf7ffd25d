"""A metrics endpoint that returns garbage, never answers or quotes megabytes back in its error: the tuner
makes no decision (nothing in status.tuning's history, no canary) and the Tuning condition says why,
naming the pod, in a message that a status write still takes. One whose counters no engine could count is
not measured, and a Warning Event says so."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from cluster_kit import Cluster, start_cluster, stop_cluster, wait_for
from tuning_kit import WINDOW, condition, deployment, events, tuned, tuning


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(tmp_path_factory.mktemp("faulty"), "--pod-runtime", "faulty_metrics:FaultyMetrics")
    try:
        c.wait_to_lead(c.start_operator("main"))
        yield c
    finally:
        stop_cluster(c)


@pytest.mark.parametrize("name,says", [("garbage", "not Prometheus metrics"), ("hang", "timed out"),
                                       ("huge", "non-finite metric")])
def test_unusable_metrics_mean_no_decision_and_a_condition(faulty: Cluster, name: str, says: str) -> None:
    ns = faulty.namespace(name)
    assert faulty.apply(tuned(name, "qwen35-122b-mtp-math500"), ns).returncode == 0
    cond = wait_for("the Tuning condition to say why",
                    lambda: (x := condition(faulty, ns, name, "Tuning")).get("reason") == "MetricsUnavailable" and x,
                    timeout=45)
    pod = faulty.items("pods", "-n", ns)[0]["metadata"]["name"]
    assert cond["status"] == "False"
    assert pod in cond["message"] and says in cond["message"] and "no decision" in cond["message"]
    assert len(cond["message"]) < 1024, len(cond["message"])
    assert not tuning(faulty, ns, name).get("history")
    assert deployment(faulty, ns, f"{name}-canary") is None
    # The log says it when it starts, not every window; httpx's line per request is not there.
    time.sleep(3 * float(WINDOW.removesuffix("s")))
    logs = faulty.operators[0].logs()
    assert logs.count(f"tuning {ns}/{name}: no decision this window: {pod}") == 1, logs[-3000:]
    assert "HTTP Request:" not in logs
    # `kubectl get sd -o wide` says what the tuner is doing; the default view how many pods are Ready.
    wide = faulty.kubectl("get", "sd", "-n", ns, name, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "METHOD", "N", "READY", "PHASE", "ACCEPTED", "LENGTH", "SCHEDULE", "AGE",
                               "REPLICAS", "STARTED", "N", "ARMS", "CANARY", "N", "TUNING"], wide
    assert wide[1].split()[-1] == "MetricsUnavailable", wide


def test_counters_no_engine_could_count_are_not_measured_and_said_once(faulty: Cluster) -> None:
    ns = faulty.namespace("forged")
    assert faulty.apply(tuned("forged", "qwen35-122b-mtp-math500"), ns).returncode == 0
    (warning,) = wait_for("the MetricsImplausible Event", lambda: events(faulty, ns, "MetricsImplausible"), timeout=45)
    assert warning["type"] == "Warning"
    assert "stable: " in warning["message"] and "more than any engine emits" in warning["message"], warning
    time.sleep(3 * float(WINDOW.removesuffix("s")))
    # Said once; nothing of it measured (the status keeps no record), and nothing decided on it.
    assert len(events(faulty, ns, "MetricsImplausible")) == 1
    assert faulty.operators[0].logs().count(f"tuning {ns}/forged: window not measured") == 1
    assert not tuning(faulty, ns, "forged").get("records")
    assert deployment(faulty, ns, "forged-canary") is None
