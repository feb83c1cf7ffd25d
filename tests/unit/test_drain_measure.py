"""The automatic drain measured and applied: vLLM's e2e histogram read off a scrape (bounded), summed over pods,
written to status.drain with a DrainChanged Event, and rendered by the reconciler into the `<name>-drain`
ConfigMap without touching the pod template."""

from __future__ import annotations

import asyncio
import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from specpilot.api.drain import DEFAULT_DRAIN_SECONDS, MIN_AUTO_DRAIN_S
from specpilot.controller import drain as drain_module
from specpilot.controller.drain import DRAIN_CHANGED, DrainMeasure, merged_buckets
from specpilot.controller.handlers import Scheduler
from specpilot.controller.metrics import OperatorMetrics
from specpilot.scrape.pods import PodScrape, PodTarget
from specpilot_runtime import vllm_metrics as vm
from specpilot_runtime.drain import DRAIN_FILE, parse_drain
from test_reconcile_child_cache import FakeApi, _reconciler, _sd

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-ngram-n3.prom"
INF = math.inf


def _exposition(buckets: dict[str, float], engine: str = "0") -> str:
    lines = ["# TYPE vllm:e2e_request_latency_seconds histogram"]
    lines += [f'vllm:e2e_request_latency_seconds_bucket{{engine="{engine}",le="{le}",model_name="m"}} {count}'
              for le, count in buckets.items()]
    return "\n".join(lines + ["vllm:num_requests_running 0", ""])


def test_a_real_vllm_scrape_keeps_its_e2e_buckets() -> None:
    snap = vm.parse(FIXTURE.read_text())
    assert len(snap.e2e_latency_buckets) == 22
    assert snap.e2e_latency_buckets[0] == (0.3, 5.0) and snap.e2e_latency_buckets[-1] == (INF, 6.0)


def test_engines_are_summed_by_bound() -> None:
    text = _exposition({"1.0": 2, "+Inf": 3}, "0") + _exposition({"1.0": 5, "+Inf": 9}, "1")
    assert vm.parse(text).e2e_latency_buckets == ((1.0, 7.0), (INF, 12.0))


@pytest.mark.parametrize("buckets, error", [
    ({"x": 1, "+Inf": 2}, "is not a number"),
    ({"NaN": 1, "+Inf": 2}, "NaN"),
    ({**{str(i): i for i in range(vm.MAX_LATENCY_BUCKETS)}, "+Inf": 100}, "more than 64 buckets"),
    ({"1.0": 1e308, "+Inf": 1e308}, None),  # finite alone; summed with another engine below
])
def test_hostile_buckets_are_refused(buckets: dict[str, float], error: str | None) -> None:
    if error is None:
        with pytest.raises(vm.NonFiniteSample):
            vm.parse(_exposition(buckets, "0") + _exposition(buckets, "1"))
        return
    with pytest.raises(ValueError, match=error):
        vm.parse(_exposition(buckets))


def test_pods_are_summed_over_the_bounds_they_share() -> None:
    a = ((1.0, 10.0), (2.0, 20.0), (INF, 30.0))
    b = ((1.0, 1.0), (1.5, 2.0), (INF, 3.0))
    assert merged_buckets([a, b, ()]) == [(1.0, 11.0), (INF, 33.0)]
    assert merged_buckets([(), ()]) == []


