"""`specpilot-runtime serve`: dry-run, refusals before vLLM starts, and supervising the vLLM process.

Supervision is tested against a stand-in `vllm` executable on PATH that behaves like vLLM towards
signals (drains on SIGTERM and exits with a code of its choosing), so no GPU or vLLM is needed here;
tests/vllm runs the same path against real vLLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from specpilot_runtime.cli import main

FAKE_VLLM = textwrap.dedent("""\
    #!{python}
    # Stand-in for `vllm serve`: records its argv, drains on SIGTERM, exits with $FAKE_EXIT_CODE.
    import json, os, signal, sys, time
    out = os.environ["FAKE_OUT"]
    def term(signum, frame):
        with open(out + ".signal", "w") as f:
            f.write(signal.Signals(signum).name)
        if os.environ.get("FAKE_IGNORE_TERM") != "1":
            sys.exit(int(os.environ.get("FAKE_EXIT_CODE", "0")))
    signal.signal(signal.SIGTERM, term)
    signal.signal(signal.SIGINT, term)
    with open(out + ".tmp", "w") as f:
        json.dump({{"argv": sys.argv[1:], "plugin": os.environ.get("SPECPILOT_DRAFTED_PER_POSITION"),
                   "cache": os.environ.get("VLLM_CACHE_ROOT")}}, f)
    os.replace(out + ".tmp", out)  # the test polls for this file: never let it see half of it
    if os.environ.get("FAKE_RUN_S"):
        time.sleep(float(os.environ["FAKE_RUN_S"]))
        sys.exit(int(os.environ.get("FAKE_EXIT_CODE", "0")))
    while True:
        time.sleep(0.05)
