"""Schedule mode: a proven N whose windows propose a schedule expected to beat it is rolled back as a probe,
and the schedule is canaried against the stable that N would have replaced (`machine._schedule_probe`).
Promoted first, the N would leave the schedule only the few percent between them to prove, which one
round rarely can; against the old stable the schedule's gain is the N's and more."""

from __future__ import annotations

import json
from pathlib import Path

from specpilot.api.models import TuningMode
from specpilot.tuning import ActionKind, TunerState, step
from specpilot.tuning.machine import _schedule_probe, candidates, fitted_model, load_mix, propose
from specpilot_harness.bench import cli, strategies
from specpilot_harness.bench.report import served_goodput
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(cli.__file__).parent / "profiles"
# An old GPU with a draft model, default N=4, 1 to 64 sequences per pod: no speculation is far better than 4
# over the mix, and a schedule drafting 2 at the lightest loads, 1 in between and none at 64 better still.
PROFILE = load_profiles((PROFILES / "mixed-load.json").read_text())["mix-old-gpu-draft_model-2006"]


def _run(mode: TuningMode, seed: int = 0) -> tuple[TunerState, list[dict]]:
    dep = strategies._deployment(PROFILE, seed, 48)
    tuning = strategies.bench_tuning(PROFILE, mode)
    state = TunerState.new(PROFILE.method, PROFILE.default_n, now=dep.now)
    for _ in range(48):
        state, action = step(state, tuning, dep.window(), dep.now)
        dep.apply(action)
    decided = [h for h in state.history if h["action"] in (ActionKind.PROMOTE, ActionKind.ROLLBACK,
                                                            ActionKind.START_CANARY)]
    return state, decided


def test_a_proven_n_probes_for_the_schedule_its_windows_propose() -> None:
    state, decided = _run("schedule")
    first, verdict, second, promoted = decided[:4]
    assert (first["action"], first["n"], first.get("schedule")) == (ActionKind.START_CANARY, 0, None)
    assert verdict["action"] == ActionKind.ROLLBACK and verdict["reason"].startswith("probe: schedule ")
    assert verdict["probe"] is True  # a Normal Event, not a failed canary's Warning
    assert "over stable, N=0 " in verdict["reason"]
    assert second["action"] == ActionKind.START_CANARY and second["schedule"]
    assert promoted["action"] == ActionKind.PROMOTE and promoted["schedule"] == second["schedule"]
    # The schedule replaced N=4, and serves more than the N it probed past would have.
    assert state.stable_schedule == second["schedule"]
    assert served_goodput(PROFILE, state.stable_n, state.stable_schedule) > PROFILE.goodput(0) * 1.02


def test_single_mode_promotes_the_proven_n() -> None:
    state, decided = _run("single")
    assert [(h["action"], h["n"]) for h in decided[:2]] == [(ActionKind.START_CANARY, 0), (ActionKind.PROMOTE, 0)]
    assert state.stable_schedule is None


def test_with_no_room_left_in_the_round_the_proven_n_is_banked() -> None:
    tuning = strategies.bench_tuning(PROFILE, "schedule")
    state = TunerState.from_status(json.loads(json.dumps(_before_the_verdict().to_status())),
                                   method=PROFILE.method, stable_n=PROFILE.default_n)
    g = propose(state.method, state.records, fitted_model(state), candidates(state, tuning), load_mix(state),
                tuning.objective, state.stable_n).stable_gain
    assert g is not None
    gain = g - tuning.promotion_margin  # the N's expected gain: a margin short of the schedule's
    assert _schedule_probe(state, tuning, 0, gain) is not None
    assert _schedule_probe(state, tuning, 0, g) is None  # the schedule would not beat the N by enough
    state.windows_in_round = tuning.max_windows_per_round - tuning.canary.windows + 1
    assert _schedule_probe(state, tuning, 0, gain) is None
    state.windows_in_round = 0
    state.schedule_tried = True  # the round's schedule canary has run
    assert _schedule_probe(state, tuning, 0, gain) is None


def _before_the_verdict() -> TunerState:
    """The state of the schedule-mode run just before the first canary's verdict (N=0's)."""
    dep = strategies._deployment(PROFILE, 0, 48)
    tuning = strategies.bench_tuning(PROFILE, "schedule")
    state = TunerState.new(PROFILE.method, PROFILE.default_n, now=dep.now)
    while True:
        before = TunerState.from_status(json.loads(json.dumps(state.to_status())), method=PROFILE.method,
                                        stable_n=dep.stable_n)
        state, action = step(state, tuning, dep.window(), dep.now)
        if action.kind in (ActionKind.ROLLBACK, ActionKind.PROMOTE):
            assert before.canary_n == 0
            return before
        dep.apply(action)
