"""A track's window as the SLO and queueing gates read it: the TTFT/TPOT percentiles from the histograms'
window counts, mean waiting requests, preemptions and the token-weighted time per output token, from
hand-made bucket data and from a real vLLM scrape; every hostile number gives "not measured"."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import specpilot_runtime.vllm_metrics as vm
from specpilot.api.models import Slo
from specpilot.scrape.windows import add
from specpilot.tuning.constants import LATENCY_CEILING_S
from specpilot.tuning.observations import TrackWindow, WindowRecord, implausible, record
from specpilot.tuning.slo import percentile_s, preemptions_per_pod, token_weighted_tpot, waiting_per_pod

INF = math.inf
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-ngram-n3.prom"
# 100 requests: 50 under 0.5 s, 40 more under 1 s, 10 more under 2.5 s.
BUCKETS = ((0.5, 50.0), (1.0, 90.0), (2.5, 100.0), (INF, 100.0))


def test_percentiles_interpolate_inside_their_bucket_as_prometheus_does() -> None:
    assert percentile_s(BUCKETS, 0.5) == pytest.approx(0.5)
    assert percentile_s(BUCKETS, 0.7) == pytest.approx(0.75)  # 20 of the 40 between 0.5 s and 1 s
    assert percentile_s(BUCKETS, 0.95) == pytest.approx(1.75)
    assert percentile_s(BUCKETS, 0.25) == pytest.approx(0.25)  # the first bucket starts at 0


def test_an_empty_window_measures_nothing() -> None:
    assert percentile_s((), 0.9) is None
    assert percentile_s(((0.5, 0.0), (INF, 0.0)), 0.9) is None


def test_a_percentile_above_every_finite_bound_is_above_any_slo_the_spec_allows() -> None:
    # All requests in the +Inf bucket: slower than the largest bound, by how much unknown.
    assert percentile_s(((0.5, 0.0), (2560.0, 0.0), (INF, 7.0)), 0.9) == LATENCY_CEILING_S > 3600


@pytest.mark.parametrize("buckets", [
    ((0.5, 1.0), (INF, float("nan"))),
    ((0.5, float("inf")), (INF, float("inf"))),
    ((0.5, -3.0), (INF, 5.0)),
    ((0.5, 9.0), (INF, 5.0)),  # cumulative counts that go down
    ((0.5, 1.0), (1.0, 2.0)),  # no +Inf bucket: the total is unknown
    ((float("nan"), 1.0), (INF, 2.0)),
])
def test_buckets_that_are_no_histogram_measure_nothing(buckets: tuple[tuple[float, float], ...]) -> None:
    assert percentile_s(buckets, 0.9) is None


@pytest.mark.parametrize("q", [0.0, 1.0, float("nan"), -1.0])
def test_a_percentile_outside_0_1_measures_nothing(q: float) -> None:
    assert percentile_s(BUCKETS, q) is None


def test_mean_waiting_is_queued_seconds_over_window_seconds_per_pod() -> None:
    # Little's law: 240 s queued in a 60 s window is 4 requests waiting on average, 2 per pod.
    d = vm.Snapshot(queue_time_sum=240.0, queue_time_count=30.0, waiting=50.0)
    assert waiting_per_pod(d, 60.0, 2) == pytest.approx(2.0)
    # Pods without the queue-time histogram: the gauge as scraped.
    assert waiting_per_pod(vm.Snapshot(waiting=6.0), 60.0, 2) == pytest.approx(3.0)
    assert waiting_per_pod(vm.Snapshot(waiting=float("nan")), 60.0, 1) is None
    assert waiting_per_pod(vm.Snapshot(queue_time_sum=-5.0, queue_time_count=1.0), 60.0, 1) is None
    assert waiting_per_pod(d, 0.0, 2) is None


def test_preemptions_are_counted_per_pod_and_hostile_counts_are_not() -> None:
    assert preemptions_per_pod(vm.Snapshot(preemptions=9.0), 3) == pytest.approx(3.0)
    assert preemptions_per_pod(vm.Snapshot(preemptions=9.0), 0) == pytest.approx(9.0)
    assert preemptions_per_pod(vm.Snapshot(preemptions=float("inf")), 1) is None


def test_token_weighted_tpot_weighs_long_answers_by_their_tokens() -> None:
    # A 3-token answer decoded in 2 s (1 s/token) and a 1001-token one in 10 s (0.01 s/token): per request the
    # mean TPOT is 0.505 s, per token (12 s over 1002 decoded tokens) 0.012 s.
    d = vm.Snapshot(decode_time_sum=12.0, request_tokens_sum=1004.0, request_tokens_count=2.0)
    assert token_weighted_tpot(d) == pytest.approx(12.0 / 1002.0)
    assert token_weighted_tpot(vm.Snapshot()) is None  # pods without the histograms
    assert token_weighted_tpot(vm.Snapshot(decode_time_sum=1.0, request_tokens_sum=3.0, request_tokens_count=3.0)) is None
    assert token_weighted_tpot(dataclasses.replace(d, decode_time_sum=float("nan"))) is None


def test_a_real_vllm_scrape_gives_every_number() -> None:
    snap = vm.parse(FIXTURE.read_text())
    assert snap.ttft_buckets[-1][0] == INF and len(snap.ttft_buckets) <= vm.MAX_LATENCY_BUCKETS
    assert snap.tpot_buckets[-1] == (INF, snap.tpot_count)
    assert snap.request_tokens_count == snap.tpot_count and snap.request_tokens_sum == snap.generation_tokens
    assert 0 < percentile_s(snap.ttft_buckets, 0.9) < 10  # type: ignore[operator]
    assert 0 < token_weighted_tpot(snap) < 1  # type: ignore[operator]


def _exposition(ttft: list[tuple[str, float]], preemptions: float) -> str:
    lines = [f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="m"}} {n}' for le, n in ttft]
    lines.append(f'vllm:num_preemptions_total{{model_name="m"}} {preemptions}')
    return "\n".join(lines) + "\n"


def test_a_windows_histogram_counts_only_its_own_requests() -> None:
    before = vm.parse(_exposition([("0.5", 100.0), ("1.0", 100.0), ("+Inf", 100.0)], 2.0))
    after = vm.parse(_exposition([("0.5", 100.0), ("1.0", 110.0), ("+Inf", 120.0)], 5.0))
    d = vm.delta(before, after)
    assert d.ttft_buckets == ((0.5, 0.0), (1.0, 10.0), (INF, 20.0)) and d.preemptions == 3.0 and not d.reset
    # The 100 fast requests before the window do not hide that half of the window's were slower than 1 s.
    assert percentile_s(d.ttft_buckets, 0.9) == LATENCY_CEILING_S


def test_a_histogram_that_goes_down_or_changes_bounds_is_a_restart() -> None:
    before = vm.parse(_exposition([("0.5", 100.0), ("+Inf", 100.0)], 0.0))
    assert vm.delta(before, vm.parse(_exposition([("0.5", 3.0), ("+Inf", 4.0)], 0.0))).reset
    assert vm.delta(before, vm.parse(_exposition([("0.25", 100.0), ("+Inf", 120.0)], 0.0))).reset


def test_a_pod_may_not_bring_more_buckets_than_a_histogram_has() -> None:
    many = [(f"{i}.0", float(i)) for i in range(vm.MAX_LATENCY_BUCKETS + 1)] + [("+Inf", 1e3)]
    with pytest.raises(ValueError, match="more than"):
        vm.parse(_exposition(many, 0.0))
    with pytest.raises(vm.NonFiniteSample):
        vm.parse(_exposition([("0.5", float("nan")), ("+Inf", 1.0)], 0.0))


def test_pods_histograms_add_up_at_the_bounds_both_have() -> None:
    a = vm.Snapshot(ttft_buckets=((0.5, 4.0), (1.0, 6.0), (INF, 8.0)), queue_time_sum=3.0, queue_time_count=8.0)
    b = vm.Snapshot(ttft_buckets=((0.5, 1.0), (INF, 2.0)), queue_time_sum=1.0, queue_time_count=2.0)
    track = add(a, b)
    assert track.ttft_buckets == ((0.5, 5.0), (INF, 10.0))
    assert track.queue_time_sum == 4.0 and track.queue_time_count == 10.0
    assert add(a, vm.Snapshot()).ttft_buckets == a.ttft_buckets


def test_a_record_keeps_the_numbers_at_the_specs_percentile_and_reads_them_back_bounded() -> None:
    d = vm.Snapshot(generation_tokens=1000.0, tpot_sum=2.0, tpot_count=100.0, drafts=400.0, accepted_tokens=600.0,
                    ttft_buckets=BUCKETS, tpot_buckets=((0.02, 80.0), (0.05, 100.0), (INF, 100.0)),
                    queue_time_sum=120.0, queue_time_count=100.0, preemptions=4.0)
    w = TrackWindow(n=3, delta=d, ready_pods=2, desired_pods=2)
    r = record(7, "canary", w, 60.0, slo=Slo(percentile=0.95))
    assert r.ttft_q == pytest.approx(1.75) and r.tpot_q == pytest.approx(0.0425)
    assert r.waiting == pytest.approx(1.0) and r.preempted == pytest.approx(2.0)
    assert WindowRecord.from_json(r.to_json()) == r
    assert record(7, "canary", w, 60.0).ttft_q == pytest.approx(1.0)  # p90 by default, as the spec's
    # A window without the histograms (a switchback arm, an older exporter) writes none of the keys.
    bare = record(8, "stable", dataclasses.replace(w, delta=vm.Snapshot(generation_tokens=10.0)), 60.0)
    assert bare.ttft_q is None and not {"tq", "pq"} & set(bare.to_json())
    forged = {**r.to_json(), "tq": float("inf")}
    with pytest.raises(ValueError, match="record tq"):
        WindowRecord.from_json(forged)
    with pytest.raises(ValueError, match="record pre"):
        WindowRecord.from_json({**r.to_json(), "pre": -1})


def test_the_step_time_is_taken_from_the_token_weighted_tpot_where_vllm_gives_it() -> None:
    # 100 finished requests, mean TPOT 20 ms, but 2 s of decode over 1000 decoded tokens is 2 ms a token (the
    # short answers were the slow ones): tokens per step 2.5, so the step takes 5 ms, not 50.
    d = vm.Snapshot(generation_tokens=1100.0, tpot_sum=2.0, tpot_count=100.0, drafts=400.0, accepted_tokens=600.0,
                    decode_time_sum=2.0, request_tokens_sum=1100.0, request_tokens_count=100.0)
    w = TrackWindow(n=3, delta=d, ready_pods=1, desired_pods=1)
    r = record(1, "stable", w, 60.0)
    assert r.tokens_per_step == pytest.approx(2.5) and r.step_s == pytest.approx(0.005)
    # Little's law on the same time per token: 1100 tokens / 60 s x 2 ms is under one sequence, read as one.
    assert r.load == 1.0
    # Without vLLM's decode-time histogram (the simulated engine, a switchback arm): the mean TPOT, as before.
    plain = record(1, "stable", dataclasses.replace(w, delta=dataclasses.replace(d, decode_time_sum=0.0,
                                                                                  request_tokens_sum=0.0,
                                                                                  request_tokens_count=0.0)), 60.0)
    assert plain.step_s == pytest.approx(0.05)


def test_a_forged_token_weighted_tpot_makes_the_window_implausible() -> None:
    d = vm.Snapshot(generation_tokens=1100.0, tpot_sum=2.0, tpot_count=100.0, decode_time_sum=1e9,
                    request_tokens_sum=1100.0, request_tokens_count=100.0)
    why = implausible(TrackWindow(n=0, delta=d, ready_pods=1, desired_pods=1), 60.0)
    assert why is not None and "token-weighted time per output token" in why


def test_the_share_of_requests_within_an_slo_is_read_off_the_buckets() -> None:
    from specpilot.tuning.slo import share_within
    buckets = [(0.5, 40.0), (1.0, 60.0), (2.0, 90.0), (INF, 100.0)]
    assert share_within(buckets, 1.0) == pytest.approx(0.6)
    assert share_within(buckets, 1.5) == pytest.approx(0.75)  # halfway through the 1-2 s bucket
    assert share_within(buckets, 0.25) == pytest.approx(0.2)  # the first bucket starts at 0
    assert share_within(buckets, 50.0) == pytest.approx(0.9)  # the +Inf bucket's 10 never meet it
    assert share_within(buckets, None) is None
    assert share_within([(1.0, 0.0), (INF, 0.0)], 1.0) is None  # no request
    assert share_within([(1.0, 5.0), (0.5, float("nan"))], 1.0) is None  # no histogram


def test_a_record_keeps_the_shares_meeting_the_slo_and_reads_them_back() -> None:
    from specpilot.tuning.observations import TrackWindow
    d = vm.Snapshot(drafts=10.0, accepted_tokens=10.0, accepted_per_pos=(6.0, 4.0, 0.0), generation_tokens=400.0,
                    tpot_sum=1.0, tpot_count=50.0, ttft_buckets=((1.0, 30.0), (2.0, 45.0), (INF, 50.0)),
                    tpot_buckets=((0.01, 10.0), (0.05, 50.0), (INF, 50.0)))
    r = record(3, "stable", TrackWindow(n=3, delta=d, ready_pods=1, desired_pods=1), 10.0,
               slo=Slo(ttft="1500ms", tpot="20ms"))
    assert r.ttft_met == pytest.approx(0.75) and r.tpot_met == pytest.approx(0.4)  # 10 + 40 x 1/4, of 50
    back = WindowRecord.from_json(r.to_json())
    assert (back.ttft_met, back.tpot_met) == (r.ttft_met, r.tpot_met)
    assert record(3, "stable", TrackWindow(n=3, delta=d, ready_pods=1, desired_pods=1), 10.0).ttft_met is None
    with pytest.raises(ValueError, match="record tm"):
        WindowRecord.from_json({**r.to_json(), "tm": 1.5})
