"""One drain budget (spec.engine.drainSeconds) sets vLLM's --shutdown-timeout, the runtime's grace period
and the pod's terminationGracePeriodSeconds consistently; the simulated engine drains as vLLM does."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from specpilot.api.drain import MAX_AUTO_DRAIN_S
from specpilot.api.validate import load
from specpilot.render import render
from specpilot.render.pod import PRESTOP_S
from specpilot_harness.sandbox.pod_runtime import pre_stop_sleep
from specpilot_harness.sim.profile import read_profile
from specpilot_harness.sim.server import SimConfig, SimServer
from specpilot_runtime import engine
from specpilot_runtime.engine_config import TEARDOWN_S, EngineConfig, arg_problems
from specpilot_runtime.serve import DEFAULT_GRACE_S, grace_period


def _rendered(**engine_spec: Any) -> tuple[dict[str, Any], EngineConfig]:
    sd = load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
               "spec": {"model": "Qwen/Qwen3-8B", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                        "engine": engine_spec}})
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(sd)}
    cfg = EngineConfig.model_validate_json(objects["ConfigMap", "chat-engine"]["data"]["engine.json"])
    return objects["Deployment", "chat"]["spec"]["template"]["spec"], cfg


@pytest.mark.parametrize("drain", [None, 0, 300])
def test_one_budget_sets_vllm_runtime_and_pod_consistently(drain: int | None) -> None:
    pod, cfg = _rendered(**({} if drain is None else {"drainSeconds": drain}))
    # Automatic (left out): vLLM and the pod get the constant maximum; the runtime cuts it to drain.json's.
    budget = MAX_AUTO_DRAIN_S if drain is None else drain
    assert (cfg.drain_file is None) == (drain is not None)
    argv = engine.argv(cfg)
    assert argv[argv.index("--shutdown-timeout") + 1] == str(budget)
    runtime_grace = grace_period(cfg.model_copy(update={"drain_file": None}), None)
    assert runtime_grace == budget + TEARDOWN_S
    container = pod["containers"][0]
    assert container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", str(PRESTOP_S)]}}
    # The kubelet's SIGKILL comes after preStop, vLLM's drain and its teardown, with slack.
    assert pod["terminationGracePeriodSeconds"] > PRESTOP_S + runtime_grace
    assert pre_stop_sleep(container) == PRESTOP_S


def test_without_a_budget_the_runtime_keeps_its_old_grace_and_vllm_its_default() -> None:
    cfg = EngineConfig(model="m")
    assert "--shutdown-timeout" not in engine.argv(cfg)
    assert grace_period(cfg, None) == DEFAULT_GRACE_S and grace_period(cfg, 3.0) == 3.0


def test_users_cannot_set_shutdown_timeout_in_args() -> None:
    problems = arg_problems(["--shutdown_timeout=5"], "spec.engine.args")
    assert problems and "engine.drainSeconds" in problems[0].message


def _sim(shutdown_timeout_s: float) -> SimConfig:
    p = read_profile(None, "example-mtp-sequential")
    return SimConfig(profile=p, num_speculative_tokens=3, served_model_name="m", method=p.method, port=0,
                     time_scale=1.0, seed=1, shutdown_timeout_s=shutdown_timeout_s)


async def _stream(client: httpx.AsyncClient, url: str, max_tokens: int) -> list[str]:
    lines = []
    async with client.stream("POST", f"{url}/v1/completions", json={
            "model": "m", "prompt": "x", "max_tokens": max_tokens, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                lines.append(line)
    return lines


async def test_shutdown_refuses_new_requests_and_lets_in_flight_ones_finish() -> None:
    sim = SimServer(_sim(shutdown_timeout_s=30))
    await sim.start()
    async with httpx.AsyncClient(timeout=30) as client:
        in_flight = asyncio.create_task(_stream(client, sim.url, 40))
        while sim._loop is None or not sim._loop.in_flight:
            await asyncio.sleep(0.01)
        shutdown = asyncio.create_task(sim.shutdown())
        await asyncio.sleep(0.05)
        refused = await client.post(f"{sim.url}/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 4})
        assert refused.status_code == 503
        assert (await client.get(f"{sim.url}/health")).status_code == 503
        lines = await in_flight
        await shutdown
    assert lines[-1] == "data: [DONE]" and not any('"error"' in line for line in lines)


async def test_a_zero_timeout_aborts_in_flight_requests_as_vllms_default_does() -> None:
    sim = SimServer(_sim(shutdown_timeout_s=0))
    await sim.start()
    async with httpx.AsyncClient(timeout=30) as client:
        in_flight = asyncio.create_task(_stream(client, sim.url, 4000))
        while sim._loop is None or not sim._loop.in_flight:
            await asyncio.sleep(0.01)
        await sim.shutdown()
        lines = await in_flight
    assert any('"error"' in line for line in lines)
