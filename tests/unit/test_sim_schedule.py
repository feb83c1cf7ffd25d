"""The simulated engine under vLLM 0.33's batch-size schedule (`num_speculative_tokens_per_batch_size`):
K per step by running batch size, acceptance only within K, counters as vLLM exports them."""

from __future__ import annotations

import asyncio
import math
import random

import httpx
import pytest

from specpilot_runtime import vllm_metrics as vm
from specpilot_runtime.cli import build_parser, main
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.speculative import SpeculativeConfig
from specpilot_harness.sim.command import config_from_args
from specpilot_harness.sim.engine import Engine, StepOutcome
from specpilot_harness.sim.launch import sim_config, simulate_argv
from specpilot_harness.sim.metrics import SimMetrics
from specpilot_harness.sim.profile import Profile, read_profile
from specpilot_harness.sim.server import SimConfig, SimServer

N = 4
# K = 4 up to batch 4, 2 from 5 to 8, carried forward over the gap 9..11, 0 (no drafting) from 12.
SCHEDULE = ((1, 4, 4), (5, 8, 2), (12, 4096, 0))
# A parallel drafter whose curve at N = 4 differs from its prefix curve: a K-truncated N-draft must be
# accepted as the N curve's first K positions, not as a draft at K.
CURVE_AT_N = (0.5, 0.4, 0.3, 0.2)


def make_profile() -> Profile:
    return Profile(name="p", method="dflash", max_n=N, survival=[0.9, 0.8, 0.7, 0.6],
                   survival_by_n={N: list(CURVE_AT_N)},
                   step_time_ms={1: [10.0, 11.0, 12.0, 13.0, 14.0], 16: [20.0, 22.0, 24.0, 26.0, 28.0]})


def decode_steps(engine: Engine, batch: int, steps: int) -> list[StepOutcome]:
    """`steps` decode steps at a steady batch (the prefill step first, not returned)."""
    for i in range(batch):
        engine.submit(f"r{i}", prompt_tokens=4, max_tokens=10_000)
    engine.step()
    return [engine.step() for _ in range(steps)]


@pytest.mark.parametrize(("batch", "k"), [(1, 4), (4, 4), (6, 2), (10, 2), (16, 0)],
                         ids=["b1", "b4", "b6", "gap-b10", "b16-off"])
def test_each_step_drafts_the_schedules_k_for_its_running_batch(batch: int, k: int) -> None:
    profile = make_profile()
    step = decode_steps(Engine(profile, N, random.Random(1), schedule=SCHEDULE), batch, 1)[0]

    assert step.batch_size == batch
    assert step.duration == pytest.approx(profile.step_time(k, batch) / 1000)
    drafts = batch if k else 0  # K = 0: nobody drafts, no draft is counted
    assert step.drafts == drafts
    assert step.draft_tokens == N * drafts  # vLLM truncates centrally and still counts N per draft
    assert step.drafted_per_pos == (drafts,) * k + (0,) * (N - k)
    assert step.accepted_per_pos[k:] == (0,) * (N - k)
    assert step.generation_tokens == batch + step.accepted_tokens


def test_acceptance_within_k_follows_the_curve_at_n() -> None:
    steps = decode_steps(Engine(make_profile(), N, random.Random(2), schedule=SCHEDULE), 6, 300)
    drafts = sum(s.drafts for s in steps)
    accepted = [sum(s.accepted_per_pos[pos] for s in steps) for pos in range(N)]

    assert drafts == 6 * 300
    for pos in range(2):
        s_k = CURVE_AT_N[pos]
        assert abs(accepted[pos] / drafts - s_k) < 5 * math.sqrt(s_k * (1 - s_k) / drafts), pos
    assert accepted[2:] == [0, 0]


def test_a_schedule_that_never_cuts_k_changes_nothing() -> None:
    def run(schedule: tuple[tuple[int, int, int], ...] | None) -> list[StepOutcome]:
        return decode_steps(Engine(make_profile(), N, random.Random(3), schedule=schedule), 6, 50)

    assert run(((1, 4096, N),)) == run(None)


