"""Static checks over the code: a wrong type in a rarely taken path (a hostile status, an API fault) or an
unused import left behind is caught here rather than as a traceback in a running operator or dead code.
The settings are pyproject.toml's ([tool.mypy], [tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / tool), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=280)


def test_mypy_finds_no_error() -> None:
    done = _run("mypy", "--config-file", str(ROOT / "pyproject.toml"))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_ruff_finds_nothing_unused_or_undefined() -> None:
    done = _run("ruff", "check", "--config", str(ROOT / "pyproject.toml"), str(ROOT))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
