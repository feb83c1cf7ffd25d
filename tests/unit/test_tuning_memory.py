"""What the tuner remembers of a long-running deployment: an acceptance drift is a move beyond the windows'
own spread (a false one makes it forget every N it measured), what a canary measured outlives the stable's
older windows, a running canary keeps every window of its analysis, and a block drafter's curve between two
measured N follows what the N measured between two others showed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specpilot.api.models import Canary, TuningMode, canary_pods
from specpilot.tuning import Action, ActionKind, drift, step, transfer
from specpilot.tuning.judge import EXTEND, Verdict, out_of_room, paired
from specpilot.tuning.kinds import Ruling
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.rules import analysing
from specpilot.tuning.state import ANALYSIS_KEPT, LOADS_KEPT, MAX_RECORDS, TunerState
from specpilot.tuning.transfer import Draws, sample_lengths, smaller_odds
from specpilot_harness.bench import cli, strategies
from specpilot_harness.bench.simulate import Fleet
from specpilot_harness.sim.profile import load_profiles


def _windows(ls: list[float], first: int = 0) -> list[WindowRecord]:
    return [WindowRecord(seq=first + i, track="stable", n=7, drafts=1000.0, accepted_per_pos=(), tokens_per_step=l,
                         step_s=0.02, load=32.0) for i, l in enumerate(ls)]


def test_a_move_within_the_windows_own_spread_is_not_drift() -> None:
    # Six calm reference windows, then six as spread as the engine's windows are: their mean is 8.9% higher,
    # above the 8% threshold and four of the calm windows' standard errors, but noise.
    ref = drift.reference(_windows([4.33, 4.37, 4.44, 4.30, 4.68, 4.32]))
    assert drift.detect(ref, _windows([4.45, 5.20, 4.60, 5.15, 4.50, 4.90], 6), 0.08) is None
    # Acceptance halving moves tokens per step far beyond both.
    reason = drift.detect(ref, _windows([3.0, 3.1, 2.9, 3.05, 2.95, 3.0], 6), 0.08)
    assert reason == "tokens per step moved from 4.407 to 3.000"


def test_noise_alone_seldom_reopens_a_round_over_a_hundred_windows() -> None:
    # Windows whose tokens per step scatter by 5.5% (a block drafter's at N=7 on the benchmark's engine),
    # looked at after every window for 100 windows: a false drift in under 8% of deployments (the reference's
    # spread alone: 18%).
    rng = np.random.default_rng(0)
    alarms = 0
    for _ in range(500):
        ls = list(4.4 * np.exp(0.055 * rng.standard_normal(112)))
        ref = drift.reference(_windows(ls[:6]))
        recent = _windows(ls[6:], 6)
        alarms += any(drift.detect(ref, recent[t - 6:t], 0.08) for t in range(6, 107))
    assert alarms / 500 < 0.08


@pytest.mark.parametrize("reference, problem", [
    ({"l": "x", "l_sd": 0.1}, "reference l 'x' is not a number"),
    ({"l_sd": 0.1}, "reference l None is not a number"),
    ({"l": 4.0, "l_sd": -1.0}, "reference l_sd -1.0 is not a finite number from 0 to 65"),
    ({"l": 4.0, "l_sd": 0.1, "windows": 1e400}, "reference windows"),
    ([4.0], "reference is not an object"),
])
def test_a_broken_drift_reference_in_status_is_named(reference: object, problem: str) -> None:
    status = TunerState.new("mtp", 3).to_status()
    with pytest.raises(ValueError, match=problem):
        TunerState.from_status({**status, "reference": reference}, method="mtp", stable_n=3)


def test_a_canary_s_windows_outlive_the_stable_s_older_ones() -> None:
    state = TunerState.new("dflash", 7)
    seq = 0
    for n in (15, 14):
        for _ in range(6):
            seq += 1
            state.add_record(WindowRecord(seq=seq, track="stable", n=7, drafts=1000.0, accepted_per_pos=(500.0,),
                                          tokens_per_step=1.5, step_s=0.02, load=32.0))
            state.add_record(WindowRecord(seq=seq, track="canary", n=n, drafts=1000.0, accepted_per_pos=(400.0,),
                                          tokens_per_step=1.4, step_s=0.02, load=32.0))
    for _ in range(300):  # a day of the stable alone
        seq += 1
        state.add_record(WindowRecord(seq=seq, track="stable", n=7, drafts=1000.0, accepted_per_pos=(500.0,),
                                      tokens_per_step=1.5, step_s=0.02, load=32.0))
    assert len(state.records) == MAX_RECORDS
    assert sum(r.n == 15 for r in state.records) == 6 and sum(r.n == 14 for r in state.records) == 6
    stable = [r.seq for r in state.records if r.track == "stable"]
    assert stable[-LOADS_KEPT:] == list(range(seq - LOADS_KEPT + 1, seq + 1))  # the load mix: the latest


def _window(state: TunerState, seq: int, canary_n: int | None) -> None:
    state.add_record(WindowRecord(seq=seq, track="stable", n=7, drafts=1000.0, accepted_per_pos=(500.0,),
                                  tokens_per_step=1.5, step_s=0.02, load=32.0))
    if canary_n is not None:
        state.add_record(WindowRecord(seq=seq, track="canary", n=canary_n, drafts=1000.0,
                                      accepted_per_pos=(400.0,), tokens_per_step=1.4, step_s=0.02, load=32.0))


def test_a_running_canary_keeps_every_window_of_its_analysis_in_a_full_status() -> None:
    state = TunerState.new("dflash", 7)
    for seq in range(1, 301):  # a day of the stable alone: the records are full
        _window(state, seq, None)
    state.canary_n, state.analysis_from_seq = 5, 301
    for seq in range(301, 341):  # 40 windows of analysis (a retry's, or one extended to EXTEND x 12)
        _window(state, seq, 5)
    assert len(state.records) == MAX_RECORDS
    canary = [r.seq for r in state.records if r.track == "canary"]
    stable = {r.seq for r in state.records if r.track == "stable"}
    assert canary == list(range(301, 341)) and set(canary) <= stable
    # Ended, its windows are dropped like any other N's, the largest group first.
    state.canary_n, state.analysis_from_seq = None, None
    for seq in range(341, 441):
        _window(state, seq, None)
    assert len(state.records) == MAX_RECORDS and 0 < sum(r.track == "canary" for r in state.records) < 40
    # An analysis longer than the records hold keeps its latest windows.
    state.canary_n, state.analysis_from_seq = 4, 441
    for seq in range(441, 541):
        _window(state, seq, 4)
    assert len(state.records) == MAX_RECORDS
    assert [r.seq for r in state.records if r.track == "canary"] == list(range(481, 541))


def _replay(profiles: str, name: str | None, seed: int, windows: int, mode: TuningMode,
            update: dict[str, Any] | None = None) -> list[tuple[int, Action]]:
    """Every action but holding and analysing of the tuner over the bench's simulated deployment, by window."""
    loaded = load_profiles((Path(cli.__file__).parent / "profiles" / profiles).read_text())
    profile = loaded[name] if name else next(iter(loaded.values()))
    fleet = Fleet(3, canary_pods("auto", 3, 1))
    dep = strategies._deployment(profile, seed, windows, fleet)
    tuning = strategies.bench_tuning(profile, mode, fleet).model_copy(update=update or {})
    state = TunerState.new(profile.method, profile.default_n, now=dep.now)
    actions = []
    for w in range(windows):
        state, action = step(state, tuning, dep.window(), dep.now)
        dep.apply(action)
        if action.kind not in (ActionKind.HOLD, ActionKind.KEEP_ANALYSING):
            actions.append((w, action))
    return actions


