"""The simulated engine under a live draft length (live.json, `specpilot_runtime.live`): one arm serves its
K, switchback alternates arms and counts each, a refused file changes nothing, and a switch costs what it
costs in vLLM (its first step still drafts the old K, and is discounted)."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path
from typing import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import live
from specpilot_runtime import vllm_metrics as vm
from specpilot_runtime.cli import build_parser
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.speculative import SpeculativeConfig
from specpilot_harness.sim.command import config_from_args
from specpilot_harness.sim.engine import Engine, StepOutcome
from specpilot_harness.sim.launch import sim_config, simulate_argv
from specpilot_harness.sim.live_arms import LiveArms, started_arm
from specpilot_harness.sim.profile import Profile, read_profile
from specpilot_harness.sim.server import SimConfig, SimServer

N = 4
MODEL = "sim-model"
FAST = 200.0


def profile(noise: float = 0.1) -> Profile:
    return Profile(name="p", method="mtp", max_n=N, survival=[0.9, 0.8, 0.7, 0.6], noise=noise,
                   step_time_ms={1: [10.0, 11.0, 12.0, 13.0, 14.0], 16: [20.0, 22.0, 24.0, 26.0, 28.0]})


def doc(*ks: int, dwell: tuple[float, float] = (0.5, 0.5), seed: int = 3) -> bytes:
    return live.LiveConfig(tuple(live.Arm(((1, 1024, k),)) for k in ks), dwell, seed).to_json().encode()


def live_engine(seed: int = 1, schedule: tuple[tuple[int, int, int], ...] | None = None,
                noise: float = 0.1) -> Engine:
    engine = Engine(profile(noise), N, random.Random(seed), schedule=schedule)
    engine.live = LiveArms(started_arm(schedule, N))
    return engine


def arms_of(engine: Engine) -> LiveArms:
    assert engine.live is not None
    return engine.live


def busy(engine: Engine, batch: int = 6) -> None:
    for i in range(batch):
        engine.submit(f"r{i}", prompt_tokens=4, max_tokens=10**9)
    engine.step()  # the prefill step


def drafted_k(step: StepOutcome) -> int:
    """The K a step drafted, from specpilot's drafted-per-position counter (only positions < K count)."""
    return sum(1 for d in step.drafted_per_pos if d)


def test_one_arm_serves_its_k_and_later_positions_are_never_accepted() -> None:
    engine = live_engine()
    arms_of(engine).follow(live.parse_live(doc(2), N, "mtp"), engine.clock)
    busy(engine)
    steps = [engine.step() for _ in range(400)]

    assert all(s.drafted_per_pos[2:] == (0, 0) and s.accepted_per_pos[2:] == (0, 0) for s in steps)
    assert {drafted_k(s) for s in steps[1:]} == {2}
    assert all(s.draft_tokens == N * s.drafts for s in steps)  # vLLM counts N per draft whatever K is
    assert all(s.duration > 0 for s in steps)
    counts = arms_of(engine).counters.counts
    assert set(counts) == {("1-1024:2", "4-7")}
    band = counts[("1-1024:2", "4-7")]
    # The engine's first two steps (the prefill one and steps[0]) are discounted, as after any switch.
    assert band.draft_tokens == N * sum(s.drafts for s in steps[1:])  # as vLLM's stats count: N per draft
    assert band.accepted_tokens == sum(s.accepted_tokens for s in steps[1:])
    assert band.output_tokens == sum(s.generation_tokens for s in steps[1:])
    assert band.sequence_steps == 6 * band.steps


def test_without_a_live_config_the_engine_draws_what_it_drew_before() -> None:
    """A live engine that has accepted no file serves its started table with the same random numbers."""
    for schedule in (None, ((1, 4, 4), (5, 1024, 2))):
        plain = Engine(profile(), N, random.Random(5), schedule=schedule)
        followed = live_engine(5, schedule)
        busy(plain)
        busy(followed)
        assert [plain.step() for _ in range(100)] == [followed.step() for _ in range(100)]


def _dwell_shares(config: live.LiveConfig, start: float, end: float) -> dict[str, float]:
    """The share of [start, end) each arm is in force, replayed from a clock of the same seed."""
    clock = live.ArmClock(config, start)
    dt = 0.001
    hits: dict[str, float] = {}
    t = start
    while t < end:
        key = config.arms[clock.arm_at(t)].key
        hits[key] = hits.get(key, 0.0) + 1
        t += dt
    return {k: v / sum(hits.values()) for k, v in hits.items()}


