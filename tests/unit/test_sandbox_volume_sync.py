"""The sandbox's kubelet part keeps ConfigMap and Secret volumes of running pods up to date, as a kubelet does:
the files computed from the watched objects (subPath mounts excepted), delivered to exec pods' volume
directories and to simulated engines, each file replaced whole, no container restarted."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from specpilot_runtime import live
from specpilot_harness.nodes.volumes import VolumeSources, mounted_files, volume_sources
from specpilot_harness.ports import free_port
from specpilot_harness.sandbox.exec_pods import ExecRuntime, ImageMap, bind_mode_available
from specpilot_harness.sandbox.pod_runtime import PodContext, write_atomic
from specpilot_harness.sandbox.sim_pods import SimEngineRuntime


def _pod(containers: list[dict], volumes: list[dict], uid: str = "u1") -> dict:
    return {"metadata": {"name": "chat-abc-1", "namespace": "ns", "uid": uid},
            "spec": {"containers": containers, "volumes": volumes}}


POD = _pod([{"name": "engine", "volumeMounts": [{"name": "config", "mountPath": "/etc/specpilot"},
                                                {"name": "live", "mountPath": "/etc/specpilot/live/"},
                                                {"name": "token", "mountPath": "/var/token"},
                                                {"name": "config", "mountPath": "/etc/pinned.json",
                                                 "subPath": "engine.json"}]}],
           [{"name": "config", "configMap": {"name": "chat-engine"}},
            {"name": "live", "configMap": {"name": "chat-live"}},
            {"name": "token", "secret": {"secretName": "chat-token"}},
            {"name": "scratch", "emptyDir": {}}])


def _cm(name: str, data: dict[str, str]) -> dict:
    return {"metadata": {"name": name, "namespace": "ns"}, "data": data}


def test_the_files_a_pod_sees_follow_the_objects_it_mounts() -> None:
    assert volume_sources(POD) == {"config": ("configmaps", "ns", "chat-engine"),
                                   "live": ("configmaps", "ns", "chat-live"),
                                   "token": ("secrets", "ns", "chat-token")}
    sources = VolumeSources()
    sources.observe("configmaps", "ADDED", _cm("chat-engine", {"engine.json": "{}"}))
    assert sources.files_for(POD, {}) is None  # chat-live not seen yet: nothing to re-sync from
    sources.observe("configmaps", "ADDED", _cm("chat-live", {"live.json": "a"}))
    sources.observe("secrets", "ADDED", {"metadata": {"name": "chat-token", "namespace": "ns"},
                                         "data": {"t": base64.b64encode(b"s3cret").decode()}})
    # What the pod started with (the agent reads it at start), and a re-sync that finds nothing new.
    started = mounted_files(POD, {"config": {"engine.json": "{}"}, "live": {"live.json": "a"},
                                  "token": {"t": "s3cret"}})
    assert started == {"/etc/specpilot/engine.json": "{}", "/etc/specpilot/live/live.json": "a",
                       "/var/token/t": "s3cret", "/etc/pinned.json": "{}"}
    assert sources.files_for(POD, started) == started

    version = sources.version
    sources.observe("configmaps", "MODIFIED", _cm("chat-live", {"live.json": "a"}))
    assert sources.version == version  # the same data again is no change
    sources.observe("configmaps", "MODIFIED", _cm("chat-live", {"live.json": "b"}))
    sources.observe("configmaps", "MODIFIED", _cm("chat-engine", {"engine.json": "{\"n\": 2}", "extra": "x"}))
    assert sources.version > version
    now = sources.files_for(POD, started)
    assert now is not None
    assert now["/etc/specpilot/live/live.json"] == "b" and now["/etc/specpilot/extra"] == "x"
    assert now["/etc/specpilot/engine.json"] == "{\"n\": 2}"
    assert now["/etc/pinned.json"] == "{}"  # a subPath mount is a copy taken at start, never refreshed

    sources.observe("configmaps", "DELETED", _cm("chat-live", {}))
    assert sources.files_for(POD, now) is None  # a deleted object: the volume keeps what it holds


def test_a_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "vol" / "live.json"
    write_atomic(target, "one")
    before = target.stat().st_ino
    write_atomic(target, "two")
    assert target.read_text() == "two" and target.stat().st_ino != before  # renamed into place
    assert [p.name for p in target.parent.iterdir()] == ["live.json"]  # no temporary file left


# A container that answers every GET with the current contents of the file named by argv[1] and its pid.
READER = textwrap.dedent(f"""\
    #!{sys.executable}
    import http.server, json, os, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            try:
                text = open(sys.argv[1]).read()
            except OSError:
                text = None
            body = json.dumps({{"text": text, "pid": os.getpid()}}).encode()
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
    """)


@pytest.mark.parametrize("mode", ["rewrite"] + (["namespace"] if bind_mode_available() == "namespace" else []))
async def test_an_exec_pods_containers_see_the_new_files_without_a_restart(tmp_path: Path, mode: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "reader").write_text(READER)
    (bin_dir / "reader").chmod(0o755)
    port = free_port()
    pod = _pod([{"name": "c", "image": "example/reader:1", "command": ["reader", "/etc/live/live.json", str(port)],
                 "volumeMounts": [{"name": "live", "mountPath": "/etc/live", "readOnly": True}]}],
               [{"name": "live", "configMap": {"name": "chat-live"}}])
    runtime = ExecRuntime(tmp_path / "pods", ImageMap((("example/reader:*", bin_dir),)), mode)  # type: ignore[arg-type]
    ctx = PodContext(pod, "127.0.0.1", {"/etc/live/live.json": "one", "/etc/live/gone.json": "x"})
    await runtime.start(ctx)
    try:
        async def read() -> dict:
            for _ in range(200):
                try:
                    return (await runtime._client.get(f"http://127.0.0.1:{port}/")).json()
                except httpx.HTTPError:
                    await asyncio.sleep(0.05)
            raise AssertionError("the container never answered")

        first = await read()
        assert first["text"] == "one"
        await runtime.update_files(PodContext(pod, "127.0.0.1", {"/etc/live/live.json": "two"}))
        second = await read()
        assert second == {"text": "two", "pid": first["pid"]}  # the same process saw the new contents
        volume = tmp_path / "pods" / "ns_chat-abc-1" / "volumes" / "live"
        assert sorted(p.name for p in volume.iterdir()) == ["live.json"]  # a removed key's file goes
    finally:
        await runtime.stop(ctx)


async def test_a_simulated_engine_follows_its_pods_live_configmap_without_a_restart() -> None:
    port = free_port()
    engine = {"model": "org/model", "served_model_name": "chat", "port": port,
              "live_file": f"{live.LIVE_DIR}/{live.LIVE_FILE}",
              "speculative": {"method": "mtp", "num_speculative_tokens": 5,
                              "num_speculative_tokens_per_batch_size": [[1, 1024, 5]]}}
    pod = {"metadata": {"name": "chat-abc-1", "namespace": "ns", "uid": "u1"}}
    owner = {"metadata": {"name": "chat", "uid": "u3",
                          "annotations": {"specpilot.io/sim-profile": "qwen35-122b-mtp-math500"}}}

    def ctx(k: int) -> PodContext:
        doc = live.LiveConfig((live.Arm(((1, 1024, k),)),)).to_json()
        return PodContext(pod, "127.0.0.1", {"/etc/specpilot/engine.json": json.dumps(engine),
                                             f"{live.LIVE_DIR}/{live.LIVE_FILE}": doc}, (owner,))

    async def served_k(client: httpx.AsyncClient, k: int) -> bool:
        for _ in range(100):
            if f'{live.LIVE_K}{{band="1-1"}} {k}' in (await client.get(f"http://127.0.0.1:{port}/metrics")).text:
                return True
            await asyncio.sleep(0.05)
        return False

    runtime = SimEngineRuntime()
    await runtime.start(ctx(2))
    try:
        server = runtime._servers["u1"]
        async with httpx.AsyncClient() as client:
            assert await served_k(client, 2)
            await runtime.update_files(ctx(4))
            assert await served_k(client, 4)  # within the engine's ~1 s poll
        assert runtime._servers["u1"] is server  # the same engine: nothing restarted
        root = runtime._volumes["u1"][0]
    finally:
        await runtime.stop(ctx(4))
    assert not root.exists()  # the pod's files go with it