def test_a_retry_in_a_day_old_deployment_reaches_its_verdict() -> None:
    # An old-GPU block drafter in schedule mode: after two rounds the records are full when the retry of
    # an unproven schedule starts. Its own windows used to age out of status as they came, so the judge saw
    # its latest 16 and said "promising" until the round's budget stopped it 49 windows later.
    actions = _replay("mixed-load.json", "mix-old-gpu-dflash-2007", 2, 120, "schedule")
    retry = next(i for i, (_, a) in enumerate(actions) if a.reason.startswith("retry:"))
    (started, _), (ended_at, ended) = actions[retry], actions[retry + 1]
    # The judge's verdict on the pooled windows (either way), not the round's budget ...
    assert ended.kind in (ActionKind.PROMOTE, ActionKind.ROLLBACK) and "carried windows" in ended.reason, \
        ended.reason
    # ... within the canary's own window limit (EXTEND x its windows) and the window it starts in.
    assert ended_at - started <= EXTEND * Canary().windows + 1, (started, ended_at, ended.reason)


def test_an_undecided_canary_ends_when_status_holds_no_more_of_its_windows() -> None:
    promising = Verdict(Ruling.CONTINUE, 0.02, -0.01, 0.05, ANALYSIS_KEPT, "promising: measured +2.0%")
    ended = out_of_room(promising, ANALYSIS_KEPT)
    assert ended.decision == Ruling.ROLLBACK and ended.inconclusive
    assert ended.reason == f"inconclusive after {ANALYSIS_KEPT} windows, all that status holds of one canary " \
                           "(measured +2.0%)"
    assert out_of_room(dataclasses.replace(promising, windows=ANALYSIS_KEPT - 1), ANALYSIS_KEPT).decision \
        == Ruling.CONTINUE
    promoted = dataclasses.replace(promising, decision=Ruling.PROMOTE)
    assert out_of_room(promoted, ANALYSIS_KEPT) == promoted