""")

ENGINE = {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "cpu"},
          "speculative": {"method": "ngram", "num_speculative_tokens": 3}, "args": ["--enforce-eager"]}


def write_config(tmp_path: Path, engine: dict[str, Any] | str) -> Path:
    path = tmp_path / "engine.json"
    path.write_text(engine if isinstance(engine, str) else json.dumps(engine))
    return path


def test_dry_run_prints_argv_and_env_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", str(write_config(tmp_path, ENGINE)), "--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["argv"][1:3] == ["serve", "Qwen/Qwen3-8B"]
    assert json.loads(out["argv"][out["argv"].index("--speculative-config") + 1]) == \
        {"method": "ngram", "num_speculative_tokens": 3}
    assert out["env"] == {"SPECPILOT_DRAFTED_PER_POSITION": "1", "NUMBA_NUM_THREADS": "1"}


def refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: dict[str, Any] | str) -> str:
    assert main(["serve", "--config", str(write_config(tmp_path, engine)), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize("speculative,expected", [
    # The checkpoint was trained with block size 8: N=10 passes the default-16 rule, not the checkpoint's.
    ({"num_speculative_tokens": 10}, "speculative.numSpeculativeTokens: 10 is too large for this dflash draft "
                                     "(block size 8, config.json "
                                     "dflash_config.block_size): set it to at most 7"),
    ({"num_speculative_tokens": 7, "block_size": 16}, "speculative.blockSize: is 16 but the draft checkpoint was "
                                                      "trained with block size 8 "
                                                      "(config.json dflash_config.block_size): set blockSize to 8"),
])
def test_a_dflash_checkpoint_is_checked_against_n_and_block_size(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], speculative: dict[str, Any], expected: str) -> None:
    draft = tmp_path / "dflash"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"],
                                                   "dflash_config": {"block_size": 8}}))
    err = refusal(tmp_path, capsys, {**ENGINE, "speculative": {"method": "dflash", "model": str(draft),
                                                               **speculative}})
    assert expected in err


@pytest.mark.parametrize("engine,expected", [
    ("{not json", "not JSON"),
    ({**ENGINE, "acelerator": {}}, "acelerator"),
    ({**ENGINE, "speculative": {"method": "medusa", "num_speculative_tokens": 3}}, "vLLM removed Medusa"),
    ({**ENGINE, "speculative": {"method": "dflash", "model": "z-lab/x", "num_speculative_tokens": 16}},
     "allowed 1..15"),
    ({**ENGINE, "args": ["--speculative-config", "{}"]}, "args[0]: --speculative-config is reserved"),
    ({**ENGINE, "speculative": {"method": "eagle3", "model": "--trust-remote-code", "num_speculative_tokens": 3}},
     "speculative.model"),
    ({**ENGINE, "accelerator": {"vendor": "amd"},
      "env": {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}}, "name different GPUs"),
])
def test_bad_configs_are_refused_before_vllm_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     engine: dict[str, Any] | str, expected: str) -> None:
    assert expected in refusal(tmp_path, capsys, engine)


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--config", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.fixture
def fake_vllm(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(FAKE_VLLM.format(python=sys.executable))
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_OUT": str(tmp_path / "fake-vllm.json")}


def start_runtime(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    config = write_config(tmp_path, ENGINE)
    # The interpreter's own directory must not hold a real vllm, or it would be preferred.
    assert not (Path(sys.executable).parent / "vllm").exists()
    return subprocess.Popen([sys.executable, "-m", "specpilot_runtime.cli", "serve", "--config", str(config),
                             *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_started(env: dict[str, str]) -> dict[str, Any]:
    out = Path(env["FAKE_OUT"])
    deadline = time.monotonic() + 10
    while not out.exists():
        assert time.monotonic() < deadline, "the stand-in vllm never started"
        time.sleep(0.02)
    return json.loads(out.read_text())


def test_runs_vllm_with_the_rendered_argv_and_exits_with_its_code(tmp_path: Path,
                                                                   fake_vllm: dict[str, str]) -> None:
    proc = start_runtime(tmp_path, {**fake_vllm, "FAKE_RUN_S": "0.2", "FAKE_EXIT_CODE": "3"})
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 3
    seen = json.loads(Path(fake_vllm["FAKE_OUT"]).read_text())
    assert seen["argv"][:1] == ["serve"] and seen["plugin"] == "1"
    # The exact command, on one line.
    (line,) = [ln for ln in err.splitlines() if "starting vLLM" in ln]
    assert "vllm serve Qwen/Qwen3-8B" in line and "--speculative-config" in line


def test_vllm_gets_its_cache_on_the_model_cache_only_where_it_can_write(tmp_path: Path,
                                                                        fake_vllm: dict[str, str]) -> None:
    writable = tmp_path / "models" / "vllm"
    proc = start_runtime(tmp_path, {**fake_vllm, "FAKE_RUN_S": "0", "VLLM_CACHE_ROOT": str(writable)})
    proc.communicate(timeout=20)
    assert json.loads(Path(fake_vllm["FAKE_OUT"]).read_text())["cache"] == str(writable)
    # A model cache vLLM cannot write (here a path under a file; on a cluster a read-only volume): vLLM
    # would fail at start-up writing compile artifacts there, so it keeps its cache in the container.
    (tmp_path / "ro").write_text("")
    Path(fake_vllm["FAKE_OUT"]).unlink()
    unwritable = tmp_path / "ro" / "vllm"
    proc = start_runtime(tmp_path, {**fake_vllm, "FAKE_RUN_S": "0", "VLLM_CACHE_ROOT": str(unwritable)})
    _, err = proc.communicate(timeout=20)
    assert json.loads(Path(fake_vllm["FAKE_OUT"]).read_text())["cache"] is None
    assert f"VLLM_CACHE_ROOT is not writable ({unwritable}: Not a directory)" in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded_and_vllms_exit_code_returned(tmp_path: Path, fake_vllm: dict[str, str],
                                                            sig: signal.Signals) -> None:
    proc = start_runtime(tmp_path, {**fake_vllm, "FAKE_EXIT_CODE": "7"})
    wait_started(fake_vllm)
    proc.send_signal(sig)
    proc.communicate(timeout=20)
    assert proc.returncode == 7
    assert Path(fake_vllm["FAKE_OUT"] + ".signal").read_text() == sig.name


def test_vllm_that_does_not_drain_in_time_is_killed(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    proc = start_runtime(tmp_path, {**fake_vllm, "FAKE_IGNORE_TERM": "1"}, "--grace-period", "0.5")
    wait_started(fake_vllm)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGKILL
    assert time.monotonic() - start >= 0.5  # it waited out the grace period first
    assert "did not exit within 0.5 s" in err


def test_vllm_is_not_orphaned_when_the_runtime_is_killed(tmp_path: Path, fake_vllm: dict[str, str]) -> None:
    proc = start_runtime(tmp_path, {**fake_vllm, "FAKE_EXIT_CODE": "0"})
    wait_started(fake_vllm)
    proc.kill()
    proc.communicate(timeout=20)
    signal_file = Path(fake_vllm["FAKE_OUT"] + ".signal")
    deadline = time.monotonic() + 10
    while not signal_file.exists():
        assert time.monotonic() < deadline, "vllm did not get SIGTERM when the runtime died"
        time.sleep(0.02)
    assert signal_file.read_text() == "SIGTERM"


def test_missing_vllm_exits_127(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    proc = start_runtime(tmp_path, env)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 127 and "not found" in err
