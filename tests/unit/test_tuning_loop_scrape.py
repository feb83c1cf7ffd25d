"""The tuning loop's scraping: pod targets from pod objects, retries and refusals, and window deltas
summed per track (restarts detected, first round a baseline only)."""

from __future__ import annotations

import asyncio

import httpx

from specpilot.scrape.pods import PodScrape, PodTarget, pod_targets, scrape_pod, scrape_pods
from specpilot.scrape.windows import WindowCounter, add
from specpilot_runtime.vllm_metrics import Snapshot


def _pod(name: str, track: str, n: int, ip: str | None = "127.1.0.2", ready: bool = True) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}",
                         "labels": {"specpilot.io/track": track, "specpilot.io/num-speculative-tokens": str(n)}},
            "spec": {"containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_targets_are_serving_pods_with_their_track_n_and_url() -> None:
    pods = [_pod("b", "canary", 7), _pod("a", "stable", 3), _pod("c", "stable", 3, ip=None),
            _pod("d", "stable", 3, ready=False), {"metadata": {"name": "other", "uid": "x", "labels": {}}}]
    targets = pod_targets(pods)
    assert [(t.name, t.track, t.n, t.ready) for t in targets] == [
        ("a", "stable", 3, True), ("b", "canary", 7, True), ("c", "stable", 3, False), ("d", "stable", 3, False)]
    assert targets[0].url == "http://127.1.0.2:8000/metrics"


EXPOSITION = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 40.0
"""
TARGET = PodTarget("p", "uid-p", "stable", 3, "http://127.1.0.2:8000/metrics", True)


def _scrape(handler) -> PodScrape:  # type: ignore[no-untyped-def]
    async def run() -> PodScrape:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=1.0) as client:
            return await scrape_pod(client, TARGET, retries=2)
    return asyncio.run(run())


def test_a_good_exposition_parses() -> None:
    got = _scrape(lambda _: httpx.Response(200, text=EXPOSITION))
    assert got.error is None and got.snapshot is not None and got.snapshot.drafts == 10.0


def test_garbage_is_refused_at_once_with_the_reason() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, text="<html>502 Bad Gateway</html>")
    got = _scrape(handler)
    assert got.snapshot is None and "not Prometheus metrics" in (got.error or "")
    assert len(calls) == 1  # a page that is not an exposition will not become one


def test_an_exposition_without_vllm_metrics_is_refused() -> None:
    got = _scrape(lambda _: httpx.Response(200, text="# TYPE up gauge\nup 1\n"))
    assert got.snapshot is None and "no vllm:" in (got.error or "")


def test_timeouts_and_server_errors_are_retried() -> None:
    answers = [httpx.ReadTimeout("slow"), httpx.Response(503), httpx.Response(200, text=EXPOSITION)]

    def handler(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    got = _scrape(handler)
    assert got.snapshot is not None and answers == []


def test_a_pod_that_keeps_timing_out_says_so() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow")
    got = _scrape(handler)
    assert got.snapshot is None and "timed out" in (got.error or "")


def test_only_ready_pods_are_scraped() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text=EXPOSITION)

    async def run() -> list[PodScrape]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await scrape_pods(client, [TARGET, PodTarget("q", "uid-q", "canary", 7, "", False)])
    assert [s.target.name for s in asyncio.run(run())] == ["p"]
    assert seen == [TARGET.url]


def _snap(drafts: float, acc: tuple[float, ...], gen: float, running: float = 2.0) -> Snapshot:
    return Snapshot(drafts=drafts, draft_tokens=drafts * len(acc), accepted_tokens=sum(acc), accepted_per_pos=acc,
                    generation_tokens=gen, tpot_sum=gen / 100, tpot_count=gen / 50, running=running)


def _scraped(name: str, track: str, n: int, snap: Snapshot) -> PodScrape:
    return PodScrape(PodTarget(name, f"uid-{name}", track, n, "http://x/metrics", True), snap)


def test_add_sums_counters_and_positions_of_different_lengths() -> None:
    total = add(_snap(10, (8.0, 5.0), 30), _snap(4, (3.0, 2.0, 1.0), 12, running=1))
    assert total.drafts == 14 and total.accepted_per_pos == (11.0, 7.0, 1.0)
    assert total.generation_tokens == 42 and total.running == 3


def test_first_round_is_a_baseline_then_deltas_are_summed_per_track() -> None:
    counter = WindowCounter()
    first = [_scraped("s1", "stable", 3, _snap(100, (80.0, 60.0, 40.0), 400)),
             _scraped("s2", "stable", 3, _snap(50, (40.0, 30.0, 20.0), 200)),
             _scraped("c1", "canary", 7, _snap(10, (9.0,) * 7, 80))]
    deltas, elapsed = counter.advance(first, now=100.0)
    assert deltas == {} and elapsed is None
    second = [_scraped("s1", "stable", 3, _snap(150, (120.0, 90.0, 60.0), 600)),
              _scraped("s2", "stable", 3, _snap(70, (56.0, 42.0, 28.0), 280)),
              _scraped("c1", "canary", 7, _snap(30, (25.0,) * 7, 240))]
    deltas, elapsed = counter.advance(second, now=102.5)
    assert elapsed == 2.5
    stable, canary = deltas[("stable", 3)], deltas[("canary", 7)]
    assert (stable.pods, stable.delta.drafts, stable.delta.accepted_per_pos) == (2, 70, (56.0, 42.0, 28.0))
    assert stable.delta.generation_tokens == 280 and stable.restarts == 0
    assert canary.delta.drafts == 20 and canary.delta.accepted_per_pos == (16.0,) * 7


def test_a_restarted_pod_counts_from_its_restart_and_is_reported() -> None:
    counter = WindowCounter()
    counter.advance([_scraped("s1", "stable", 3, _snap(100, (80.0, 60.0, 40.0), 400))], now=0.0)
    deltas, _ = counter.advance([_scraped("s1", "stable", 3, _snap(5, (4.0, 3.0, 2.0), 20))], now=2.0)
    assert deltas[("stable", 3)].delta.drafts == 5 and deltas[("stable", 3)].restarts == 1


def test_a_new_pod_contributes_from_its_second_scrape() -> None:
    counter = WindowCounter()
    counter.advance([_scraped("s1", "stable", 3, _snap(100, (80.0, 60.0, 40.0), 400))], now=0.0)
    deltas, _ = counter.advance([_scraped("s1", "stable", 3, _snap(110, (88.0, 66.0, 44.0), 440)),
                                 _scraped("c1", "canary", 7, _snap(10, (9.0,) * 7, 80))], now=2.0)
    assert ("canary", 7) not in deltas and deltas[("stable", 3)].pods == 1


def test_reset_makes_the_next_round_a_baseline() -> None:
    counter = WindowCounter()
    counter.advance([_scraped("s1", "stable", 3, _snap(100, (80.0, 60.0, 40.0), 400))], now=0.0)
    counter.reset()
    deltas, elapsed = counter.advance([_scraped("s1", "stable", 3, _snap(110, (88.0, 66.0, 44.0), 440))], now=2.0)
    assert deltas == {} and elapsed is None


def test_pods_without_speculation_still_count_tokens() -> None:
    counter = WindowCounter()
    counter.advance([_scraped("s1", "stable", 0, Snapshot(generation_tokens=100))], now=0.0)
    deltas, _ = counter.advance([_scraped("s1", "stable", 0, Snapshot(generation_tokens=160))], now=1.0)
    assert deltas[("stable", 0)].delta.generation_tokens == 60 and deltas[("stable", 0)].delta.drafts == 0
