"""The Lease elector as the write fence: open only until the renewal deadline of the last renewal sent,
which ends before a standby may take the Lease over; closed for good once the Lease is lost."""

from __future__ import annotations

import pytest
from kubernetes import client

from specpilot.controller import leader
from specpilot.controller.kube import Kube, NotLeader
from specpilot.controller.leader import LeaseElector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(leader.time, "monotonic", fake)
    return fake


def _elector(duration: int = 15) -> LeaseElector:
    kube = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    return LeaseElector(kube, "ns", "lease", "me", duration, duration / 5)


def test_closed_until_the_lease_is_won(clock: Clock) -> None:
    with pytest.raises(NotLeader):
        _elector().check()


def test_open_until_the_renewal_deadline_which_ends_before_a_takeover(clock: Clock) -> None:
    elector = _elector(15)
    sent = clock.now
    elector._renewed(sent)
    elector.check()
    clock.now = sent + elector.renew_deadline_s - 0.01
    elector.check()
    clock.now = sent + elector.renew_deadline_s
    with pytest.raises(NotLeader):
        elector.check()
    assert elector.renew_deadline_s < 15  # a standby takes over only after renewTime + 15 s


def test_once_lost_it_never_opens_again(clock: Clock) -> None:
    elector = _elector()
    elector._renewed(clock.now)
    elector.lose()
    elector._renewed(clock.now)
    assert not elector.holding()
