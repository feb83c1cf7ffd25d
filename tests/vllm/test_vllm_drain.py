"""SIGTERM during a streamed request: with engine.json's shutdown_timeout_s (spec.engine.drainSeconds) the
runtime passes --shutdown-timeout and vLLM lets the request finish before it exits; new requests are
refused meanwhile."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from typing import Any

import httpx
import pytest

from realvllm import Server, TinyModels, VllmVenv

ENGINE_ARGS = ["--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "8"]
DRAIN_S = 60
MAX_TOKENS = 400  # a few seconds of decoding on two cores: still running when SIGTERM arrives

HAS_FLAG = """
import dataclasses, json
from vllm.engine.arg_utils import EngineArgs
print(json.dumps("shutdown_timeout" in {f.name for f in dataclasses.fields(EngineArgs)}))
"""


def _stream(server: Server, out: dict[str, Any]) -> None:
    lines: list[str] = []
    try:
        with httpx.stream("POST", f"{server.url}/v1/completions", timeout=120, json={
                "model": server.model, "prompt": "ka lo mi ka lo mi", "max_tokens": MAX_TOKENS,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: "):
                    lines.append(line)
                    out["first_token"] = out.get("first_token") or time.monotonic()
    except httpx.HTTPError as e:
        out["error"] = repr(e)
    out["lines"] = lines


def test_sigterm_lets_a_streaming_request_finish(serve: Any, tiny_models: TinyModels, vllm_venv: VllmVenv,
                                                 vllm_env: dict[str, str]) -> None:
    if not _has_shutdown_timeout(vllm_venv, vllm_env):
        pytest.skip("this vLLM build has no --shutdown-timeout: on SIGTERM it aborts in-flight requests "
                    "(the runtime leaves the flag out only when engine.json has no shutdown_timeout_s)")
    server = serve({"model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
                    "shutdown_timeout_s": DRAIN_S}, "tiny-drain")
    assert "--shutdown-timeout 60" in server.log.read_text(errors="replace")
    got: dict[str, Any] = {}
    client = threading.Thread(target=_stream, args=(server, got))
    client.start()
    deadline = time.monotonic() + 60
    while "first_token" not in got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "first_token" in got, f"no token streamed: {got}"
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    try:
        refused = httpx.post(f"{server.url}/v1/completions", timeout=10, json={
            "model": server.model, "prompt": "a b c", "max_tokens": 4})
        assert refused.status_code >= 500, "a new request was accepted while draining"
    except httpx.TransportError:
        pass  # the listener is closed: refused as well
    client.join(120)
    code = server.proc.wait(DRAIN_S + 30)
    lines = got.get("lines") or []
    assert got.get("status") == 200 and "error" not in got, got.get("error")
    assert lines and lines[-1] == "data: [DONE]", f"stream cut short:\n{server.log_tail()}"
    usage = next(json.loads(line[6:])["usage"] for line in reversed(lines) if '"completion_tokens"' in line)
    assert usage["completion_tokens"] == MAX_TOKENS, "the request was aborted, not finished"
    assert code == 0, f"runtime exited with {code}:\n{server.log_tail()}"


def _has_shutdown_timeout(venv: VllmVenv, env: dict[str, str]) -> bool:
    done = subprocess.run([str(venv.python), "-c", HAS_FLAG], capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        pytest.fail(f"cannot inspect vLLM's EngineArgs: {done.stderr[-2000:]}")
    return bool(json.loads(done.stdout.strip()))
