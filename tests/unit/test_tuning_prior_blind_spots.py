"""Blind spots found running the tuner against simulated engines: a block drafter whose curve changes at
the top of the range (and one whose curve moves a little with every N), and a step-time prior that is far
too optimistic about speculating."""

from __future__ import annotations

import dataclasses

import pytest

from specpilot.tuning import costs
from specpilot.tuning.observations import TrackWindow, WindowRecord, record
from specpilot.tuning.planner import plan
from specpilot.tuning.step_model import StepModel
from specpilot.tuning.transfer import Draws, measured_disagreement, measured_shift, sample_lengths
from specpilot_runtime.speculative import Family
from specpilot_runtime.vllm_metrics import Snapshot

# example-dflash-parallel (the simulator's bundled profile): N=15 fills the block and accepts less.
DFLASH = [0.86, 0.74, 0.64, 0.55, 0.48, 0.42, 0.37, 0.32, 0.28, 0.24, 0.21, 0.18, 0.16, 0.14, 0.12]
DFLASH_AT_15 = [0.84, 0.71, 0.61, 0.52, 0.45, 0.39, 0.34, 0.29, 0.25, 0.21, 0.18, 0.15, 0.13, 0.11, 0.09]
# qwen3-8b-eagle3-gsm8k-highload's curve and its step times at 128 sequences (10.3 ms without speculation,
# 20.7 ms at N=3), seen at 4 sequences per pod, where the H200 prior says speculating costs little.
EAGLE = [0.37, 0.21275, 0.14414, 0.10504, 0.07924, 0.06079, 0.04703]
EAGLE_STEP_MS = [10.3214, 13.4146, 17.1577, 20.688, 24.8776, 28.4794, 32.224, 35.9687]


def window(seq: int, n: int, curve: list[float], step_ms: float, load: float = 4.0, pods: int = 3,
           wobble: float = 1.0) -> WindowRecord:
    """Exact counters of one 5-minute window at N, load and step time."""
    seqs = 300.0 * 1000 / step_ms * load * pods
    acc = [seqs * s * wobble ** (k + 1) for k, s in enumerate(curve[:n])]
    tokens = seqs + sum(acc)
    finished = tokens / 256
    snap = Snapshot(drafts=seqs, draft_tokens=seqs * n, accepted_tokens=sum(acc), accepted_per_pos=tuple(acc),
                    generation_tokens=tokens, tpot_sum=finished * step_ms / 1000 / (tokens / seqs),
                    tpot_count=finished, running=load * pods)
    return record(seq, "stable", TrackWindow(n=n, delta=snap, ready_pods=pods, desired_pods=pods), 300.0)


def dflash_windows(n: int, curve: list[float], start: int, count: int = 6) -> list[WindowRecord]:
    # A small alternating wobble gives the batch-means error something to measure.
    return [window(start + i, n, curve, costs.step_ms(Family.PARALLEL, n, 4.0), wobble=1.0 + 0.004 * (-1) ** i)
            for i in range(count)]


def dense_h200(family: Family) -> StepModel:
    """The step-time model after a canary 7 vs 15 at 4 sequences whose step times are the 8B H200's."""
    m = StepModel(family)
    return StepModel(family, [m.pair(7, 15, 4.0, costs.step_ms(family, 7, 4.0), costs.step_ms(family, 15, 4.0))
                              for _ in range(6)])


def test_a_block_drafter_that_accepts_less_at_the_top_gets_its_neighbour_tried() -> None:
    # Promoted 7 -> 15; 15's curve is 5% below 7's on the positions they share, so 14 (borrowed from 15)
    # may be much better than 15: worth a canary.
    records = dflash_windows(7, DFLASH, 0) + dflash_windows(15, DFLASH_AT_15, 6)
    assert measured_disagreement(records, 7, 15) > 0.03
    p = plan("dflash", records, dense_h200(Family.PARALLEL), list(range(16)), 15, [4.0] * 12, "latency",
             0.02, 0.25, exclude=[7, 15])
    assert p.next_canary == 14


def test_a_full_block_s_drop_is_measured_side_by_side_with_the_stable() -> None:
    # Acceptance moves with the prompts, for both tracks at once: the stable at 7 ran an hour of harder
    # prompts (3% lower per position) before the canary at 15 came, in easier ones (3% higher). Against
    # every window of the stable, 15's 5% drop read as an 8% rise and 14 was never tried; the windows side
    # by side show the drop.
    def at(seq: int, n: int, curve: list[float], wobble: float, track: str) -> WindowRecord:
        r = window(seq, n, curve, costs.step_ms(Family.PARALLEL, n, 4.0), wobble=wobble)
        return dataclasses.replace(r, track=track)

    before = [at(i, 7, DFLASH, 0.97 + 0.004 * (-1) ** i, "stable") for i in range(12)]
    during = [r for i in range(12, 18) for r in (at(i, 7, DFLASH, 1.03 + 0.004 * (-1) ** i, "stable"),
                                                 at(i, 15, DFLASH_AT_15, 1.03 + 0.004 * (-1) ** i, "canary"))]
    records = before + during
    assert measured_shift(records, 15, 7) == pytest.approx(0.05, abs=0.01)  # 7's curve above 15's by 5%
    p = plan("dflash", records, dense_h200(Family.PARALLEL), list(range(16)), 15, [4.0] * 18, "latency",
             0.02, 0.25, exclude=[7, 15])
    assert p.next_canary == 14


