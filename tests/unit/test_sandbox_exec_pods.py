"""The sandbox's exec pod runtime runs a pod's containers as a kubelet would: argv, env, volumes at their
mountPath, readiness from the rendered probe, preStop then SIGTERM within the grace period."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path

import pytest

from specpilot_harness.ports import free_port
from specpilot_harness.sandbox.exec_pods import ExecRuntime, ImageMap, bind_mode_available
from specpilot_harness.sandbox.pod_runtime import PodContext

# A container program: serves /health once it has read its mounted config; on SIGTERM it records the
# signal and how many preStop hooks ran before it, then exits 0.
SERVER = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, signal, sys, http.server
    conf = json.load(open(sys.argv[1]))
    out = os.environ["OUT"]
    def term(*_):
        hooks = os.path.exists(out + ".prestop")
        open(out + ".term", "w").write(json.dumps({{"prestop_first": hooks, "argv": sys.argv}}))
        sys.exit(0)
    signal.signal(signal.SIGTERM, term)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({{"conf": conf, "pod": os.environ.get("POD_NAME"), "ip": os.environ.get("POD_IP"),
                                "tmp": os.environ["TMPDIR"]}}).encode()
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a): pass
    http.server.HTTPServer((conf["host"], conf["port"]), H).serve_forever()
    """)
PRESTOP = f"#!{sys.executable}\nimport os\nopen(os.environ['OUT'] + '.prestop', 'w').write('1')\n"


def _pod(port: int, out: Path) -> dict:
    container = {
        "name": "engine", "image": "example/engine:1",
        "command": ["fake-server", "/etc/fake/engine.json"],
        "ports": [{"name": "http", "containerPort": port}],
        "env": [{"name": "OUT", "value": str(out)},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "volumeMounts": [{"name": "config", "mountPath": "/etc/fake", "readOnly": True},
                         {"name": "scratch", "mountPath": "/var/scratch"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
        "lifecycle": {"preStop": {"exec": {"command": ["fake-prestop"]}}},
    }
    return {"metadata": {"name": "chat-abc-1", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 10,
                     "volumes": [{"name": "config", "configMap": {"name": "chat-engine"}},
                                 {"name": "scratch", "emptyDir": {}}]}}


@pytest.fixture
def image(tmp_path: Path) -> ImageMap:
    bin_dir = tmp_path / "image-bin"
    bin_dir.mkdir()
    for name, text in (("fake-server", SERVER), ("fake-prestop", PRESTOP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return ImageMap((("example/engine:*", bin_dir),))


MODES = ["rewrite"] + (["namespace"] if bind_mode_available() == "namespace" else [])


@pytest.mark.parametrize("mode", MODES)
async def test_a_pod_runs_its_container_with_its_volumes_env_and_probe(tmp_path: Path, image: ImageMap,
                                                                       mode: str) -> None:
    port, out = free_port(), tmp_path / "signal"
    pod = _pod(port, out)
    config = {"host": "0.0.0.0", "port": port, "model": "m"}
    ctx = PodContext(pod, "127.0.0.1", {"/etc/fake/engine.json": json.dumps(config)})
    runtime = ExecRuntime(tmp_path / "pods", image, mode)  # type: ignore[arg-type]
    await runtime.start(ctx)
    try:
        for _ in range(200):
            if await runtime.ready(ctx):
                break
            await asyncio.sleep(0.05)
        assert await runtime.ready(ctx)
        seen = (await runtime._client.get(f"http://127.0.0.1:{port}/health")).json()
        # The wildcard host the pod would bind in its own network namespace is its address here.
        assert seen["conf"] == {**config, "host": "127.0.0.1"}
        assert (seen["pod"], seen["ip"]) == ("chat-abc-1", "127.0.0.1")
        assert Path(seen["tmp"]).is_dir() and len(seen["tmp"]) < 40  # its own, short /tmp
    finally:
        await runtime.stop(ctx)
    term = json.loads(Path(str(out) + ".term").read_text())
    assert term["prestop_first"]  # preStop ran to completion before SIGTERM
    if mode == "namespace":
        assert term["argv"][1] == "/etc/fake/engine.json"  # the container saw its mountPath
    assert not await runtime.ready(ctx)
    assert not Path(seen["tmp"]).exists()


async def test_a_failing_init_container_fails_the_pod(tmp_path: Path, image: ImageMap) -> None:
    pod = _pod(free_port(), tmp_path / "x")
    pod["spec"]["initContainers"] = [{"name": "copy", "image": "example/engine:1", "command": ["false"]}]
    runtime = ExecRuntime(tmp_path / "pods", image, "rewrite")
    with pytest.raises(RuntimeError, match="init container 'copy' exited with 1"):
        await runtime.start(PodContext(pod, "127.0.0.1", {}))


def test_an_unmapped_image_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no local environment for image 'x/y:1'"):
        ImageMap((("example/*", Path("/nowhere")),)).bin_dir("x/y:1")


# Records what its volumes hold when it starts, writes a file into each, then waits for SIGTERM.
WRITER = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, sys, time
    seen = [sorted(os.listdir(d)) for d in sys.argv[2:]]
    for d in sys.argv[2:]:
        open(os.path.join(d, sys.argv[1]), "w").write("x")
    print(json.dumps(seen), flush=True)
    time.sleep(60)
    """)


def _writer_pod(name: str) -> dict:
    container = {"name": "engine", "image": "example/engine:1", "command": ["fake-writer", name, "/cache", "/scratch"],
                 "volumeMounts": [{"name": "cache", "mountPath": "/cache"},
                                  {"name": "scratch", "mountPath": "/scratch"}]}
    return {"metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
                                 {"name": "scratch", "emptyDir": {}}]}}


async def _seen(runtime: ExecRuntime, name: str) -> list[list[str]]:
    """What the pod's /cache and /scratch held when it started."""
    log = runtime.workdir / f"ns_{name}" / "engine.log"
    for _ in range(200):
        if log.exists() and log.read_text().strip():
            return json.loads(log.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} wrote nothing to {log}")


@pytest.mark.parametrize("mode", MODES)
async def test_a_claim_outlives_its_pod_and_is_shared_and_an_empty_dir_is_not(tmp_path: Path, image: ImageMap,
                                                                             mode: str) -> None:
    bin_dir = image.bin_dir("example/engine:1")
    (bin_dir / "fake-writer").write_text(WRITER)
    (bin_dir / "fake-writer").chmod(0o755)
    runtime = ExecRuntime(tmp_path / "pods", image, mode)  # type: ignore[arg-type]
    first, second = (PodContext(_writer_pod(name), "127.0.0.1", {}) for name in ("first", "second"))
    await runtime.start(first)
    try:
        assert await _seen(runtime, "first") == [[], []]
    finally:
        await runtime.stop(first)
    await runtime.start(second)
    try:
        # A later pod (a canary, a restarted replica) finds what the first left on the claim, not in its emptyDir.
        assert await _seen(runtime, "second") == [["first"], []]
    finally:
        await runtime.stop(second)


async def test_a_claim_name_that_is_a_path_is_refused(tmp_path: Path, image: ImageMap) -> None:
    pod = _writer_pod("p")
    pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "../../etc"
    with pytest.raises(ValueError, match="claimName '../../etc' is not an object name"):
        await ExecRuntime(tmp_path / "pods", image, "rewrite").start(PodContext(pod, "127.0.0.1", {}))
