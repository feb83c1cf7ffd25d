"""`specpilot-runtime simulate` as the pod runner will start it: a process that serves until SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import httpx
import pytest

from specpilot_runtime.cli import main

SIMULATE = [sys.executable, "-m", "specpilot_runtime.cli", "simulate"]


def test_simulate_serves_until_sigterm(tmp_path) -> None:
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"profiles": [{
        "name": "tiny", "method": "eagle3", "max_n": 2, "survival": [0.7, 0.4],
        "step_time_ms": {"1": [5.0, 6.0, 7.0]}}]}))
    proc = subprocess.Popen([*SIMULATE, "--profile", str(profiles), "--name", "tiny",
                             "--num-speculative-tokens", "2", "--port", "0", "--time-scale", "100",
                             "--served-model-name", "m"],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert url, line
        with httpx.Client(base_url=url.group(1), timeout=30) as client:
            assert client.get("/health").status_code == 200
            r = client.post("/v1/completions", json={"model": "m", "prompt": "2+2=", "max_tokens": 30})
            assert r.json()["usage"]["completion_tokens"] == 30
            assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"}' \
                in client.get("/metrics").text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("args", "message"), [
    (["--name", "example-mtp-sequential", "--num-speculative-tokens", "9"], "outside 0..max_n"),
    (["--name", "example-mtp-sequential", "--num-speculative-tokens", "0", "--method", "mtp"], "method off"),
    (["--name", "example-mtp-sequential", "--num-speculative-tokens", "2", "--method", "medusa"], "not a vLLM"),
    (["--name", "nope", "--num-speculative-tokens", "2"], "no profile 'nope'"),
    (["--num-speculative-tokens", "2"], "pick one with --name"),
])
def test_bad_flags_exit_2_with_a_reason(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *args]) == 2
    assert message in capsys.readouterr().err
