"""What the real-vLLM tests share: the vLLM venv, the tiny models, and one served runtime process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

STARTUP_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class VllmVenv:
    python: Path
    runtime: Path  # the specpilot-runtime console script installed in the vLLM venv


@dataclass(frozen=True)
class TinyModels:
    target: Path
    draft: Path  # the target with 5% weight noise


@dataclass
class Server:
    """One `specpilot-runtime serve` process and the vLLM it runs."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    model: str

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"specpilot-runtime exited with {self.proc.returncode} before vLLM was "
                            f"healthy:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        pytest.fail(f"vLLM not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def stop(self) -> tuple[int, float]:
        """SIGTERM the runtime as the kubelet would; returns its exit code and how long it took."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"specpilot-runtime did not exit {STOP_TIMEOUT_S:.0f} s after SIGTERM")
        return code, time.monotonic() - start


def run_in_vllm_venv(venv: VllmVenv, env: dict[str, str], script: str, stdin: str) -> str:
    done = subprocess.run([str(venv.python), str(Path(__file__).parent / script)], input=stdin,
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        pytest.fail(f"{script} failed with {done.returncode}")
    return done.stdout
