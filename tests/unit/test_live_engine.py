"""live_engine.LiveEngine against a stand-in for vLLM's scheduler: the list it swaps, the file it follows,
what it counts per step and what it leaves for /metrics. tests/vllm/test_vllm_live.py runs it in real vLLM."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import live, live_engine
from specpilot_runtime.speculative import schedule_k

N = 4
MAX_SEQS = 8


def build_lookup(rows: list[list[int]], vllm_max_batch_size: int, vllm_num_speculative_tokens: int) -> list[int]:
    """vLLM's dense batch size -> K list (index 0 unused), as speculative.schedule_k reads the same table."""
    return [0] + [schedule_k(rows, vllm_num_speculative_tokens, b) for b in range(1, vllm_max_batch_size + 1)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeScheduler:
    """What LiveEngine reads of vLLM's Scheduler; a step drafts the K its list gives for its batch size,
    accepts half of it and emits accepted + 1 tokens per sequence; every step takes `step_s` of the clock."""

    def __init__(self, clock: Clock, table: list[list[int]] | None = None, step_s: float = 0.01) -> None:
        table = [[1, 256, N]] if table is None else table
        spec = NS(num_speculative_tokens=N, method="ngram", num_speculative_tokens_per_batch_size=table)
        self.vllm_config = NS(speculative_config=spec, parallel_config=NS(data_parallel_size=1))
        self.scheduler_config = NS(max_num_seqs=MAX_SEQS)
        self.dynamic_sd_lookup = build_lookup(table, MAX_SEQS, N) if table else None
        self.clock, self.step_s = clock, step_s
        self.batch = 2
        self.unfinished = True
        self.drafted: list[int] = []

    def schedule(self, throttle_prefills: bool = False) -> Any:
        return NS(num_scheduled_tokens={f"r{i}": 1 for i in range(self.batch)},
                  k=self.dynamic_sd_lookup[self.batch] if self.dynamic_sd_lookup else N)

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self.clock.now += self.step_s
        k, b = scheduler_output.k, len(scheduler_output.num_scheduled_tokens)
        self.drafted.append(k)
        outs = [NS(new_token_ids=[1] * (k // 2 + 1), finish_reason=None) for _ in range(b)]
        stats = NS(spec_decoding_stats=NS(num_draft_tokens=k * b, num_accepted_tokens=k // 2 * b))
        return {0: NS(outputs=outs, scheduler_stats=stats)}

    def has_unfinished_requests(self) -> bool:
        return self.unfinished

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.update_from_output(self.schedule(), None)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sched(clock: Clock) -> FakeScheduler:
    return FakeScheduler(clock)


@pytest.fixture
def engine(sched: FakeScheduler, clock: Clock, tmp_path: Path) -> live_engine.LiveEngine:
    e = live_engine.LiveEngine(sched, tmp_path / "live.json", tmp_path / "state.prom", build_lookup, clock)
    e.wrap()
    return e


def write(engine: live_engine.LiveEngine, doc: object) -> None:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    tmp = engine.live_file.with_name("tmp")
    tmp.write_bytes(data)
    os.replace(tmp, engine.live_file)
    engine.poll()


def steps(engine: live_engine.LiveEngine, arm: str) -> float:
    return sum(c.steps for (a, _), c in engine.counters.counts.items() if a == arm)


def test_without_live_json_the_started_table_is_served_and_counted(engine: live_engine.LiveEngine,
                                                                   sched: FakeScheduler) -> None:
    engine.poll()
    sched.step(5)
    assert sched.drafted == [N] * 5
    assert engine.in_force.key == "1-256:4" and steps(engine, "1-256:4") == 5 - live.SWITCH_DISCOUNT_STEPS


def test_live_json_replaces_the_list_object_at_the_next_step(engine: live_engine.LiveEngine,
                                                             sched: FakeScheduler) -> None:
    started = sched.dynamic_sd_lookup
    assert started is not None
    before = list(started)
    write(engine, {"arms": [[[1, 2, 1], [3, 256, 3]]]})
    assert sched.dynamic_sd_lookup is started  # nothing swapped outside the scheduler's own step
    sched.step(4)
    assert sched.drafted == [1] * 4
    assert sched.dynamic_sd_lookup is not started and started == before  # replaced, never mutated
    assert sched.dynamic_sd_lookup == build_lookup([[1, 2, 1], [3, 256, 3]], MAX_SEQS, N)
    sched.batch = 5
    sched.step(1)
    assert sched.drafted[-1] == 3
    assert steps(engine, "1-2:1,3-256:3") == 5 - live.SWITCH_DISCOUNT_STEPS


def test_a_refused_file_is_counted_logged_once_per_content_and_changes_nothing(
        engine: live_engine.LiveEngine, sched: FakeScheduler, caplog: pytest.LogCaptureFixture) -> None:
    write(engine, {"arms": [[[1, 256, 2]]]})
    caplog.set_level(logging.WARNING, logger=live_engine.log.name)
    bad = {"arms": [[[1, 256, N + 1]]]}
    write(engine, bad)
    write(engine, {**bad, "seed": 0})  # other bytes, same refusal: counted and logged again
    write(engine, bad)  # rewritten as before: counted, not logged again
    assert engine.rejected == 3
    assert len(caplog.records) == 2 and "arms[0][0][2]" in caplog.records[0].getMessage()
    sched.step(3)
    assert sched.drafted == [2] * 3 and engine.in_force.key == "1-256:2"


def test_a_huge_file_is_refused_unread(engine: live_engine.LiveEngine) -> None:
    write(engine, b" " * (live.MAX_LIVE_BYTES + 10))
    assert engine.rejected == 1 and engine.in_force.key == "1-256:4"


def test_a_vanished_file_keeps_what_is_served(engine: live_engine.LiveEngine, sched: FakeScheduler) -> None:
    write(engine, {"arms": [[[1, 256, 1]]]})
    engine.live_file.unlink()
    engine.poll()
    sched.step(2)
    assert sched.drafted == [1, 1] and engine.rejected == 0


def test_switchback_alternates_arms_and_a_rewrite_of_the_same_content_keeps_the_cadence(
        engine: live_engine.LiveEngine, sched: FakeScheduler, clock: Clock) -> None:
    doc = {"arms": [[[1, 256, 1]], [[1, 256, 3]]], "dwellSeconds": [0.5, 1.0], "seed": 11}
    write(engine, doc)
    replay = live.ArmClock(live.parse_live(json.dumps(doc).encode(), N, "ngram"), clock.now)
    for i in range(600):  # 6 s of 10 ms steps
        if i == 300:
            write(engine, doc)  # same arms: the clock is not restarted
        engine.tick(clock.now)
        expected = (1, 3)[replay.arm_at(clock.now)]
        sched.step()
        assert sched.drafted[-1] == expected
    assert steps(engine, "1-256:1") > 50 and steps(engine, "1-256:3") > 50
    assert engine.counters.discounted["1-256:1"] >= 2 * live.SWITCH_DISCOUNT_STEPS


def test_step_seconds_run_from_the_previous_completion_while_busy_else_from_schedule(
        engine: live_engine.LiveEngine, sched: FakeScheduler, clock: Clock) -> None:
    sched.step(live.SWITCH_DISCOUNT_STEPS)  # discounted
    sched.step(2)  # busy: each from the previous step's completion, 10 ms
    clock.now += 0.5  # the engine loop's own time between steps counts to the next step
    sched.step(1)
    sched.unfinished = False
    sched.step(1)  # the last before idling
    clock.now += 60  # idle: not counted
    sched.unfinished = True
    sched.step(1)  # after idling: from its schedule call
    (counts,) = engine.counters.counts.values()
    assert counts.steps == 5 and counts.step_seconds == pytest.approx(0.01 * 5 + 0.5)


def test_counts_come_from_the_step_outputs_and_the_spec_decoding_stats(engine: live_engine.LiveEngine,
                                                                       sched: FakeScheduler) -> None:
    sched.batch = 3
    sched.step(live.SWITCH_DISCOUNT_STEPS + 2)
    c = engine.counters.counts[("1-256:4", "2-3")]
    assert (c.steps, c.sequence_steps, c.output_tokens, c.draft_tokens, c.accepted_tokens) == (2, 6, 18, 24, 12)


def test_a_failure_while_counting_stops_counting_and_keeps_the_engine_serving(
        engine: live_engine.LiveEngine, sched: FakeScheduler, caplog: pytest.LogCaptureFixture) -> None:
    sched.has_unfinished_requests = None  # type: ignore[assignment,method-assign]
    out = sched.update_from_output(sched.schedule(), None)
    assert out[0].outputs  # the step's outputs still go back to vLLM
    sched.step(5)
    assert not engine.counters.counts and "counting a step failed" in caplog.text


def test_the_state_file_holds_what_metrics_relays(engine: live_engine.LiveEngine, sched: FakeScheduler) -> None:
    write(engine, {"arms": [[[1, 256, 2]]]})
    write(engine, b"{")
    sched.step(4)
    engine.write_state()
    assert engine.state_file is not None
    families = {f.name: f for f in text_string_to_metric_families(engine.state_file.read_text())}
    assert {s.labels[live.LABEL_BAND]: s.value for s in families[live.LIVE_K].samples} == \
        {b: 2 for b in live.bands_up_to(MAX_SEQS)}
    assert families[live.LIVE_REJECTED].samples[0].value == 1
    assert families[live.SB_STEPS].samples[0].labels == {live.LABEL_ARM: "1-256:2", live.LABEL_BAND: "2-3"}
    assert [p.name for p in engine.state_file.parent.iterdir() if p.name.startswith(".")] == []


def test_the_control_thread_follows_the_file_on_its_own(sched: FakeScheduler, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_engine, "POLL_S", 0.01)
    e = live_engine.LiveEngine(sched, tmp_path / "live.json", tmp_path / "state.prom", build_lookup)
    e.wrap()
    (tmp_path / "live.json").write_text(json.dumps({"arms": [[[1, 256, 1]]]}))
    e.start()
    try:
        for _ in range(200):
            if e.in_force.key == "1-256:1" and (tmp_path / "state.prom").exists():
                break
            e._stop.wait(0.01)
    finally:
        e.stop()
    assert e.in_force.key == "1-256:1" and live.LIVE_K in (tmp_path / "state.prom").read_text()


def test_an_engine_started_without_a_table_is_not_followed(clock: Clock, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_speculative_tokens_per_batch_size"):
        live_engine.LiveEngine(FakeScheduler(clock, table=[]), tmp_path / "live.json", None, build_lookup)


def test_the_plugin_does_nothing_without_the_live_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(live.LIVE_FILE_ENV, raising=False)
    live_engine.register()  # would import vLLM, absent here, if it did anything
    assert "vllm" not in sys.modules
