"""`specpilot bench runtime`: it times serve --dry-run and prints the number, or says why it cannot."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from specpilot.cli import main

RUNTIME = Path(sys.executable).parent / "specpilot-runtime"


def test_it_prints_the_runtimes_time_before_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "runtime", "--runtime", str(RUNTIME), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"serve --dry-run\): best \d+\.\d{3} s, median \d+\.\d{3} s of 1", out), out


def test_a_runtime_that_is_not_there_is_an_error_not_a_number(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "runtime", "--runtime", str(tmp_path / "missing"), "--repeats", "1"]) != 0
    assert "best" not in capsys.readouterr().out
