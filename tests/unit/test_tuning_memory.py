"""What the tuner remembers of a long-running deployment: an acceptance drift is a move beyond the windows'
own spread (a false one makes it forget every N it measured), what a canary measured outlives the stable's
older windows, and a block drafter's curve between two measured N follows what the N measured between two
others showed."""

from __future__ import annotations

import numpy as np
import pytest

from specpilot.tuning import drift, transfer
from specpilot.tuning.observations import WindowRecord
from specpilot.tuning.state import LOADS_KEPT, MAX_RECORDS, TunerState
from specpilot.tuning.transfer import Draws, sample_lengths, smaller_odds


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
    ({"l": 4.0, "l_sd": -1.0}, "reference l_sd -1.0 is not a finite number of at least 0"),
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
