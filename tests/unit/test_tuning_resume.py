"""A `status.tuning` someone edited into what the tuner never writes is named once and the tuner restarts
at spec N (and the reconciler renders spec N without a canary), instead of failing every window."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import SpeculativeDeployment
from specpilot.canary import resume as tuning_resume
from specpilot.canary.tracks import TrackPlan, plan_tracks
from specpilot.tuning import TunerState
from specpilot.tuning.state import MAX_HISTORY, MAX_PAIRS, MAX_RECORDS

SD = SpeculativeDeployment.model_validate({
    "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
    "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
             "tuning": {"enabled": True, "candidates": [3, 5, 7]}}})


_RECORD = {"seq": 3, "track": "stable", "n": 5, "drafts": 100.0, "acc": [60.0, 30.0], "l": 1.9, "t": 0.02, "b": 4.0}
# An unproven canary's windows, kept for its retry (tuning/evidence.py).
_EVIDENCE = {"n": 7, "stableN": 5, "round": 1, "gain": 0.05, "retried": False,
             "records": [_RECORD, {**_RECORD, "track": "canary", "n": 7}]}


def _written(**changes: Any) -> dict[str, Any]:
    state = TunerState.new("ngram", 5, None, 100.0)
    state.canary_n, state.phase, state.seq = 7, "analysing", 12
    return {**state.to_status(), "specN": 3, **changes}


def test_the_tuners_own_state_resumes_as_written() -> None:
    assert tuning_resume.problem(_written(records=[_RECORD], pairs=[[7, 5, 4.0, 0.1]], carried=[_EVIDENCE]),
                                 SD) is None
    state, problem = tuning_resume.resume(_written(), SD, 200.0)
    assert problem is None and (state.stable_n, state.canary_n, state.phase, state.seq) == (5, 7, "analysing", 12)
    assert plan_tracks(SD, {"tuning": _written()}) == TrackPlan(5, 7)
    assert tuning_resume.problem(None, SD) is None and tuning_resume.problem({}, SD) is None
    assert tuning_resume.problem(_written(method="mtp"), SD) is None  # another method: restarts quietly


@pytest.mark.parametrize(("tuning", "named"), [
    ("garbage", "is a str, not an object"),
    (_written(stableN="seven"), "stableN 'seven'"),
    (_written(stableN=-1), "stableN -1"),
    (_written(stableN=True), "stableN True"),
    (_written(canaryN=2.5), "canaryN 2.5"),
    (_written(phase="winning"), "phase 'winning'"),
    (_written(round=None), "round None"),
    (_written(history="lots"), "history is not a list"),
    (_written(history=[1, 2]), "history holds"),
    (_written(records=[{"bogus": 1}]), "cannot be read"),
    (_written(reference=[1.0]), "reference is not an object"),
    (_written(probed="7"), "probed is not a list"),
    (_written(probed=["x"]), "cannot be read"),
    (_written(convergedLoads=[4.0, float("nan")]), "convergedLoads is not a list"),
    (_written(convergedLoads=["4"]), "convergedLoads is not a list"),
    (_written(convergedLoads=[4.0] * 10_000), "convergedLoads is not a list of at most 48"),
    (_written(pairs=[[100_000, 3, 4.0, 0.1]]), "pair N 100000"),  # would size the step model's matrices
    (_written(pairs=[[5, 3, 4.0, float("inf")]]), "pair log ratio inf"),
    (_written(records=[{**_RECORD, "n": 10**9}]), "record n 1000000000"),
    (_written(records=[{**_RECORD, "b": float("inf")}]), "record b inf"),
    (_written(records=[{**_RECORD, "acc": [1.0] * 100_000}]), "record acc/dr is not a list of at most 64"),
    (_written(records=[{**_RECORD, "b": -1.0}]), "record b -1.0"),  # the judge takes the log of the load
    (_written(records=[{**_RECORD, "t": -0.02}]), "record t -0.02"),
    (_written(records=[{**_RECORD, "acc": [60.0, -30.0]}]), "record acc -30.0"),
    (_written(records=[{**_RECORD, "track": "x" * 10_000}]), "neither 'stable' nor 'canary'"),
    (_written(carried="all"), "carried is not a list"),
    (_written(carried=[7]), "carried holds"),
    (_written(carried=[_EVIDENCE] * 3), "carried is not a list of at most 2"),
    (_written(carried=[{**_EVIDENCE, "records": [_RECORD] * 10_000}]), "carried records is not a list of at most 72"),
    (_written(carried=[{**_EVIDENCE, "n": -1}]), "carried n -1"),
    (_written(carried=[{**_EVIDENCE, "gain": float("nan")}]), "carried gain nan"),
    (_written(carried=[{**_EVIDENCE, "round": "1"}]), "carried round '1'"),
    (_written(carried=[{**_EVIDENCE, "schedule": [[1, 8]]}]), "carried schedule holds a row other than"),
    (_written(carried=[{**_EVIDENCE, "schedule": [[1, 8, 3]] * 100}]), "carried schedule is not a list of at most 16"),
    (_written(carried=[{**_EVIDENCE, "schedule": [[1, 4096, 9]]}]), "carried N=7 cannot run"),
    (_written(stableN=999), "stableN 999 cannot run"),
    ({k: v for k, v in _written().items() if k != "windowsInRound"}, "no 'windowsInRound'"),
    # JSON's 1e400 reads as infinity: int() of it raised OverflowError, which no handler caught.
    (_written(windowsInRound=float("inf")), "windowsInRound inf"),
    (_written(tried=[float("inf")]), "tried N inf"),
    (_written(records=[{**_RECORD, "seq": float("-inf")}]), "record seq -inf"),
    (_written(phaseSince=float("nan")), "phaseSince nan"),
    (_written(convergedAt=float("inf")), "convergedAt inf"),
    (_written(pairs=[""]), "is not [N canary, N stable, load, log ratio]"),  # was an IndexError
    (_written(nearTie=float("inf")), "nearTie is not a note"),
    (_written(canaryN=None), "phase analysing has no canaryN"),  # the machine would step a canary of no N
    (_written(records=[{**_RECORD, "l": 0}]), "record l 0"),  # a step yields a token: the judge takes log(l)
])
def test_a_tampered_state_is_named_and_the_tuner_restarts_at_spec_n(tuning: Any, named: str) -> None:
    state, problem = tuning_resume.resume(tuning, SD, 200.0)
    assert problem is not None and named in problem, problem
    assert (state.stable_n, state.canary_n, state.phase, state.seq) == (3, None, "observing", 0)
    (entry,) = state.history
    assert entry["action"] == "reset" and named in entry["reason"] and "spec N=3" in entry["reason"]
    # Valid JSON for the status, so the next window resumes it without a word.
    assert tuning_resume.problem({**state.to_status(), "specN": 3}, SD) is None
    assert plan_tracks(SD, {"tuning": tuning}) == TrackPlan(None, None)


@pytest.mark.parametrize("seam", [{"stableN": 5, "stableSchedule": 5}, {"stableSchedule": [None]},
                                  {"canaryN": 7, "canarySchedule": {"a": 1}}, {"stableN": "x"}, {"canaryN": -1},
                                  {"stableN": 5, "stableSchedule": [[1, 8, "x"]]}])
def test_the_seam_renders_spec_n_for_tracks_it_cannot_read(seam: dict[str, Any]) -> None:
    # status.tuning as the seam's other writers may put it (no method, no version): its N and schedules are
    # rendered as written, so what is not a whole N or a schedule's rows renders spec N. {"stableSchedule":
    # 5} raised out of every reconcile before.
    assert plan_tracks(SD, {"tuning": seam}) == TrackPlan(None, None)
    assert plan_tracks(SD, {"tuning": {"stableN": 5, "canaryN": 7}}) == TrackPlan(5, 7)


def test_a_state_for_another_block_size_restarts_quietly_at_spec_n() -> None:
    # The user edits spec.speculative.blockSize 16 -> 8 with the tuner at N=7 (valid for both): kept, the
    # state would go on canarying and promoting N up to 15, which a block of 8 cannot run.
    sd = SpeculativeDeployment.model_validate({
        "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
        "spec": {"model": "m", "speculative": {"method": "dflash", "draftModel": "z-lab/d", "blockSize": 8,
                                                "numSpeculativeTokens": 5}, "tuning": {"enabled": True}}})
    old = TunerState.new("dflash", 7, 16, 100.0)
    old.tried, old.round = [15, 12], 3
    status = {**old.to_status(), "specN": 5}
    state, problem = tuning_resume.resume(status, sd, 200.0)
    fresh = TunerState.new("dflash", 5, 8, 200.0)
    assert problem is None and (state.stable_n, state.block_size, state.tried, state.round) == (5, 8, [], fresh.round)
    assert plan_tracks(sd, {"tuning": status}) == TrackPlan(None, None)
    assert plan_tracks(sd, {"tuning": {**state.to_status(), "specN": 5}}) == TrackPlan(5, None)


def test_a_status_holding_more_than_the_tuner_keeps_resumes_with_what_it_keeps() -> None:
    # Every window's decision works over the records and pairs: thousands written into the status by
    # someone else would slow each one; the tuner reads back the newest of them, as many as it keeps.
    records = [{**_RECORD, "seq": i} for i in range(5000)]
    status = _written(records=records, pairs=[[7, 5, 4.0, 0.1]] * 5000,
                      history=[{"seq": i} for i in range(5000)])
    state, problem = tuning_resume.resume(status, SD, 200.0)
    assert problem is None
    assert len(state.records) == MAX_RECORDS and state.records[-1].seq == 4999
    assert len(state.pairs) == MAX_PAIRS and len(state.history) == MAX_HISTORY