def test_counters_are_exported_as_vllm_counts_them() -> None:
    """Steps at batch 2 (K = 4) then batch 6 (K = 2): the plugin counter sees K, vLLM's counters N."""
    engine = Engine(make_profile(), N, random.Random(4), schedule=SCHEDULE)
    metrics = SimMetrics("m", N)
    steps = decode_steps(engine, 2, 100)
    for i in range(2, 6):
        engine.submit(f"late{i}", prompt_tokens=4, max_tokens=10_000)
    steps += [engine.step() for _ in range(101)]  # the first prefills the late four
    for s in steps:
        metrics.record(s)
    snap = vm.parse(metrics.exposition().decode())

    deep = 2 * 100  # drafts that reached positions 3 and 4: the K = 4 phase only
    assert snap.drafts == 2 * 100 + 2 + 6 * 100  # the late prefill step drafted for the two running
    assert snap.draft_tokens == N * snap.drafts
    assert snap.drafted_per_pos == (snap.drafts, snap.drafts, deep, deep)
    assert snap.accepted_tokens == sum(snap.accepted_per_pos)
    assert snap.accepted_per_pos[2] <= deep


def test_without_the_plugin_there_is_no_drafted_counter() -> None:
    metrics = SimMetrics("m", N, drafted_per_position=False)
    for s in decode_steps(Engine(make_profile(), N, random.Random(5), schedule=SCHEDULE), 6, 5):
        metrics.record(s)
    assert vm.parse(metrics.exposition().decode()).drafted_per_pos is None


SCHEDULED_ENGINE = EngineConfig(model="Qwen/Qwen3.5-27B", port=8000, speculative=SpeculativeConfig(
    method="mtp", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[(1, 8, 3), (9, 4096, 1)]))


def test_the_pods_speculative_config_carries_the_schedule_in_process_and_as_a_process() -> None:
    profile = read_profile(None, "example-mtp-sequential")
    in_process = sim_config(SCHEDULED_ENGINE, profile, "127.1.1.2", seed=1)
    argv = simulate_argv(SCHEDULED_ENGINE, "bundled.json", profile.name, "127.1.1.2", seed=1)
    args = build_parser().parse_args(argv[argv.index("simulate"):])
    args.profile = None  # the bundled file stands in for the runner's profiles file

    assert in_process.num_speculative_tokens_per_batch_size == ((1, 8, 3), (9, 4096, 1))
    assert config_from_args(args) == in_process
    assert SimServer(in_process).engine.schedule == in_process.num_speculative_tokens_per_batch_size


@pytest.mark.parametrize(("flags", "message"), [
    (["--num-speculative-tokens", "3", "--num-speculative-tokens-per-batch-size", "[[2, 8, 3]]"],
     "must start at minBatchSize 1"),
    (["--num-speculative-tokens", "3", "--num-speculative-tokens-per-batch-size", "[[1, 8, 5]]"],
     "cannot exceed the started N"),
    (["--num-speculative-tokens", "3", "--num-speculative-tokens-per-batch-size", "[[1, 8]]"], "must be JSON"),
    (["--num-speculative-tokens", "0", "--num-speculative-tokens-per-batch-size", "[[1, 8, 0]]"],
     "needs speculation on"),
])
def test_a_schedule_vllm_would_refuse_exits_2(flags: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--name", "example-mtp-sequential", *flags]) == 2
    assert message in capsys.readouterr().err


async def test_a_served_schedule_shows_in_the_scraped_counters() -> None:
    profile = read_profile(None, "example-mtp-sequential")
    config = SimConfig(profile=profile, num_speculative_tokens=3, served_model_name="m", method=profile.method,
                       port=0, time_scale=10.0, seed=7,
                       num_speculative_tokens_per_batch_size=((1, 4, 3), (5, 4096, 1)))
    async with SimServer(config) as sim, httpx.AsyncClient(timeout=60) as client:
        # Slow enough (about 0.1 s wall) that the requests overlap however late the last one arrives.
        body = {"model": "m", "prompt": "x", "max_tokens": 150}
        await asyncio.gather(*(client.post(f"{sim.url}/v1/completions", json=body) for _ in range(12)))
        snap = vm.parse((await client.get(f"{sim.url}/metrics")).text)

    assert snap.drafted_per_pos is not None
    assert snap.drafted_per_pos[0] == snap.drafts and snap.draft_tokens == 3 * snap.drafts
    # Twelve requests at once step at K = 1 until they thin out: deep positions are drafted less.
    assert snap.drafted_per_pos[1] == snap.drafted_per_pos[2] < snap.drafts / 2
    assert snap.accepted_per_pos[2] <= snap.drafted_per_pos[2]
