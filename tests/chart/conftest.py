"""The chart tier needs the tools `make tools` installs; say so instead of failing obscurely."""

from __future__ import annotations

import pytest
from helm_tools import HELM


@pytest.fixture(scope="session", autouse=True)
def _helm_installed() -> None:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run `make tools`")