class MergingApi(FakeApi):
    """A status merge patch as the API server applies it (None removes a key), Events recorded."""

    def __init__(self, sd: dict[str, Any]) -> None:
        super().__init__(sd)
        self.events: list[dict[str, Any]] = []

    def patch_status(self, path: str, status: dict[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        self.calls.append("status")
        merged = self.sd.setdefault("status", {})
        for key, value in status.items():
            if isinstance(value, dict):
                old = merged.get(key) if isinstance(merged.get(key), dict) else {}
                merged[key] = {k: v for k, v in {**old, **value}.items() if v is not None}
            elif value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return self.sd

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.events.append(obj)
        return obj


def _scrape(buckets: tuple[tuple[float, float], ...]) -> PodScrape:
    target = PodTarget("p", "u", "stable", 3, "http://127.0.0.1:1/metrics", True)
    return PodScrape(target, vm.Snapshot(e2e_latency_buckets=buckets))


def _drain_map(api: FakeApi) -> int:
    return parse_drain(api.children[("ConfigMap", "chat-drain")]["data"][DRAIN_FILE].encode())


async def _measure(api: MergingApi, scheduler: Scheduler, pods: list[PodScrape]) -> None:
    await DrainMeasure(scheduler, "team", "chat").record(copy.deepcopy(api.sd), None, pods)


def test_a_measured_p99_moves_the_configmap_and_rolls_no_pod() -> None:
    api = MergingApi(_sd())
    reconciler = _reconciler(api)
    scheduler = Scheduler(reconciler, OperatorMetrics())
    reconciler.born("team", "chat", "u-chat")
    assert reconciler.reconcile("team", "chat") == "applied"
    assert api.sd["status"]["drain"] == {"seconds": DEFAULT_DRAIN_SECONDS, "source": "default"}
    assert _drain_map(api) == DEFAULT_DRAIN_SECONDS
    template = copy.deepcopy(api.children[("Deployment", "chat")]["spec"]["template"])

    # Short chat on two pods: p99 under 2 s over 400 requests -> the 30 s floor.
    short = ((0.5, 100.0), (2.0, 199.0), (INF, 200.0))
    asyncio.run(_measure(api, scheduler, [_scrape(short), _scrape(short), PodScrape(_scrape(()).target, None)]))
    drain = api.sd["status"]["drain"]
    assert drain["seconds"] == MIN_AUTO_DRAIN_S and drain["source"] == "measured" and drain["requests"] == 400
    assert drain["p99Seconds"] == pytest.approx(0.5 + 1.5 * (396 - 200) / 198)
    reconciler.events.flush(5)
    (event,) = [e for e in api.events if e["reason"] == DRAIN_CHANGED]
    assert event["message"].startswith(f"drain {DEFAULT_DRAIN_SECONDS} s (default) -> {MIN_AUTO_DRAIN_S} s "
                                       "(measured): p99 1.98 s over 400 requests")

    # The status write is what a reconcile renders: asked for by the object's next event.
    assert reconciler.needs_render(copy.deepcopy(api.sd))
    assert reconciler.reconcile("team", "chat") == "applied"
    assert _drain_map(api) == MIN_AUTO_DRAIN_S
    assert api.children[("Deployment", "chat")]["spec"]["template"] == template  # no pod rolls
    reconciler.events.flush(5)
    assert not [e for e in api.events if e["reason"] == "Reverted"]  # a measured change, not a hand edit
    assert not reconciler.needs_render(copy.deepcopy(api.sd))
    api.calls.clear()
    assert reconciler.reconcile("team", "chat") == "unchanged" and "status" not in api.calls

    # The same histogram again writes nothing; a handful of requests never moves the drain.
    api.calls.clear()
    asyncio.run(_measure(api, scheduler, [_scrape(short), _scrape(short)]))
    assert "status" not in api.calls


def test_too_few_requests_keep_the_default_and_a_fixed_drain_is_never_measured() -> None:
    api = MergingApi(_sd())
    reconciler = _reconciler(api)
    scheduler = Scheduler(reconciler, OperatorMetrics())
    reconciler.reconcile("team", "chat")
    asyncio.run(_measure(api, scheduler, [_scrape(((0.5, 10.0), (INF, 20.0)))]))
    assert api.sd["status"]["drain"]["source"] == "default"
    assert api.sd["status"]["drain"]["seconds"] == DEFAULT_DRAIN_SECONDS

    fixed = _sd()
    fixed["spec"]["engine"] = {"drainSeconds": 200}
    api = MergingApi(fixed)
    reconciler = _reconciler(api)
    reconciler.reconcile("team", "chat")
    assert api.sd["status"]["drain"] == {"seconds": 200, "source": "spec"}
    assert ("ConfigMap", "chat-drain") not in api.children
    engine = json.loads(api.children[("ConfigMap", "chat-engine")]["data"]["engine.json"])
    assert engine["shutdown_timeout_s"] == 200 and "drain_file" not in engine


class FakeScraper:
    """Every target answers with the same histogram; what was asked is kept."""

    def __init__(self, buckets: tuple[tuple[float, float], ...]) -> None:
        self.buckets, self.asked = buckets, []

    async def scrape(self, targets: list[PodTarget]) -> list[PodScrape]:
        self.asked.append([t.name for t in targets])
        return [PodScrape(t, vm.Snapshot(e2e_latency_buckets=self.buckets)) for t in targets if t.ready]


def _serving_pod(api: FakeApi, reconciler: Any) -> None:
    """A Ready pod of the stable Deployment's ReplicaSet, as kube-controller-manager would make it."""
    dep = copy.deepcopy(api.children[("Deployment", "chat")])
    dep["metadata"]["uid"] = "d-1"  # as the API server gives it; the watch tells the reconciler
    dep = api.children[("Deployment", "chat")] = api._stamp(dep)
    reconciler.cache.observe("MODIFIED", copy.deepcopy(dep))
    labels = dep["spec"]["template"]["metadata"]["labels"]
    api.children[("ReplicaSet", "chat-1")] = {"metadata": {"name": "chat-1", "uid": "rs-1", "ownerReferences": [
        {"controller": True, "uid": "d-1"}]}}
    api.children[("Pod", "chat-1-a")] = {
        "metadata": {"name": "chat-1-a", "uid": "p-1", "labels": labels,
                     "ownerReferences": [{"controller": True, "uid": "rs-1"}]},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
        "status": {"podIP": "127.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_untuned_pass_measures_only_untuned_automatic_objects_with_ready_pods() -> None:
    api = MergingApi(_sd())
    untuned = copy.deepcopy(api.sd)
    reconciler = _reconciler(api)
    scheduler = Scheduler(reconciler, OperatorMetrics())
    reconciler.reconcile("team", "chat")
    _serving_pod(api, reconciler)
    scraper = FakeScraper(((1.0, 150.0), (2.0, 200.0), (INF, 200.0)))
    reconciler.bodies.drop("team", "chat")  # no watch here: each pass reads the object as this test edits it
    run = drain_module.measure_once
    api.sd["status"]["readyReplicas"] = 0
    asyncio.run(run(scheduler, scraper, "team", "chat"))  # type: ignore[arg-type]
    assert scraper.asked == []  # nothing serves yet: not even a list
    api.sd["status"]["readyReplicas"] = 1
    for spec_edit in ({"engine": {"drainSeconds": 200}}, {"tuning": {"enabled": True}}):
        api.sd["spec"] = {**untuned["spec"], **spec_edit}
        asyncio.run(run(scheduler, scraper, "team", "chat"))  # type: ignore[arg-type]
        assert scraper.asked == []  # a fixed drain is never measured; a tuned object's loop measures
    api.sd["spec"] = untuned["spec"]
    asyncio.run(run(scheduler, scraper, "team", "chat"))  # type: ignore[arg-type]
    assert scraper.asked == [["chat-1-a"]]
    assert api.sd["status"]["drain"]["source"] == "measured" and api.sd["status"]["drain"]["requests"] == 200


def test_one_loop_visits_every_reconciled_object(monkeypatch: pytest.MonkeyPatch) -> None:
    api = MergingApi(_sd())
    reconciler = _reconciler(api)
    scheduler = Scheduler(reconciler, OperatorMetrics())
    reconciler.reconcile("team", "chat")
    visits: list[tuple[str, str]] = []

    async def visit(_scheduler: Scheduler, _scraper: Any, namespace: str, name: str) -> None:
        visits.append((namespace, name))
        if len(visits) == 2:
            raise RuntimeError("a pod hiccup")  # logged; the loop goes on

    monkeypatch.setattr(drain_module, "measure_once", visit)

    async def some_rounds() -> None:
        task = asyncio.create_task(drain_module.measure_all(scheduler, FakeScraper(()), interval_s=0.05))  # type: ignore[arg-type]
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    asyncio.run(some_rounds())
    assert len(visits) >= 3 and set(visits) == {("team", "chat")}
