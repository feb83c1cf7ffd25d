"""The product and the harness type-check: a wrong type in a rarely taken path (a hostile status, an
API fault) is caught here rather than as a traceback in a running operator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_error() -> None:
    mypy = Path(sys.executable).parent / "mypy"
    # The files and settings are pyproject.toml's [tool.mypy].
    done = subprocess.run([str(mypy), "--config-file", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