def test_a_canary_allowed_more_windows_than_status_holds_still_gets_a_verdict(monkeypatch: Any) -> None:
    # 30 windows, so up to 90 while promising, and a round budget that would not stop it: a canary the judge
    # keeps calling promising used to keep analysing on the latest 60 windows status holds, for good.
    def promising(stable: Any, canary: Any, *args: Any, **kwargs: Any) -> Verdict:
        return Verdict(Ruling.CONTINUE, 0.02, -0.01, 0.05, len(paired(stable, canary)), "promising")
    monkeypatch.setattr(analysing, "judge", promising)
    actions = _replay("article.json", None, 0, 200, "single",
                      {"max_windows_per_round": 1000, "canary": Canary(analysis_window="5m", windows=30)})
    (started, start), (ended, end) = actions[:2]
    assert start.kind == ActionKind.START_CANARY and end.kind == ActionKind.ROLLBACK
    assert end.reason.startswith(f"inconclusive after {ANALYSIS_KEPT} windows, all that status holds")
    assert ended - started <= ANALYSIS_KEPT + 3


def _block(seq: int, n: int, curve: list[float]) -> WindowRecord:
    acc = tuple(1000.0 * s for s in curve[:n])
    return WindowRecord(seq=seq, track="canary", n=n, drafts=1000.0, accepted_per_pos=acc,
                        tokens_per_step=1 + sum(acc) / 1000.0, step_s=0.02, load=32.0)


CURVE = [0.8 * 0.85 ** k for k in range(15)]


def test_a_block_drafter_found_diluted_between_two_n_is_believed_diluted_between_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    full = [_block(s, 7, CURVE) for s in range(6)]
    records = full + [_block(10 + s, 15, [s * 0.8 for s in CURVE]) for s in range(6)]
    assert smaller_odds(records, [7, 15]) == 0.5  # nothing measured between two others yet
    # The whole block accepts less the longer it is: 14 measures close to 15's curve, not 7's.
    records += [_block(20 + s, 14, [s * 0.82 for s in CURVE]) for s in range(6)]
    assert smaller_odds(records, [7, 14, 15]) == pytest.approx(1 / 3)
    learnt = sample_lengths("dflash", records, [12], Draws.make(256))[:, 0].mean()
    monkeypatch.setattr(transfer, "smaller_odds", lambda records, observed: 0.5)
    even = sample_lengths("dflash", records, [12], Draws.make(256))[:, 0].mean()
    assert learnt < even  # N=12, between 7 and 14, is believed more like 14 than even odds would have it
    # 14 measuring 7's curve instead is a drop at the full block: the next N between is believed 7-like.
    cliff = full + [_block(10 + s, 15, [s * 0.8 for s in CURVE]) for s in range(6)] \
        + [_block(20 + s, 14, CURVE) for s in range(6)]
    assert smaller_odds(cliff, [7, 14, 15]) == pytest.approx(2 / 3)

