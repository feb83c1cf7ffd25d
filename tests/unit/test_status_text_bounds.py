"""Text the operator quotes from outside (a pod's scrape failure, the scheduler's messages, a spec's
values) reaches status and Events printable and bounded: a pod exporting megabytes, or a hundred pods
failing alike, cannot grow the object past what the API server takes or bury the reason."""

from __future__ import annotations

import copy
from typing import Any

from specpilot.controller import capacity
from specpilot.controller import status as st
from specpilot.controller.tuning import observe
from specpilot.display import bounded, printable
from specpilot.scrape.pods import PodScrape, PodTarget
from test_reconcile_child_cache import FakeApi, _reconciler, _sd


def _pending(name: str, track: str, why: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"specpilot.io/track": track}},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why}]}}


def test_pod_text_cannot_start_a_line_or_run_on() -> None:
    assert printable("line\n\x1b[31mfake log line") == "line\\n\\x1b[31mfake log line"
    cut = bounded("x" * 5000, 100)
    assert len(cut) <= 100 and cut.endswith(f"... ({5000 - cut.index('.')} more characters)")
    assert bounded("short", 100) == "short"


def test_many_pods_waiting_for_the_same_gpus_are_one_reason() -> None:
    why = "0/2 nodes are available: 2 Insufficient amd.com/gpu."
    pods = [_pending(f"chat-{i:02d}", "stable", why) for i in range(40)]
    pods.append(_pending("chat-canary-x", "canary", "webhook says: " + "y" * 100_000))
    message = capacity.capacity_message(capacity.unschedulable(pods))
    assert message.count(why) == 1
    assert "stable pods chat-00, chat-01, chat-02 and 37 more cannot be scheduled" in message
    assert "canary pod chat-canary-x cannot be scheduled: webhook says: yyy" in message
    assert len(message) < 1200 and "more characters" in message
    assert "the canary is rolled back at progressDeadline" in message


def test_pods_failing_alike_are_named_once() -> None:
    def failed(name: str, error: str) -> PodScrape:
        return PodScrape(PodTarget(name, f"u-{name}", "stable", 3, "http://x/metrics", True), None, error)
    problem = observe.scrape_problem([failed(f"p{i}", "timed out") for i in range(30)] + [failed("q", "HTTP 404")])
    assert problem == "p0, p1, p2 and 27 more: timed out; q: HTTP 404"


def test_a_long_invalid_spec_is_cut_in_status_and_its_event_posted_once() -> None:
    """64 duplicate variables with 200-character names: 16 kB of reasons. The condition keeps the first
    4096 characters; a reconcile that finds the same spec posts no new Warning (it compared the whole
    message with the cut one, and posted one per reconcile)."""
    sd = _sd()
    sd["spec"]["engine"] = {"env": [{"name": f"A{i // 2:03d}" + "B" * 200, "value": "1"} for i in range(128)]}
    posted: list[dict[str, Any]] = []

    class Recording(FakeApi):
        def create(self, obj: dict[str, Any]) -> dict[str, Any]:
            posted.append(copy.deepcopy(obj))
            return obj

    api = Recording(sd)
    reconciler = _reconciler(api)
    for _ in range(3):
        assert reconciler.reconcile("team", "chat") == "invalid"
    reconciler.events.flush(5)
    cond = st.condition(api.sd["status"], st.SPEC_VALID) or {}
    assert cond["status"] == "False" and st.MAX_MESSAGE - 40 < len(cond["message"]) <= st.MAX_MESSAGE
    assert cond["message"].startswith("spec.engine.env: A000") and cond["message"].endswith("more characters)")
    warnings = [e for e in posted if e["reason"] == "InvalidSpec"]
    assert len(warnings) == 1 and len(warnings[0]["message"]) <= 1024
