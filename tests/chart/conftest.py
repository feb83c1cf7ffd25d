"""The chart tier needs the tools `make tools` installs; say so instead of failing obscurely."""

from __future__ import annotations

import logging

import pytest
from helm_tools import HELM


@pytest.fixture(scope="session", autouse=True)
def _helm_installed() -> None:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make tools`")


@pytest.fixture(autouse=True)
def _node_agent_logs(caplog: pytest.LogCaptureFixture) -> None:
    """The sandbox's node agent says at INFO what it did with each pod; a failed test shows it."""
    caplog.set_level(logging.INFO, logger="specpilot_harness")
