"""A machine where every drafted token costs about a full step (a CPU serving a tiny target with a draft
model of its size): a canary above the stable shows steep costs, and the tuner must then try below it."""

from __future__ import annotations

import math

import numpy as np

from specpilot.tuning import costs
from specpilot.tuning.observations import TrackWindow, WindowRecord, record
from specpilot.tuning.planner import plan
from specpilot.tuning.step_model import StepModel
from specpilot_runtime.speculative import Family
from specpilot_runtime.vllm_metrics import Snapshot

# Strong acceptance, so that on any GPU-like shape speculating deep pays off.
CURVE = [0.79, 0.69, 0.64, 0.6, 0.57, 0.54, 0.52]
LOAD = 8.0


def linear_ms(n: int) -> float:
    """Step time growing with the tokens of one step: verifying N + 1 tokens plus N draft-model steps."""
    return 75.0 + 95.0 * n


def window(seq: int, n: int, track: str = "stable", pods: int = 3) -> WindowRecord:
    step_ms = linear_ms(n)
    seqs = 300.0 * 1000 / step_ms * LOAD * pods
    wobble = 1.0 + 0.004 * (-1) ** seq  # gives the batch-means error something to measure
    acc = [seqs * s * wobble ** (k + 1) for k, s in enumerate(CURVE[:n])]
    tokens = seqs + sum(acc)
    finished = tokens / 256
    snap = Snapshot(drafts=seqs if n else 0.0, draft_tokens=seqs * n, accepted_tokens=sum(acc),
                    accepted_per_pos=tuple(acc), generation_tokens=tokens,
                    tpot_sum=finished * step_ms / 1000 / (tokens / seqs), tpot_count=finished,
                    running=LOAD * pods)
    return record(seq, track, TrackWindow(n=n, delta=snap, ready_pods=pods, desired_pods=pods), 300.0)


def goodput(n: int) -> float:
    return (1 + sum(CURVE[:n])) / linear_ms(n)


def after_a_canary_at_7() -> tuple[list[WindowRecord], StepModel]:
    records = [window(i, 4) for i in range(8)] + [window(i, 7, "canary", 1) for i in range(2, 8)]
    model = StepModel(Family.SEQUENTIAL)
    pairs = [model.pair(7, 4, LOAD, linear_ms(7), linear_ms(4) * (1.0 + 0.01 * (-1) ** i)) for i in range(6)]
    return records, StepModel(Family.SEQUENTIAL, pairs)


def test_the_prior_holds_a_machine_whose_cost_grows_with_every_token() -> None:
    # The roofline shape fits a step that costs in proportion to its tokens at every load.
    ns = [0, 1, 4, 7]
    x = costs.overheads(Family.SEQUENTIAL, costs.ROOFLINE, np.array(ns), np.full(4, LOAD))
    assert list(x) == ns
    _, model = after_a_canary_at_7()
    f = model.log_cost_samples([0, 4], [LOAD], 1024)[:, 0, :]
    truth = math.log(linear_ms(4) / linear_ms(0))
    # Before: every measured machine says 4 costs at most twice 0; the truth (6x) is now plausible.
    assert float((f[:, 1] - f[:, 0] >= 0.9 * truth).mean()) > 0.1


def test_a_slow_canary_above_the_stable_makes_a_canary_below_it_worth_its_cost() -> None:
    assert max(range(8), key=goodput) == 0 and goodput(0) > 1.5 * goodput(4)
    records, model = after_a_canary_at_7()
    p = plan("draft_model", records, model, list(range(8)), 4, [LOAD] * 8, "throughput", 0.02, 0.25,
             exclude=[7])
    # Speculating less measures the cost side directly; it is the canary to run, not convergence at 4.
    assert p.next_canary is not None and p.next_canary <= 1
    assert p.value[0] > p.cost[0]
