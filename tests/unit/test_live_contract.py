"""live.py, the draft-length contract: live.json refused naming the field, the arm clock, the switchback
counters and what they expose."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import live
from specpilot_runtime import vllm_metrics as vm

N = 4


def parse(doc: object, n: int = N, method: str = "ngram", dp: int = 1) -> live.LiveConfig:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return live.parse_live(data, n, method, dp)


def refused_at(doc: object, **kw: object) -> tuple[str, str]:
    with pytest.raises(live.LiveConfigError) as e:
        parse(doc, **kw)  # type: ignore[arg-type]
    return e.value.field, str(e.value)


def test_one_arm_and_switchback_parse() -> None:
    one = parse({"arms": [[[1, 8, 3], [9, 256, 1]]]})
    assert not one.switchback and one.arms[0].key == "1-8:3,9-256:1"
    two = parse({"arms": [[[1, 256, 1]], [[1, 256, 3]]], "dwellSeconds": [1, 2.5], "seed": 9})
    assert two.switchback and two.dwell_s == (1.0, 2.5) and two.seed == 9
    assert parse(json.loads(two.to_json())) == two


@pytest.mark.parametrize("doc,field", [
    ({"arms": [[[1, 256, N + 1]]]}, "arms[0][0][2]"),  # K above the started N
    ({"arms": [[[1, 256, -1]]]}, "arms[0][0][2]"),
    ({"arms": [[[1, 256, True]]]}, "arms[0][0][2]"),  # a bool is no whole number here
    ({"arms": [[[1, 256, 2.0]]]}, "arms[0][0][2]"),
    ({"arms": [[[1, 256, "2"]]]}, "arms[0][0][2]"),
    ({"arms": [[[2, 256, 2]]]}, "arms[0][0]"),  # the first range must start at 1
    ({"arms": [[[1, 8, 2], [8, 256, 1]]]}, "arms[0][1]"),  # overlap
    ({"arms": [[[1, 8, 2], [4, 6, 1]]]}, "arms[0][1]"),  # not increasing
    ({"arms": [[[1, 8, 2]], [[1, 8, 2]]]}, "arms"),  # the same table twice
    ({"arms": [[[1, 8, k]] for k in range(5)]}, "arms"),  # 5 arms
    ({"arms": []}, "arms"),
    ({"arms": [[]]}, "arms[0]"),
    ({"arms": [[[1, 2, 1]] * 17]}, "arms[0]"),  # more rows than a table holds
    ({"arms": [[[1, 256]]]}, "arms[0][0]"),
    ({"arms": [[[1, 10**9, 1]]]}, "arms[0][0][1]"),
    ({"arms": [[[1, 256, 1]]], "dwellSeconds": [0.1, 1]}, "dwellSeconds"),
    ({"arms": [[[1, 256, 1]]], "dwellSeconds": [3, 2]}, "dwellSeconds"),
    ({"arms": [[[1, 256, 1]]], "dwellSeconds": [1, True]}, "dwellSeconds"),
    ({"arms": [[[1, 256, 1]]], "seed": -1}, "seed"),
    ({"arms": [[[1, 256, 1]]], "seed": 1.5}, "seed"),
    ({"arms": [[[1, 256, 1]]], "k": 3}, "live.json"),  # unknown key
    ([[[1, 256, 1]]], "live.json"),
])
def test_hostile_live_json_is_refused_naming_the_field(doc: object, field: str) -> None:
    assert refused_at(doc)[0] == field


@pytest.mark.parametrize("data", [
    b'{"arms": [[[1, 256, NaN]]]}', b'{"arms": [[[1, 256, 1]]], "dwellSeconds": [1, Infinity]}',
    b'{"arms": [[[1, 256, -Infinity]]]}', b"\xff\xfe", b"{", b"",
])
def test_not_json_nan_and_infinity_are_refused(data: bytes) -> None:
    assert refused_at(data)[0] == "live.json"


def test_a_huge_file_is_refused_by_its_size_before_parsing() -> None:
    field, why = refused_at(b"[" * (live.MAX_LIVE_BYTES + 1))
    assert field == "live.json" and str(live.MAX_LIVE_BYTES) in why


def test_methods_without_a_table_and_data_parallel_engines_are_refused() -> None:
    ok = {"arms": [[[1, 256, 1]]]}
    assert "suffix" in refused_at(ok, method="suffix")[1]
    assert "data parallelism" in refused_at(ok, dp=2)[1]


def test_arm_keys_round_trip_and_hostile_labels_are_refused() -> None:
    arm = live.Arm(((1, 8, 3), (9, 64, 1)))
    assert live.Arm.from_key(arm.key) == arm
    assert arm.k_at(1, N) == 3 and arm.k_at(20, N) == 1 and arm.k_at(1000, N) == 1
    for bad in ("1-8", "a-b:3", "1-8:3,", "2-8:3", "x" * 300, "1-8:3\n"):
        with pytest.raises(ValueError):
            live.Arm.from_key(bad)


def test_the_arm_clock_replays_with_its_seed_and_visits_every_arm_each_round() -> None:
    config = parse({"arms": [[[1, 256, k]] for k in (1, 2, 3)], "dwellSeconds": [0.5, 1.0], "seed": 3})
    times = [100 + i * 0.1 for i in range(600)]
    first = [live.ArmClock(config, 100.0).arm_at(t) for t in times]
    clock = live.ArmClock(config, 100.0)
    assert [clock.arm_at(t) for t in times] == first  # replayable
    assert set(first) == {0, 1, 2}
    # Every round (three dwells) holds each arm once.
    runs = [a for i, a in enumerate(first) if i == 0 or first[i - 1] != a]
    assert len(runs) > 30
    other = [live.ArmClock(parse({**json.loads(config.to_json()), "seed": 4}), 100.0).arm_at(t) for t in times]
    assert other != first


def test_a_single_arm_is_always_in_force() -> None:
    clock = live.ArmClock(parse({"arms": [[[1, 256, 2]]]}), 0.0)
    assert {clock.arm_at(t) for t in (0.0, 5.0, 1e6)} == {0}


def test_the_arm_clock_keeps_its_memory_bounded_on_a_long_run() -> None:
    clock = live.ArmClock(parse({"arms": [[[1, 256, 1]], [[1, 256, 2]]], "dwellSeconds": [0.5, 0.5]}), 0.0)
    seen = Counter(clock.arm_at(t * 0.25) for t in range(40_000))  # 10,000 s, 20,000 dwells
    assert seen[0] and seen[1] and len(clock._ends) <= 4096 + 2


def test_switchback_counts_per_arm_and_band_and_discounts_the_steps_after_a_switch() -> None:
    c = live.SwitchbackCounters()
    for _ in range(5):
        c.record_step("1-256:1", 3, 0.02, 4, 3, 2, 0)
    for _ in range(3):
        c.record_step("1-256:3", 9, 0.05, 20, 27, 10, 1)
    assert c.discounted == {"1-256:1": live.SWITCH_DISCOUNT_STEPS, "1-256:3": live.SWITCH_DISCOUNT_STEPS}
    one = c.counts[("1-256:1", "2-3")]
    assert one.steps == 5 - live.SWITCH_DISCOUNT_STEPS and one.sequence_steps == 3 * one.steps
    assert one.output_tokens == 4 * one.steps and one.draft_tokens == 3 * one.steps
    three = c.counts[("1-256:3", "8-15")]
    assert three.steps == 1 and three.finished == 1 and three.step_seconds == pytest.approx(0.05)
    # Back to the first arm: its first steps are discounted again, its counts resume.
    for _ in range(3):
        c.record_step("1-256:1", 3, 0.02, 4, 3, 2, 0)
    assert c.counts[("1-256:1", "2-3")].steps == 4


def test_switchback_ignores_nonsense_steps_and_forgets_the_oldest_arms() -> None:
    c = live.SwitchbackCounters()
    for bad in (0, -1):
        for _ in range(3):
            c.record_step("1-256:1", bad, 0.1, 1, 1, 1)
    for seconds in (float("nan"), float("inf"), -1.0):
        c.record_step("1-256:1", 1, seconds, 1, 1, 1)
    assert not c.counts
    for k in range(live.MAX_REMEMBERED_ARMS + 3):
        for _ in range(live.SWITCH_DISCOUNT_STEPS + 1):
            c.record_step(f"1-256:{k}", 1, 0.1, 1, 1, 1)
    arms = {a for a, _ in c.counts} | set(c.discounted)
    assert len(arms) == live.MAX_REMEMBERED_ARMS and "1-256:0" not in arms


def test_band_of_and_bands_up_to() -> None:
    assert [live.band_of(b) for b in (1, 2, 3, 4, 7, 8, 256)] == ["1-1", "2-3", "2-3", "4-7", "4-7", "8-15",
                                                                 "256-511"]
    assert live.bands_up_to(8) == ["1-1", "2-3", "4-7", "8-15"]
    assert live.band_of(10**9) == live.band_of(live.MAX_BATCH_SIZE) and live.band_of(0) == "1-1"
    for bad in ("3-5", "0-0", "1-2", "x", "1-1-1"):
        with pytest.raises(ValueError):
            live.band_range(bad)


def test_exposition_reads_back_as_typed_counters_and_gauges() -> None:
    c = live.SwitchbackCounters()
    for _ in range(4):
        c.record_step("1-8:3,9-256:1", 2, 0.01, 5, 6, 3, 1)
    in_force = live.Arm(((1, 8, 3), (9, 256, 1)))
    text = live.exposition(c, in_force, [in_force, live.Arm.uniform(2)], N, live.bands_up_to(16), rejected=2)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families[live.SB_STEPS].type == "counter" and families[live.LIVE_REJECTED].type == "counter"
    assert families[live.LIVE_REJECTED].samples[0].value == 2
    # K at each band's smallest batch size.
    assert {s.labels[live.LABEL_BAND]: s.value for s in families[live.LIVE_K].samples} == \
        {"1-1": 3, "2-3": 3, "4-7": 3, "8-15": 3, "16-31": 1}
    assert {s.labels[live.LABEL_ARM]: s.value for s in families[live.LIVE_ARM_ACTIVE].samples} == \
        {in_force.key: 1, "1-65536:2": 0}
    snap = vm.parse(text)
    steps = 4 - live.SWITCH_DISCOUNT_STEPS
    assert snap.switchback == {(in_force.key, "2-3"): (steps, 0.01 * steps, 2 * steps, 5 * steps, 6 * steps,
                                                       3 * steps, steps)}
    assert "live_config_rejected" not in live.exposition(c, None, [], N, [])