def test_two_arms_alternate_and_each_counts_in_proportion_to_its_dwell() -> None:
    engine = live_engine()
    config = live.parse_live(doc(1, 3, dwell=(0.5, 2.0), seed=11), N, "mtp")
    arms_of(engine).follow(config, 0.0)
    busy(engine)
    while engine.clock < 60.0:
        engine.step()

    counters = arms_of(engine).counters
    seconds = {arm: c.step_seconds for (arm, _), c in counters.counts.items()}
    assert set(seconds) == {"1-1024:1", "1-1024:3"}
    shares = _dwell_shares(config, 0.0, engine.clock)
    for arm, s in seconds.items():
        assert s / sum(seconds.values()) == pytest.approx(shares[arm], abs=0.03), arm
    steps = {arm: c.steps for (arm, _), c in counters.counts.items()}
    # Each arm's step time and acceptance are its own: the shorter draft steps faster, gives fewer tokens.
    per_step = {arm: seconds[arm] / steps[arm] for arm in steps}
    assert per_step["1-1024:1"] < per_step["1-1024:3"]
    tokens = {arm: c.output_tokens / c.sequence_steps for (arm, _), c in counters.counts.items()}
    assert 1.0 < tokens["1-1024:1"] < tokens["1-1024:3"]


def test_a_switchs_first_step_drafts_the_old_k_and_is_discounted() -> None:
    engine = live_engine()
    config = live.parse_live(doc(1, 3, dwell=(0.5, 0.5), seed=2), N, "mtp")
    arms = engine.live
    assert arms is not None
    arms.follow(config, 0.0)
    busy(engine)
    switches = 0
    previous = arms.arm_at(engine.clock)
    since_switch = 99
    while engine.clock < 10.0:
        now = arms.arm_at(engine.clock)
        step = engine.step()
        since_switch = 0 if now != previous else since_switch + 1
        if since_switch == 0:
            switches += 1
            assert drafted_k(step) == previous.table[0][2]  # scheduled while the old arm was in force
        elif step.drafts:
            assert drafted_k(step) == now.table[0][2]
        previous = now
    assert switches >= 10
    # The contract discounts the steps right after each switch (and the first two the engine ran).
    assert sum(arms.counters.discounted.values()) == live.SWITCH_DISCOUNT_STEPS * (switches + 1)


def test_a_new_config_takes_effect_one_step_late_and_an_idle_engine_switches_at_once() -> None:
    engine = live_engine()
    busy(engine)
    assert drafted_k(engine.step()) == N  # the started table
    arms_of(engine).follow(live.parse_live(doc(2), N, "mtp"), engine.clock)
    assert drafted_k(engine.step()) == N  # in flight when the file was read
    assert drafted_k(engine.step()) == 2

    # Without noise, a step's time tells its K even when nobody drafts (a step of new requests only).
    idle = live_engine(noise=0.0)
    arms_of(idle).follow(live.parse_live(doc(1), N, "mtp"), 0.0)
    busy(idle)
    idle.step()
    for i in range(6):
        idle.abort(f"r{i}")
    arms_of(idle).follow(live.parse_live(doc(3), N, "mtp"), idle.clock)
    idle.catch_up(idle.clock + 1.0)
    for i in range(6):
        idle.submit(f"s{i}", prompt_tokens=4, max_tokens=10)
    first = idle.step()
    # Nothing was in flight: the first step after the idle spell is scheduled under the new arm.
    assert first.duration == pytest.approx(idle.profile.step_time(3, 6) / 1000)
    assert first.duration != pytest.approx(idle.profile.step_time(1, 6) / 1000)


# ---- over HTTP: the file, its polling, /metrics ------------------------------------------------------------

def server_config(path: Path, time_scale: float = FAST) -> SimConfig:
    p = read_profile(None, "example-mtp-sequential")
    return SimConfig(profile=p, num_speculative_tokens=N, served_model_name=MODEL, method=p.method, port=0,
                     time_scale=time_scale, seed=7, max_num_seqs=16, live_file=str(path), live_poll_s=0.02)


