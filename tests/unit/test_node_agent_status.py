"""The node agent writes a pod's readiness until the API server takes it, as the kubelet's status manager
does: a status write that times out or is refused (a busy or restarting kube-apiserver) must not leave a
running, ready pod unready in the API for good, which is what kept a chart test's pods from Ready, nor a
failed pod Pending."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx

from specpilot_harness.nodes import agent as node_agent
from specpilot_harness.nodes.api import ApiError
from specpilot_harness.sandbox.pod_runtime import NoopRuntime, PodContext

POD = {"metadata": {"name": "engine-0", "namespace": "team-a", "uid": "uid-0"},
       "spec": {"nodeName": "sandbox", "containers": [{"name": "engine", "image": "vllm"}]}}


class FlakyApi:
    """Fails the first status writes (a timeout, then a 503), then takes every write."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = [httpx.ReadTimeout("timed out"), ApiError(503, "etcd away")]
        self.written: list[dict[str, Any]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.written.append(body["status"])


def _ready(status: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])


def _agent(api: FlakyApi, runtime: NoopRuntime) -> node_agent.NodeAgent:
    """A node agent with only what running one pod needs, probing every 10 ms."""
    agent = node_agent.NodeAgent.__new__(node_agent.NodeAgent)
    agent.api, agent.runtime = api, runtime  # type: ignore[assignment]
    agent.probe_period_s, agent.restart_backoff_s = 0.01, (0.01, 0.01)
    agent.addresses = SimpleNamespace(node_address="10.244.0.1")  # type: ignore[assignment]
    return agent


async def test_a_ready_pod_whose_status_writes_fail_is_ready_once_the_server_takes_one() -> None:
    api = FlakyApi()
    agent = _agent(api, NoopRuntime())
    pod = node_agent._Pod("uid-0", PodContext(POD, "10.244.0.2", {}))
    task = asyncio.create_task(agent._run(pod))
    try:
        for _ in range(200):
            if any(_ready(s) for s in api.written):
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not api.failures, "both failing writes were tried"
    assert any(_ready(s) for s in api.written), api.written
    assert api.written[-1]["containerStatuses"][0]["ready"] is True


class FailingRuntime(NoopRuntime):
    async def start(self, ctx: PodContext) -> None:
        raise RuntimeError("exec format error")


async def test_a_pod_that_fails_under_restart_policy_never_is_failed_once_the_server_takes_it() -> None:
    api = FlakyApi()
    agent = _agent(api, FailingRuntime())
    never = {**POD, "spec": {**POD["spec"], "restartPolicy": "Never"}}
    # The first write (ContainerCreating) times out; the Failed one is refused once, then taken.
    await asyncio.wait_for(agent._run(node_agent._Pod("uid-0", PodContext(never, "10.244.0.2", {}))), 5)
    assert not api.failures
    assert api.written[-1]["phase"] == "Failed", api.written
    assert api.written[-1]["containerStatuses"][0]["state"]["waiting"]["message"] == "exec format error"