def test_between_two_measured_n_that_disagree_a_block_drafter_is_believed_like_either() -> None:
    # 7 and 15 measured, 15's curve 5% below 7's: 14 may sit on 7's curve (the drop is the full block's)
    # as well as on 15's (the block dilutes below 14). Borrowing 15's curve alone made 14 look like 15, and a
    # CI run whose canary took half the traffic converged at 15 (95% of the best) without trying 14.
    records = dflash_windows(7, DFLASH, 0) + dflash_windows(15, DFLASH_AT_15, 6)
    lengths = sample_lengths("dflash", records, [14], Draws.make(256))[:, 0]
    like_15, like_7 = 1 + sum(DFLASH_AT_15[:14]), 1 + sum(DFLASH[:14])
    nearer_7 = float((lengths > (like_15 + like_7) / 2).mean())
    assert 0.35 < nearer_7 < 0.65


@pytest.mark.parametrize("at_15", [
    DFLASH_AT_15,  # the bundled profile's: deep positions lose most
    [s * 0.985 ** (k + 1) for k, s in enumerate(DFLASH)],  # every conditional acceptance 1.5% lower
    [s * 0.93 for s in DFLASH],  # every position 7% lower
], ids=["bundled", "compounding", "uniform"])
def test_below_a_full_block_the_smaller_n_s_curve_is_extended_with_its_trend_in_depth(at_15: list[float]) -> None:
    # 7 and 15 measured; when 14 is believed like 7, its positions 8..14 (which only 15 measured) carry the
    # gap between the two curves as it grows with depth. Moving them by the gap averaged over positions
    # 1..7 put 14 at 6.44 for a true 6.59 when the gap compounds: a +2% canary left looking like a tie.
    records = dflash_windows(7, DFLASH, 0) + dflash_windows(15, at_15, 6)
    draws = Draws.make(512)
    lengths = sample_lengths("dflash", records, [14], draws)[:, 0]
    like_7 = float(lengths[draws.between > 0].mean())
    assert like_7 == pytest.approx(1 + sum(DFLASH[:14]), rel=0.01)


def test_a_block_drafter_whose_curve_does_not_depend_on_n_is_not_probed_again() -> None:
    records = dflash_windows(7, DFLASH, 0) + dflash_windows(15, DFLASH, 6)
    assert measured_disagreement(records, 7, 15) == 0.0
    p = plan("dflash", records, dense_h200(Family.PARALLEL), list(range(16)), 15, [4.0] * 12, "latency",
             0.02, 0.25, exclude=[7, 15])
    assert p.next_canary is None


def test_a_prior_that_makes_speculating_look_cheap_does_not_stop_a_canary() -> None:
    # At N=3 the prior (H200, 8B, 4 sequences) says 3 is best by a wide margin; in truth N=1 is 22% better
    # than 3 and N=0 16%. The prior's spread must leave a canary below 3 worth its cost.
    records = [window(i, 3, EAGLE, EAGLE_STEP_MS[3], wobble=1.0 + 0.004 * (-1) ** i) for i in range(6)]
    p = plan("eagle3", records, StepModel(Family.SEQUENTIAL), list(range(8)), 3, [4.0] * 6, "latency",
             0.02, 0.25)
    assert p.next_canary is not None
    assert p.value[0] > p.cost[0]  # speculation off alone is worth trying


def test_a_block_drafter_diluted_smoothly_with_n_is_not_walked_down_one_n_at_a_time() -> None:
    # Each N accepts 1.2% less per position than the one below (a block diluted with length): 7, 15 and
    # then 14 measured. 14 and 15 barely disagree, so 13 (borrowed from 14) is no longer as uncertain as
    # all of 7..14 disagree: no canary at 13, 12, ... one after the other.
    def diluted(n: int) -> list[float]:
        return [s * (1 - 0.012 * (n - 7)) for s in DFLASH[:n]]

    records = dflash_windows(7, DFLASH, 0) + dflash_windows(15, diluted(15), 6) + dflash_windows(14, diluted(14), 12)
    assert measured_disagreement(records, 7, 14) > 0.05
    p = plan("dflash", records, dense_h200(Family.PARALLEL), list(range(16)), 15, [4.0] * 18, "latency",
             0.02, 0.25, exclude=[7, 14, 15])
    assert p.next_canary is None
