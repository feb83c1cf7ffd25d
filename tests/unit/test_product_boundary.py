"""The product (operator and runtime) ships and loads nothing of the development harness."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ("specpilot_harness", "matplotlib")


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _loaded_modules(*argv: str) -> set[str]:
    """Every module Python imports to run `argv` (from `-X importtime`, which logs each on stderr)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", *argv], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return set(lines[1:])  # the first line is the header


@pytest.mark.parametrize("argv", [("specpilot.cli", "run", "--help"),
                                  ("specpilot_runtime.cli", "serve", "--help")])
def test_starting_the_operator_or_a_serving_pod_loads_no_harness_module(argv: tuple[str, ...]) -> None:
    loaded = _loaded_modules(*argv)
    assert any(m.startswith(argv[0].split(".")[0]) for m in loaded)  # the log was read
    assert not {m for m in loaded if m.split(".")[0] in HARNESS}


def test_the_operator_loads_no_console_library() -> None:
    """`specpilot run` presents nothing: rich (55 modules) stays out although the harness installs it here.
    It came in through httpx, whose package imports its own command-line client whenever rich is installed
    (scrape/pods.py keeps that client out)."""
    loaded = _loaded_modules("specpilot.cli", "run", "--help")
    assert {"specpilot.controller.operator", "specpilot.scrape.pods", "httpx"} <= loaded  # what `run` runs
    assert not {m for m in loaded if m.split(".")[0] == "rich"}


def test_the_harness_commands_come_from_the_harness_when_it_is_installed() -> None:
    done = subprocess.run([sys.executable, "-m", "specpilot.cli", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0
    for command in ("run", "validate", "sandbox", "demo", "bench", "load"):
        assert command in done.stdout


def test_the_product_wheel_holds_no_harness_file(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("specpilot-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("specpilot/controller/") for n in names)
    assert any(n.startswith("specpilot_runtime/") for n in names)
    assert not [n for n in names if n.startswith("specpilot_harness/")]
