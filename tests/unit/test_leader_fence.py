"""The Lease elector as the write fence: open only until the renewal deadline of the last renewal sent,
which ends before a standby may take the Lease over; closed for good once the Lease is lost."""

from __future__ import annotations

import threading
import time

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


@pytest.mark.parametrize("seen_closed", [True, False], ids=["seen-closed", "unseen"])
def test_a_late_renewal_reopens_the_fence_only_if_nobody_saw_it_closed(clock: Clock, seen_closed: bool) -> None:
    # A renewal sent before the deadline returns after it (a slow API server). A writer that found the
    # fence closed in between has stopped, so the replica must not go on as the leader without it; if no
    # one looked, nothing stopped and the renewal keeps the Lease.
    elector = _elector(15)
    sent = clock.now
    elector._renewed(sent)
    in_flight = sent + elector.renew_deadline_s - 1.0
    clock.now = sent + elector.renew_deadline_s + 0.5
    if seen_closed:
        with pytest.raises(NotLeader):
            elector.check()
    elector._renewed(in_flight)
    clock.now += 0.1
    assert elector.holding() is not seen_closed


def test_the_renewer_reports_a_lapsed_fence_as_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # The renewal in flight outlives the deadline while a writer is refused; the renewer then ends, so
    # hold() raises LeaderLost and the operator exits rather than lead on without its tuning loops.
    elector = _elector(10)  # renewals every 2 s, a deadline 8 s after each one sent
    refused: list[bool] = []

    def slow_attempt() -> bool:
        sent = time.monotonic()
        time.sleep(1.5)  # sent 1 s before the deadline, back 0.5 s after it
        refused.append(not elector.holding())  # a writer's look, just before the response lands
        elector._renewed(sent)
        return True

    monkeypatch.setattr(elector, "_attempt", slow_attempt)
    monkeypatch.setattr(elector, "_held_by_other", lambda: False)
    elector._renewed(time.monotonic() - 5.0)  # the last renewal: 3 s of its 8 s left
    renewer = threading.Thread(target=elector._renew_until_lost, daemon=True)
    renewer.start()
    renewer.join(timeout=10)
    assert refused == [True]
    assert not renewer.is_alive()
    assert not elector.holding()


def test_a_burst_of_failed_renewals_shorter_than_the_deadline_keeps_the_lease(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Lease 4 s: renewals every 0.8 s, deadline 3.2 s after the last one sent. Six failures in a row (an
    # API server restart, a 5xx burst) at the regular pace would take 4.8 s: retried sooner, they fit.
    elector = _elector(4)
    failures = iter(range(6))

    def attempt() -> bool:
        if next(failures, None) is not None:
            return False
        elector._renewed(time.monotonic())
        return True

    monkeypatch.setattr(elector, "_attempt", attempt)
    monkeypatch.setattr(elector, "_held_by_other", lambda: False)
    elector._renewed(time.monotonic())
    renewer = threading.Thread(target=elector._renew_until_lost, daemon=True)
    renewer.start()
    time.sleep(4.0)
    try:
        assert elector.holding() and not elector._lost
    finally:
        elector._stop.set()
        renewer.join(5)


@pytest.mark.parametrize("renew_time,duration,takes_over", [
    ("9999-12-31T23:59:59.999999Z", 15, False),  # expiry past year 9999: held (it raised OverflowError)
    ("2020-01-01T00:00:00.000000Z", 2147483647, False),
    ("not a time", 15, True),  # unreadable: never renewed, as client-go reads it
    ("2020-01-01T00:00:00.000000Z", None, True),  # no duration: this replica's own
])
def test_a_lease_written_by_hand_is_read_not_raised(monkeypatch: pytest.MonkeyPatch, renew_time: str,
                                                    duration: int | None, takes_over: bool) -> None:
    """Whoever may write the Lease may put any time the API server takes into it: every replica reads it as
    held or expired, and none of them crashes out of the election."""
    elector = _elector()
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "lease", "namespace": "ns", "resourceVersion": "7"},
             "spec": {"holderIdentity": "other", "renewTime": renew_time, "leaseDurationSeconds": duration}}
    written: list[dict] = []
    monkeypatch.setattr(elector.kube, "get", lambda path: lease)
    monkeypatch.setattr(elector.kube, "replace", lambda obj: written.append(obj) or obj)
    assert elector.try_acquire() is takes_over
    assert [w["spec"]["holderIdentity"] for w in written] == (["me"] if takes_over else [])
