"""The end-to-end tier: real vLLM (the CPU build) in sandbox pods, driven by the operator."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.timeout(1500))
