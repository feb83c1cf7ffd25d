"""Split brain: a leader whose process is frozen (SIGSTOP: a blocked event loop, a paused VM) while a
standby takes the Lease over must write nothing when it wakes up, although its watch streams hand it a
backlog of work. Every request the API server gets is in its audit log with its User-Agent, which names
the replica (`specpilot/<identity>`, Kopf's own requests included)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx
from cluster_kit import EXAMPLES, REPO
import yaml

from specpilot.api.names import DEPLOYMENT_LABEL
from specpilot_harness.ports import free_port
from specpilot_harness.controlplane import audit
from specpilot_harness.sandbox.real_cluster import RealSandbox

NS = "split"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/specpilot-operator"
SD_API = "/apis/specpilot.io/v1alpha1"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
WAIT_S = 60.0


async def _eventually(what: str, check: Callable[[], Awaitable[Any]]) -> Any:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not (got := await check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.2)
    return got


async def _operator(identity: str, kubeconfig: Path, log: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specpilot.cli", "run", "--kubeconfig", str(kubeconfig), "--identity", identity,
        "--metrics-port", str(free_port()), "--metrics-host", "127.0.0.1", "--lease-namespace", "kube-system",
        "--lease-duration", "5", stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT, cwd=REPO)


async def test_a_frozen_leader_writes_nothing_after_the_standby_takes_over(tmp_path: Path) -> None:
    sandbox = RealSandbox(workdir=tmp_path / "cluster", audit=True)

    def writes() -> list[tuple[str, str, str]]:
        """Every write the API server answered, oldest first: (User-Agent, verb, URI)."""
        return [(r.user_agent, r.verb, r.uri) for r in audit.read(tmp_path / "cluster" / "logs" / "audit.log")
                if r.verb in WRITES]
    url = await sandbox.start()
    kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
    procs: list[asyncio.subprocess.Process] = []
    try:
        async with httpx.AsyncClient(base_url=url, headers=sandbox.access.headers,
                                     verify=sandbox.access.ssl_context(), timeout=10) as api:
            await api.post("/api/v1/namespaces", json={"metadata": {"name": NS}})

            async def holder() -> str | None:
                reply = await api.get(LEASE)
                return reply.status_code == 200 and (reply.json().get("spec") or {}).get("holderIdentity")

            old = await _operator("old", kubeconfig, tmp_path / "old.log")
            procs.append(old)
            await _eventually("old to lead", lambda: _is(holder(), "old"))
            sd = yaml.safe_load((EXAMPLES / "ngram.yaml").read_text())
            name = sd["metadata"]["name"]
            path = f"{SD_API}/namespaces/{NS}/speculativedeployments/{name}"
            (await api.post(f"{SD_API}/namespaces/{NS}/speculativedeployments", json=sd)).raise_for_status()

            async def observed(generation: int) -> bool:
                return ((await api.get(path)).json().get("status") or {}).get("observedGeneration") == generation

            async def config_maps() -> list[dict[str, Any]]:
                got = await api.get(f"/api/v1/namespaces/{NS}/configmaps",
                                    params={"labelSelector": f"{DEPLOYMENT_LABEL}={name}"})
                return got.json()["items"]

            async def engine_config_map() -> bool:
                return any(c["metadata"]["name"] == f"{name}-engine" for c in await config_maps())

            await _eventually("old to reconcile", lambda: observed(1))

            old.send_signal(signal.SIGSTOP)  # frozen: its Lease runs out, its watches keep filling up
            n = sd["spec"]["speculative"]["numSpeculativeTokens"]
            patch = {"spec": {"speculative": {"numSpeculativeTokens": n + 1}}}
            (await api.patch(path, json=patch, headers={"Content-Type": "application/merge-patch+json"})).raise_for_status()
            (cm,) = [c for c in await config_maps() if c["metadata"]["name"] == f"{name}-engine"]
            (await api.delete(f"/api/v1/namespaces/{NS}/configmaps/{cm['metadata']['name']}")).raise_for_status()

            new = await _operator("new", kubeconfig, tmp_path / "new.log")
            procs.append(new)
            await _eventually("new to take the Lease over", lambda: _is(holder(), "new"))
            await _eventually("new to reconcile the change", lambda: observed(2))
            await _eventually("new to restore the ConfigMap", engine_config_map)

            mark = len(writes())
            old.send_signal(signal.SIGCONT)  # wakes up with a backlog of events and a stale belief
            code = await asyncio.wait_for(old.wait(), WAIT_S)
            from_old = [w for w in writes()[mark:] if w[0].startswith("specpilot/old")]
            assert from_old == [], f"the stale leader wrote: {from_old}\n{(tmp_path / 'old.log').read_text()[-3000:]}"
            assert code == 1  # it stepped down to restart as a standby
            assert any(w[0].startswith("specpilot/new") for w in writes())  # the audit log sees the replicas
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                await proc.wait()
        await sandbox.stop()


async def _is(value: Awaitable[Any], expected: Any) -> bool:
    return await value == expected
