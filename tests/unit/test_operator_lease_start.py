"""The operator renews its Lease from the moment it wins it: the CEL rules still compiling on a busy machine
must not outlast the renewal deadline (a CI run on two loaded cores lost a 4-second Lease 3.5 seconds after
winning it, and every test after it found no operator)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from specpilot.controller import operator as op
from specpilot.controller.leader import LeaderLost


def test_renewing_starts_before_the_cel_rules_finish_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    renewing = threading.Event()
    seen: dict[str, bool] = {}

    def slow_compile(schema: Any) -> int:
        # Compiling ends once renewals have started, or after 10 s if nothing renews meanwhile.
        seen["renewing while compiling"] = renewing.wait(10)
        return 0

    class Elector:
        def __init__(self, *args: Any) -> None:
            pass

        async def acquire(self) -> None:
            pass

        async def hold(self) -> None:
            renewing.set()
            raise LeaderLost("lease ns/lease lost")

        def lose(self) -> None:
            pass

    async def kopf_idle(**_: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(op.cel, "compile_all", slow_compile)
    monkeypatch.setattr(op, "LeaseElector", Elector)
    monkeypatch.setattr(op, "load_api_client", lambda *args: None)
    monkeypatch.setattr(op, "serve", lambda *args: None)
    monkeypatch.setattr(op.gc_policy, "configure", lambda: None)
    monkeypatch.setattr(op.kopf, "operator", kopf_idle)
    code = asyncio.run(op.run_operator(op.OperatorOptions(lease_namespace="ns", identity="me")))
    assert seen == {"renewing while compiling": True}
    assert code == 1  # the Lease lost: the process exits so the Pod restarts as a standby