def live_k(text: str) -> dict[str, float]:
    """The K in force per band, as /metrics says."""
    return {s.labels["band"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == live.LIVE_K}


async def wait_metrics(client: httpx.AsyncClient, url: str, ok: Callable[[str], bool]) -> str:
    for _ in range(500):
        text = (await client.get(f"{url}/metrics")).text
        if ok(text):
            return text
        await asyncio.sleep(0.01)
    raise AssertionError(f"/metrics never satisfied the check:\n{text[-3000:]}")


async def load(client: httpx.AsyncClient, url: str, requests: int = 8, max_tokens: int = 200) -> None:
    async def one() -> None:
        r = await client.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": max_tokens})
        assert r.status_code == 200, r.text
    await asyncio.gather(*(one() for _ in range(requests)))


async def test_the_served_k_follows_the_file_and_vllms_counters_show_it(tmp_path: Path) -> None:
    path = tmp_path / "live.json"
    async with SimServer(server_config(path)) as sim, httpx.AsyncClient(timeout=30) as client:
        # No file yet: the started table (N everywhere) is in force.
        text = await wait_metrics(client, sim.url, lambda t: live.LIVE_K in t)
        assert set(live_k(text).values()) == {float(N)}
        assert set(live_k(text)) == set(live.bands_up_to(16))
        path.write_bytes(doc(2))
        await wait_metrics(client, sim.url, lambda t: set(live_k(t).values()) == {2.0})
        before = vm.parse((await client.get(f"{sim.url}/metrics")).text)
        await load(client, sim.url)
        after = vm.parse((await client.get(f"{sim.url}/metrics")).text)
    window = vm.delta(before, after)
    assert window.drafts > 0 and window.draft_tokens == N * window.drafts
    assert window.accepted_per_pos[2:] == (0.0, 0.0) and window.accepted_per_pos[0] > 0
    assert window.drafted_per_pos is not None and window.drafted_per_pos[2:] == (0.0, 0.0)
    served = {k: v for k, v in window.switchback.items() if k[0] == "1-1024:2"}
    assert served and sum(v[0] for v in served.values()) > 0  # steps counted under the arm asked for


async def test_a_refused_file_is_logged_once_counted_and_the_previous_arm_stays(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "live.json"
    path.write_bytes(doc(2))
    async with SimServer(server_config(path)) as sim, httpx.AsyncClient(timeout=30) as client:
        await wait_metrics(client, sim.url, lambda t: set(live_k(t).values()) == {2.0})
        with caplog.at_level(logging.WARNING, logger="specpilot_harness.sim.server"):
            path.write_bytes(b'{"arms": [[[1, 1024, 9]]]}')  # K beyond the started N
            text = await wait_metrics(client, sim.url, lambda t: f"{live.LIVE_REJECTED}_total 1.0" in t)
            await asyncio.sleep(0.2)  # several polls of the same refused file
            path.write_bytes(b'{"arms": [[[1, 1024, 9]]]}')  # written again (a new mtime): counted, not logged
            text = await wait_metrics(client, sim.url, lambda t: f"{live.LIVE_REJECTED}_total 2.0" in t)
        assert set(live_k(text).values()) == {2.0}
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1 and "arms[0][0][2]" in refused[0] and "0..4" in refused[0], refused
        await load(client, sim.url, requests=4, max_tokens=50)
        after = vm.parse((await client.get(f"{sim.url}/metrics")).text)
        assert after.accepted_per_pos[2:] == (0.0, 0.0)
        assert f"{live.LIVE_REJECTED}_total 2.0" in (await client.get(f"{sim.url}/metrics")).text
        path.write_bytes(doc(3))  # a good file after a bad one is followed
        await wait_metrics(client, sim.url, lambda t: set(live_k(t).values()) == {3.0})


async def test_two_arms_over_http_both_count(tmp_path: Path) -> None:
    path = tmp_path / "live.json"
    path.write_bytes(doc(1, 3, dwell=(0.5, 0.5)))
    # Dwell times are wall seconds: at 10x, about 1.5 s of wall time under load sees both arms.
    async with SimServer(server_config(path, time_scale=10.0)) as sim, httpx.AsyncClient(timeout=30) as client:
        await wait_metrics(client, sim.url, lambda t: 'arm="1-1024:3"' in t)
        await load(client, sim.url, requests=8, max_tokens=4000)
        snap = vm.parse((await client.get(f"{sim.url}/metrics")).text)
    steps = {arm: 0.0 for arm in ("1-1024:1", "1-1024:3")}
    for (arm, _), values in snap.switchback.items():
        steps[arm] += values[0]
    assert all(v > 20 for v in steps.values()), steps


async def test_an_engine_without_a_live_file_exports_nothing_of_it() -> None:
    p = read_profile(None, "example-mtp-sequential")
    config = SimConfig(profile=p, num_speculative_tokens=N, served_model_name=MODEL, method=p.method, port=0,
                       time_scale=FAST, seed=7)
    async with SimServer(config) as sim, httpx.AsyncClient(timeout=30) as client:
        text = (await client.get(f"{sim.url}/metrics")).text
    assert "specpilot:live" not in text and "switchback" not in text


def test_process_and_in_process_launches_follow_the_same_live_file() -> None:
    engine = EngineConfig(model="Qwen/Qwen3.5-27B", port=8000, live_file="/etc/specpilot/live/live.json",
                          speculative=SpeculativeConfig(method="mtp", num_speculative_tokens=3,
                                                        num_speculative_tokens_per_batch_size=[[1, 1024, 3]]))
    p = read_profile(None, "example-mtp-sequential")
    in_process = sim_config(engine, p, "127.1.1.2", time_scale=20.0, seed=1)
    argv = simulate_argv(engine, "bundled.json", p.name, "127.1.1.2", time_scale=20.0, seed=1)
    args = build_parser().parse_args(argv[argv.index("simulate"):])
    args.profile = None
    assert config_from_args(args) == in_process
    assert in_process.live_file == "/etc/specpilot/live/live.json"
