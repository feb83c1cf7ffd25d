"""The sandbox's serving pod runtime: a simulated engine per annotated pod, at the N, method, model name
and port of the pod's engine.json, on the pod's address; Ready while it serves; gone when stopped."""

from __future__ import annotations

import json

import httpx
import pytest

from specpilot_harness.sandbox.pod_runtime import PodContext
from specpilot_harness.sandbox.sim_pods import SimEngineRuntime
from specpilot_harness.sim.profile import ProfileError
from specpilot_harness.ports import free_port


def _ctx(annotations: dict[str, str], n: int = 5, port: int = 8000) -> PodContext:
    engine = {"model": "org/model", "served_model_name": "chat", "port": port,
              "speculative": {"method": "mtp", "num_speculative_tokens": n}}
    pod = {"metadata": {"name": "chat-abc-1", "namespace": "ns", "uid": "u1"}}
    replica_set = {"metadata": {"name": "chat-abc", "uid": "u2"}}
    owner = {"metadata": {"name": "chat", "uid": "u3", "annotations": annotations}}
    return PodContext(pod, "127.0.0.1", {"/etc/specpilot/engine.json": json.dumps(engine)}, (replica_set, owner))


def test_the_engine_runs_what_the_pod_was_rendered_with() -> None:
    runtime = SimEngineRuntime()
    config = runtime.engine_for(_ctx({"specpilot.io/sim-profile": "qwen35-122b-mtp-math500",
                                      "specpilot.io/sim-time-scale": "4"}))
    assert config is not None
    assert (config.num_speculative_tokens, config.method, config.served_model_name, config.port, config.time_scale) \
        == (5, "mtp", "chat", 8000, 4.0)
    assert config.host == "127.0.0.1" and config.profile.name == "qwen35-122b-mtp-math500"


def test_pods_without_a_profile_serve_nothing_and_unknown_profiles_fail() -> None:
    runtime = SimEngineRuntime()
    assert runtime.engine_for(_ctx({})) is None
    with pytest.raises(ProfileError, match="no profile 'nope'"):
        runtime.engine_for(_ctx({"specpilot.io/sim-profile": "nope"}))
    with pytest.raises(ProfileError):  # the profile has no N=9: the pod fails and never becomes Ready
        runtime.engine_for(_ctx({"specpilot.io/sim-profile": "qwen35-122b-mtp-math500"}, n=9))


async def test_ready_follows_the_engine_and_stop_ends_it() -> None:
    runtime = SimEngineRuntime()
    port = free_port()
    ctx = _ctx({"specpilot.io/sim-profile": "qwen35-122b-mtp-math500"}, port=port)
    await runtime.start(ctx)
    try:
        assert await runtime.ready(ctx)
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="chat",position="4"}' in metrics
    finally:
        await runtime.stop(ctx)
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{port}/health")
