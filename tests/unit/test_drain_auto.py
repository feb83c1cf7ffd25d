"""The automatic drain (spec.engine.drainSeconds left out): the p99 read off vLLM's cumulative e2e histogram, the
drain it proposes (bounded, hysteresis, not before enough requests), status.drain read as hostile, and the render:
pod templates and engine.json constant across drains, the drain in force in the `<name>-drain` ConfigMap."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from specpilot.api.drain import (DEFAULT_DRAIN_SECONDS, MAX_AUTO_DRAIN_S, MAX_BUCKETS, MIN_AUTO_DRAIN_S,
                                 MIN_DRAIN_REQUESTS, Drain, in_force, measured, next_drain, p99_from_histogram,
                                 proposal_s, requests_in)
from specpilot.api.names import drain_config_map_name
from specpilot.api.validate import load
from specpilot.render import render
from specpilot.render.pod import DRAIN_VOLUME, termination_grace_s
from specpilot_runtime.drain import DRAIN_DIR, DRAIN_FILE, DRAIN_PATH, parse_drain

INF = math.inf


@pytest.mark.parametrize("buckets, p99", [
    # 100 requests: 50 under 1 s, 49 in (1, 2], 1 in (2, 4]: rank 99 is the last of (1, 2].
    ([(1, 50), (2, 99), (4, 100), (INF, 100)], 2.0),
    # One finite bucket: interpolated from 0 as histogram_quantile does.
    ([(10, 200), (INF, 200)], 9.9),
    # Heavy tail: 90% under 0.5 s, 10% in (60, 120]: the p99 is deep in the tail bucket.
    ([(0.5, 900), (60, 900), (120, 1000), (INF, 1000)], 60 + 60 * (990 - 900) / 100),
    # Unsorted input is sorted first.
    ([(INF, 100), (4, 100), (1, 50), (2, 99)], 2.0),
    # All in +Inf: above every finite bucket, not histogram_quantile's largest bound.
    ([(1, 0), (2, 0), (INF, 150)], INF),
    ([(INF, 100)], INF),
])
def test_p99_interpolates_in_its_bucket(buckets: list[tuple[float, float]], p99: float) -> None:
    assert p99_from_histogram(buckets) == pytest.approx(p99)


@pytest.mark.parametrize("buckets", [
    [],                                       # empty
    [(1, 0), (INF, 0)],                       # no request yet
    [(1, 5), (2, 9)],                         # no +Inf bucket: the total is unknown
    [(1, 5), (2, 4), (INF, 9)],               # decreasing counts
    [(1, -1), (INF, 3)],                      # negative count
    [(1, math.nan), (INF, 3)],                # non-finite counts
    [(1, INF), (INF, INF)],
    [(math.nan, 1), (INF, 3)],                # NaN bound
    [(-1, 1), (INF, 3)],                      # negative latency
    [(1, 1), (1, 2), (INF, 3)],               # repeated bound
    [("x", 1), (INF, 3)],                     # not a number
    [(float(i), i) for i in range(MAX_BUCKETS)] + [(INF, MAX_BUCKETS)],  # more buckets than any histogram
])
def test_hostile_histograms_give_none(buckets: list[Any]) -> None:
    assert p99_from_histogram(buckets) is None
    assert requests_in(buckets) == 0


def test_requests_are_the_inf_bucket_bounded() -> None:
    assert requests_in([(1, 50), (INF, 120)]) == 120
    assert requests_in([(INF, 1e300)]) == 2 ** 53


def test_proposal_is_bounded() -> None:
    assert proposal_s(0.0) == MIN_AUTO_DRAIN_S  # 2 x 0 + 10 s is below Kubernetes' default grace
    assert proposal_s(50.2) == math.ceil(2 * 50.2 + 10)
    assert proposal_s(1e9) == MAX_AUTO_DRAIN_S
    assert proposal_s(INF) == MAX_AUTO_DRAIN_S


def test_next_drain_waits_for_requests_and_ignores_small_moves() -> None:
    assert next_drain(120, 300.0, MIN_DRAIN_REQUESTS - 1)[0] == 120
    assert next_drain(120, None, 10_000)[0] == 120
    # 2 x 60 + 10 = 130: within 25% of 120, kept.
    seconds, why = next_drain(120, 60.0, 500)
    assert seconds == 120 and "kept" in why
    # Short chat: 2 x 3 + 10 = 16 -> the 30 s floor, far from 120.
    assert next_drain(120, 3.0, 500)[0] == MIN_AUTO_DRAIN_S
    # Long reasoning outputs: 2 x 400 + 10 = 810.
    seconds, why = next_drain(120, 400.0, 500)
    assert seconds == 810 and "p99 400 s over 500 requests" in why
    assert next_drain(120, INF, 500)[0] == MAX_AUTO_DRAIN_S


@pytest.mark.parametrize("status", [
    None, "x", [], {"seconds": 5, "source": "measured"}, {"seconds": True, "source": "measured"},
    {"seconds": 10 ** 9, "source": "measured"}, {"seconds": 60.5, "source": "measured"},
    {"seconds": 60, "source": "spec"}, {"seconds": 60, "source": "nonsense"},
])
def test_a_status_the_operator_never_writes_means_the_default(status: Any) -> None:
    assert in_force(None, status).seconds == DEFAULT_DRAIN_SECONDS
    assert in_force(None, status).source == "default"


def test_in_force_prefers_the_spec_then_the_measured_value() -> None:
    measured_status = {"seconds": 60, "source": "measured", "p99Seconds": 25.0, "requests": 400}
    assert in_force(200, measured_status) == Drain(200, "spec")
    assert in_force(None, measured_status) == Drain(60, "measured", 25.0, 400)
    hostile = {**measured_status, "p99Seconds": "nan", "requests": -3}
    assert in_force(None, hostile) == Drain(60, "measured", None, None)


def test_a_measurement_becomes_measured_once_enough_requests_finished() -> None:
    start = in_force(None, None)
    after, _ = measured(start, 3.0, 20)
    assert after == Drain(DEFAULT_DRAIN_SECONDS, "default", 3.0, 20)
    after, _ = measured(after, 3.0, 400)
    assert after == Drain(MIN_AUTO_DRAIN_S, "measured", 3.0, 400)
    assert after.worth_writing(start)
    # Small moves of the p99 and a few more requests are not worth a status write; doubling is.
    assert not measured(after, 3.1, 500)[0].worth_writing(after)
    assert measured(after, 3.1, 800)[0].worth_writing(after)
    # A p99 above every bucket is not written as a number.
    assert measured(after, INF, 500)[0] == Drain(MAX_AUTO_DRAIN_S, "measured", None, 500)


def _sd(**engine: Any) -> Any:
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "chat", "namespace": "ns"},
                 "spec": {"model": "Qwen/Qwen3-8B", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                          "engine": engine, "tuning": {"enabled": True, "candidates": [2, 3, 4]}}})


def _by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] != "Service"}  # the Service is named as stable


def test_automatic_pods_do_not_change_with_the_drain_in_force() -> None:
    sd = _sd()
    owner = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "name": "chat", "uid": "u1",
             "controller": True, "blockOwnerDeletion": True}
    short, long = (_by_name(render(sd, 3, 4, owner=owner, drain_s=s)) for s in (30, 900))
    for name in ("chat", "chat-canary", "chat-engine", "chat-canary-engine"):
        assert short[name] == long[name], name  # no template, no engine.json, no hash moves: no pod rolls
    cm = short[drain_config_map_name("chat")]
    assert parse_drain(cm["data"][DRAIN_FILE].encode()) == 30
    assert parse_drain(long["chat-drain"]["data"][DRAIN_FILE].encode()) == 900
    assert cm["metadata"]["ownerReferences"] == [owner] and cm["metadata"]["namespace"] == "ns"
    for track in ("chat", "chat-canary"):
        pod = short[track]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == termination_grace_s(MAX_AUTO_DRAIN_S)
        assert {"name": DRAIN_VOLUME, "configMap": {"name": "chat-drain", "optional": True}} in pod["volumes"]
        assert {"name": DRAIN_VOLUME, "mountPath": DRAIN_DIR, "readOnly": True} in pod["containers"][0]["volumeMounts"]
        engine = json.loads(short[f"{track}-engine"]["data"]["engine.json"])
        assert engine["shutdown_timeout_s"] == MAX_AUTO_DRAIN_S and engine["drain_file"] == DRAIN_PATH


def test_a_fixed_drain_renders_as_before_with_no_drain_configmap() -> None:
    objects = _by_name(render(_sd(drainSeconds=200), 3, 4, drain_s=30))
    assert "chat-drain" not in objects
    for track in ("chat", "chat-canary"):
        pod = objects[track]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == termination_grace_s(200)
        assert all(v["name"] != DRAIN_VOLUME for v in pod["volumes"])
        engine = json.loads(objects[f"{track}-engine"]["data"]["engine.json"])
        # No drain_file key at all: a fixed drain's engine.json (and hash) is what it was before drain files.
        assert engine["shutdown_timeout_s"] == 200 and "drain_file" not in engine
