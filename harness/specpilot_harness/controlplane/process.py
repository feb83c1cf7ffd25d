"""One control-plane process: started with its log file, probed until healthy, stopped for good.

Each component runs in its own session (process group), so a Ctrl-C at the terminal reaches only the
harness, whose `stop()` then ends the components in order (scheduler and controller-manager before the
apiserver, the apiserver before etcd) instead of all of them dying at once mid-write.
"""

from __future__ import annotations

import http.client
import signal
import ssl
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.1
LOG_TAIL_LINES = 20


class ComponentFailed(RuntimeError):
    """A component exited or never became healthy; the message ends with its log's last lines."""


def https_ok(url: str, context: ssl.SSLContext) -> bool:
    """True when GET `url` answers 200: the probe of /readyz and /healthz. Anything else (refused, TLS not
    up yet, 500 while post-start hooks run) is 'not yet'."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


# Go's collector runs when the heap has grown by GOGC percent since the last one (default 100). The components
# share two cores with everything else here, with memory to spare: collecting four times less often gave
# kube-apiserver back CPU it spent marking (docs/operator.md, "Scale on the real control plane").
GOGC = "400"


class Component:
    """A process of the control plane, restartable with the same argv (same ports, same data)."""

    def __init__(self, name: str, argv: list[str], log: Path, healthy: Callable[[], bool]) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self._healthy = healthy
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float) -> None:
        """Starts the process (its output appended to the log, across restarts) and waits until healthy."""
        if self.running():
            raise ComponentFailed(f"{self.name} is already running (pid {self.pid})")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "GOGC": os.environ.get("GOGC", GOGC)},
            )
        self.wait_healthy(timeout_s)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                raise ComponentFailed(f"{self.name} exited ({code}) before it was healthy{self._log_tail()}")
            if self._healthy():
                return
            if time.monotonic() > deadline:
                raise ComponentFailed(f"{self.name} not healthy after {timeout_s:.0f} s{self._log_tail()}")
            time.sleep(POLL_S)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (each component shuts down cleanly on it), SIGKILL after `timeout_s`; always reaped."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        except OSError:
            return ""
        return f"; last lines of {self.log}:\n" + "\n".join(lines)
