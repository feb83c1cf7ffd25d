"""The runtime's drain follows drain.json as it is when SIGTERM arrives (runtime/specpilot_runtime/drain.py):
bounded, strict, clamped to engine.json's shutdown_timeout_s; a missing or bad file leaves that value."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from specpilot_runtime import serve
from specpilot_runtime.drain import MAX_DRAIN_BYTES, drain_json, parse_drain, read_drain
from specpilot_runtime.engine_config import TEARDOWN_S, EngineConfig


def _cfg(tmp_path: Path, shutdown_s: int | None = 600) -> EngineConfig:
    return EngineConfig(model="m", shutdown_timeout_s=shutdown_s, drain_file=str(tmp_path / "drain.json"))


def test_the_file_round_trips() -> None:
    assert parse_drain(drain_json(45).encode()) == 45
    assert parse_drain(b' {"seconds": 0} \n') == 0


@pytest.mark.parametrize("data, why", [
    (b"", "not JSON"),
    (b"45", 'one key, "seconds"'),
    (b'{"seconds": 45, "more": 1}', 'one key, "seconds"'),
    (b'{"seconds": -1}', "whole number >= 0"),
    (b'{"seconds": 1.5}', "whole number >= 0"),
    (b'{"seconds": true}', "whole number >= 0"),
    (b'{"seconds": "45"}', "whole number >= 0"),
    (b'{"seconds": NaN}', "not a JSON number"),
    (b'{"seconds": Infinity}', "not a JSON number"),
    (b'{"seconds": {"seconds": 1}}', "nested deeper"),
    (b'\xff{"seconds": 1}', "not UTF-8"),
    (b'{"seconds": 1}' + b" " * MAX_DRAIN_BYTES, "larger than"),
])
def test_hostile_contents_are_refused_with_the_reason(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_drain(data)


def test_read_clamps_and_falls_back_to_the_config(tmp_path: Path) -> None:
    path = tmp_path / "drain.json"
    assert read_drain(path, 600) == (600, f"{path}: cannot read: No such file or directory")
    path.write_text(drain_json(45))
    assert read_drain(path, 600) == (45, None)
    path.write_text(drain_json(5000))
    seconds, problem = read_drain(path, 600)
    assert seconds == 600 and problem and "above shutdown_timeout_s" in problem
    path.write_bytes(b"x" * (10 * MAX_DRAIN_BYTES))
    seconds, problem = read_drain(path, 600)
    assert seconds == 600 and problem and "larger than" in problem
    path.unlink()
    os.mkfifo(path)  # never blocks: opened without waiting for a writer, refused as not a regular file
    seconds, problem = read_drain(path, 600)
    assert seconds == 600 and problem and "FIFO" in problem


def test_grace_is_read_when_asked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _cfg(tmp_path)
    with caplog.at_level(logging.WARNING, "specpilot.runtime"):
        assert serve.grace_period(cfg, None) == 600 + TEARDOWN_S  # no file yet: the config's
    assert "drain file" in caplog.text and "draining up to 600 s" in caplog.text
    Path(cfg.drain_file or "").write_text(drain_json(40))
    assert serve.grace_period(cfg, None) == 40 + TEARDOWN_S
    assert serve.grace_period(cfg, 3.0) == 3.0  # --grace-period wins
    # Without a drain file the config's drain is fixed, as before.
    assert serve.grace_period(EngineConfig(model="m", shutdown_timeout_s=90), None) == 90 + TEARDOWN_S


def _supervised_kill_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_after_start: int) -> float:
    """Supervise a child that ignores SIGTERM, rewrite drain.json after it started (the ConfigMap changing
    under a running pod), send SIGTERM; seconds from the signal to the SIGKILL."""
    monkeypatch.setattr(serve, "TEARDOWN_S", 0)  # the drain alone, so the test takes seconds
    cfg = _cfg(tmp_path)
    Path(cfg.drain_file or "").write_text(drain_json(30))  # what the pod started with
    child = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                   "time.sleep(60)"]
    sent: list[float] = []

    def rewrite_then_signal() -> None:
        time.sleep(0.3)
        Path(cfg.drain_file or "").write_text(drain_json(written_after_start))
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=rewrite_then_signal, daemon=True).start()
    code = serve.supervise(child, dict(os.environ), lambda: serve.grace_period(cfg, None))
    assert code == 128 + signal.SIGKILL
    return time.monotonic() - sent[0]


def test_a_running_child_is_killed_after_the_drain_the_file_says_at_sigterm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Started with 30 s in the file, rewritten to 1 s before SIGTERM: killed after ~1 s, not 30 or 600.
    took = _supervised_kill_after(tmp_path, monkeypatch, 1)
    assert 1.0 <= took < 5.0
    took = _supervised_kill_after(tmp_path, monkeypatch, 0)
    assert took < 2.0
