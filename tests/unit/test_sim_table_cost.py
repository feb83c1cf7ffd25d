"""A batch-size table's cost in the simulated engine (`Profile.table_cost`): an engine that serves a table (a
schedule, or live arms, as a switchback pod's engine.json asks) steps that share slower at every K; a static
pod's engine (no table rows, no live file) steps as the profile says. The sandbox's
`specpilot.io/sim-table-cost` annotation overrides the profile's cost and refuses what is not a share."""

from __future__ import annotations

import json
import random

import pytest

from specpilot_harness.sandbox.pod_runtime import PodContext
from specpilot_harness.sandbox.sim_pods import SimEngineRuntime
from specpilot_harness.sim.engine import Engine
from specpilot_harness.sim.launch import SIM_TABLE_COST_ANNOTATION, sim_config
from specpilot_harness.sim.live_arms import LiveArms, started_arm
from specpilot_harness.sim.profile import Profile, ProfileError, load_profiles
from specpilot_harness.sim.server import SimServer
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.speculative import SpeculativeConfig

N = 3
STEP_MS = {1: [10.0, 12.0, 14.0, 16.0], 8: [17.0, 19.0, 21.0, 23.0]}


def make_profile(table_cost: float = 0.12) -> Profile:
    return Profile(name="p", method="mtp", max_n=N, survival=[0.8, 0.5, 0.25], step_time_ms=STEP_MS,
                   table_cost=table_cost)


def durations(engine: Engine, requests: int = 4) -> list[float]:
    for i in range(requests):
        engine.submit(f"r{i}", prompt_tokens=16, max_tokens=30)
    out = []
    while engine.busy:
        out.append(engine.step().duration)
    return out


def test_an_engine_serving_a_table_steps_slower_by_the_profiles_cost_and_a_static_one_does_not() -> None:
    static = durations(Engine(make_profile(), N, random.Random(3)))
    table = durations(Engine(make_profile(), N, random.Random(3), schedule=((1, 1024, N),)))
    assert len(table) == len(static)  # the same draws: only the clock runs slower
    assert all(t == pytest.approx(s * 1.12) for t, s in zip(table, static))
    # The profile's own step time is what the static engine steps at.
    assert static[0] == pytest.approx(make_profile().step_time(N, 4) / 1000.0)


def test_live_arms_pay_the_tables_cost_even_at_k_zero() -> None:
    """A switchback pod's engine serves a table whatever K its arm drafts (vllm-project/vllm#49548: +6.6-21.6% TPOT at
    K = 0)."""
    live = Engine(make_profile(0.2), N, random.Random(5))
    live.live = LiveArms(started_arm(None, N))
    assert live.has_table
    plain = Engine(make_profile(0.2), N, random.Random(5))
    assert durations(live) == pytest.approx([d * 1.2 for d in durations(plain)])
    zero = Engine(make_profile(0.2), N, random.Random(5), schedule=((1, 1024, 0),))
    zero.submit("a", 16, 10)
    assert zero.step().duration == pytest.approx(STEP_MS[1][0] / 1000.0 * 1.2)


def test_a_free_table_steps_as_every_profile_did_before() -> None:
    assert make_profile(0.0) == Profile(name="p", method="mtp", max_n=N, survival=[0.8, 0.5, 0.25],
                                        step_time_ms=STEP_MS)
    free = durations(Engine(make_profile(0.0), N, random.Random(3), schedule=((1, 1024, N),)))
    assert free == durations(Engine(make_profile(0.0), N, random.Random(3)))


def _engine_json(rows: list[list[int]] | None, live_file: str | None) -> EngineConfig:
    return EngineConfig(model="org/model", port=8000, live_file=live_file,
                        speculative=SpeculativeConfig(method="mtp", num_speculative_tokens=N,
                                                      num_speculative_tokens_per_batch_size=rows))


def test_a_switchback_pods_engine_json_serves_a_table_and_a_static_pods_does_not() -> None:
    """What the operator renders: switchback pods carry table rows (the stable a live file too), a static pod
    (the table check's, or after the fall-back) neither."""
    stable = SimServer(sim_config(_engine_json([[1, 1024, N]], "/etc/specpilot/live/live.json"), make_profile(),
                                  "127.0.0.1")).engine
    canary = SimServer(sim_config(_engine_json([[1, 1024, 2]], None), make_profile(), "127.0.0.1")).engine
    static = SimServer(sim_config(_engine_json(None, None), make_profile(), "127.0.0.1")).engine
    assert stable.has_table and canary.has_table and not static.has_table
    assert durations(canary)[0] == pytest.approx(make_profile().step_time(2, 4) / 1000.0 * 1.12)
    assert durations(static)[0] == pytest.approx(make_profile().step_time(N, 4) / 1000.0)


def test_a_profile_file_sets_the_cost_as_a_share_and_refuses_more() -> None:
    doc = {"profiles": [{"name": "p", "method": "mtp", "max_n": 1, "survival": [0.5],
                         "step_time_ms": {"1": [10, 12]}, "table_cost": 0.07}]}
    assert load_profiles(json.dumps(doc))["p"].table_cost == 0.07
    doc["profiles"][0]["table_cost"] = 1.5
    with pytest.raises(ProfileError, match="table_cost"):
        load_profiles(json.dumps(doc))


def _ctx(annotations: dict[str, str]) -> PodContext:
    engine = {"model": "org/model", "port": 8000, "speculative": {"method": "mtp", "num_speculative_tokens": 3},
              "live_file": "/etc/specpilot/live/live.json"}
    pod = {"metadata": {"name": "chat-abc-1", "namespace": "ns", "uid": "u1"}}
    owner = {"metadata": {"name": "chat", "uid": "u3",
                          "annotations": {"specpilot.io/sim-profile": "qwen35-122b-mtp-math500", **annotations}}}
    return PodContext(pod, "127.0.0.1", {"/etc/specpilot/engine.json": json.dumps(engine)}, (owner,))


def test_the_annotation_gives_a_bundled_profile_a_table_cost() -> None:
    runtime = SimEngineRuntime()
    plain = runtime.engine_for(_ctx({}))
    assert plain is not None and plain.profile.table_cost == 0.0
    costly = runtime.engine_for(_ctx({SIM_TABLE_COST_ANNOTATION: "0.12"}))
    assert costly is not None and costly.profile.table_cost == 0.12
    assert costly.profile.model_copy(update={"table_cost": 0.0}) == plain.profile  # nothing else changes
    assert runtime.profiles["qwen35-122b-mtp-math500"].table_cost == 0.0  # the runner's copy stays as it was
    free = runtime.engine_for(_ctx({SIM_TABLE_COST_ANNOTATION: "0"}))
    assert free is not None and free.profile == plain.profile


@pytest.mark.parametrize("value", ["nan", "-0.1", "1.5", "inf", "-inf", "fast", ""])
def test_the_annotation_refuses_what_is_not_a_share_and_names_itself(value: str) -> None:
    with pytest.raises(ValueError, match=SIM_TABLE_COST_ANNOTATION):
        SimEngineRuntime().engine_for(_ctx({SIM_TABLE_COST_ANNOTATION: value}))
