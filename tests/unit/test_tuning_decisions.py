"""Planner, judge and schedule on clean, noise-free counters generated from a known truth."""

from __future__ import annotations

import numpy as np
import pytest

from specpilot.api.models import Tuning
from specpilot.tuning import costs
from specpilot.tuning.judge import health_problem, judge
from specpilot.tuning.observations import TrackWindow, WindowRecord, record
from specpilot.tuning.planner import plan
from specpilot.tuning import schedule
from specpilot.tuning.schedule import propose
from specpilot.tuning.step_model import StepModel
from specpilot_runtime.speculative import Family, SpeculativeConfig
from specpilot_runtime.vllm_metrics import Snapshot

# A chain drafter whose conditional acceptance rises with depth (0.8, 0.8, 0.85, 0.85, 0.9, ...).
CURVE = [0.8, 0.64, 0.544, 0.462, 0.416, 0.374, 0.337, 0.303]
FAMILY = Family.SEQUENTIAL


def snapshot(n: int, load: float, curve: list[float] = CURVE, pods: int = 3, window_s: float = 300.0,
             wobble: float = 1.0, slow: float = 1.0) -> TrackWindow:
    """Exact counters for a window at N and load, with the H200 prior's step time (kappa = 1)."""
    step_ms = costs.step_ms(FAMILY, n, load) * slow
    seqs = window_s * 1000 / step_ms * load * pods
    acc = [seqs * s * wobble ** (k + 1) for k, s in enumerate(curve[:n])]
    tokens = seqs + sum(acc)
    per_step = tokens / seqs
    finished = tokens / 256
    snap = Snapshot(drafts=seqs if n else 0.0, draft_tokens=seqs * n, accepted_tokens=sum(acc),
                    accepted_per_pos=tuple(acc), generation_tokens=tokens,
                    tpot_sum=finished * step_ms / 1000 / per_step, tpot_count=finished, running=load * pods)
    return TrackWindow(n=n, delta=snap, ready_pods=pods, desired_pods=pods)


def windows(n: int, load: float, count: int, start: int = 0, track: str = "stable",
            curve: list[float] = CURVE) -> list[WindowRecord]:
    # A small alternating wobble gives the batch-means error something to measure.
    return [record(start + i, track, snapshot(n, load, curve, wobble=1.0 + 0.004 * (-1) ** i), 300.0)
            for i in range(count)]


def true_goodput(n: int, load: float, curve: list[float] = CURVE) -> float:
    return (1 + sum(curve[:n])) * load / costs.step_ms(FAMILY, n, load)


def exact_pairs(model: StepModel, loads: list[float]) -> list:
    return [model.pair(c, 3, b, costs.step_ms(FAMILY, c, b), costs.step_ms(FAMILY, 3, b))
            for b in loads for c in (1, 5, 7) for _ in range(4)]


def test_window_record_recovers_tokens_per_step_step_time_and_load() -> None:
    r = record(1, "stable", snapshot(3, 16.0), 300.0)
    assert r.tokens_per_step == pytest.approx(1 + sum(CURVE[:3]))
    assert r.step_s == pytest.approx(costs.step_ms(FAMILY, 3, 16) / 1000)
    assert r.load == pytest.approx(16.0)


@pytest.mark.parametrize("load", [4.0, 64.0, 256.0])
def test_planner_picks_the_oracle_on_clean_data(load: float) -> None:
    model = StepModel(FAMILY)
    model = StepModel(FAMILY, exact_pairs(model, [load]))
    records = windows(8, load, 6)
    oracle = max(range(9), key=lambda n: true_goodput(n, load))
    p = plan("mtp", records, model, list(range(9)), 3, [load] * 6, "throughput", 0.02, 0.25)
    # Within the margin of the oracle (an unmeasured neighbour of it is a tie the model cannot split),
    # and the measured N's gains as they truly are.
    assert true_goodput(p.best_n, load) >= 0.98 * true_goodput(oracle, load)
    for n in (1, 5, 7):
        assert p.gain[n] == pytest.approx(true_goodput(n, load) / true_goodput(3, load) - 1, abs=0.01)


def test_planner_considers_speculation_off() -> None:
    weak = [0.15, 0.03, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0]
    model = StepModel(FAMILY)
    model = StepModel(FAMILY, exact_pairs(model, [256.0]))
    records = windows(3, 256.0, 6, curve=weak)
    p = plan("mtp", records, model, list(range(8)), 3, [256.0] * 6, "throughput", 0.02, 0.25)
    assert p.best_n == 0
    assert p.next_canary in (0, 1)


def test_planner_estimates_speculation_off_even_when_not_a_candidate() -> None:
    # The estimate feeds the "slower than no speculation" alert; N = 0 is still never tried or chosen.
    weak = [0.15, 0.03, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0]
    model = StepModel(FAMILY)
    model = StepModel(FAMILY, exact_pairs(model, [256.0]))
    p = plan("mtp", windows(3, 256.0, 6, curve=weak), model, [3, 5], 3, [256.0] * 6, "throughput", 0.02, 0.25)
    assert p.gain[0] > 0.05
    assert p.best_n == 3 and p.next_canary is None and 0 not in p.value


def test_planner_probes_high_when_only_low_n_is_known() -> None:
    # Stable at N=2 with strong acceptance: a canary at a high N reveals every N below it at once.
    p = plan("mtp", windows(2, 4.0, 4), StepModel(FAMILY), list(range(8)), 2, [4.0] * 4, "throughput",
             0.02, 0.25)
    assert p.next_canary is not None and p.next_canary >= 5
    assert p.value[7] >= p.value[4]


def test_planner_converges_when_nothing_is_worth_a_canary() -> None:
    model = StepModel(FAMILY)
    model = StepModel(FAMILY, exact_pairs(model, [16.0]))
    oracle = max(range(9), key=lambda n: true_goodput(n, 16.0))
    p = plan("mtp", windows(8, 16.0, 6), model, list(range(8)), oracle, [16.0] * 6, "throughput", 0.02, 0.25)
    assert p.next_canary is None


def test_planner_says_a_near_tie_and_spends_no_canary_on_it() -> None:
    # N=4 was canaried (counters and paired step times) and is truly ~1% better than 3: inside the margin.
    curve = [0.8, 0.64, 0.544, 0.26, 0.156, 0.078, 0.026, 0.013]
    model = StepModel(FAMILY)
    pairs = [model.pair(c, 3, 16.0, costs.step_ms(FAMILY, c, 16.0), costs.step_ms(FAMILY, 3, 16.0))
             for c in (4, 7) for _ in range(6)]
    gain4 = true_goodput(4, 16.0, curve) / true_goodput(3, 16.0, curve) - 1
    assert 0 < gain4 < 0.02
    p = plan("mtp", windows(7, 16.0, 6, curve=curve), StepModel(FAMILY, pairs), list(range(5)), 3,
             [16.0] * 6, "throughput", 0.02, 0.25, exclude=[4, 7])
    assert p.next_canary is None and p.near_tie == 4
    assert "inside the promotion margin" in p.tie_reason


def judge_case(n_stable: int, n_canary: int, load: float = 4.0, slow: float = 1.0, count: int = 6):
    stable = windows(n_stable, load, count)
    canary = [record(i, "canary", snapshot(n_canary, load, wobble=1.0 + 0.004 * (-1) ** i, slow=slow), 300.0)
              for i in range(count)]
    return judge(stable, canary, [load] * count, "throughput", 0.02, 0.95, 6)


def test_judge_promotes_a_better_canary() -> None:
    assert true_goodput(6, 4.0) > 1.05 * true_goodput(2, 4.0)
    v = judge_case(2, 6)
    assert v.decision == "promote"
    assert v.lower > 0 and v.gain > 0.02


def test_judge_refuses_a_worse_canary() -> None:
    assert true_goodput(1, 64.0) < 0.95 * true_goodput(3, 64.0)
    v = judge_case(3, 1, load=64.0)
    assert v.decision == "rollback"
    assert v.upper < 0.02


def test_judge_goes_by_the_measured_step_times_only() -> None:
    # Same acceptance gain, but the canary's steps are 40% slower than any prior predicts, which makes
    # it truly worse: the verdict is the measured goodput, whatever the step-time model would say.
    truth = true_goodput(6, 4.0) / 1.4 / true_goodput(2, 4.0) - 1
    assert truth < 0
    v = judge_case(2, 6, slow=1.4)
    assert v.decision == "rollback"
    assert v.gain == pytest.approx(truth, abs=0.01)


def test_judge_waits_for_four_paired_windows() -> None:
    assert judge_case(3, 5, count=3).decision == "continue"


def test_judge_keeps_analysing_a_promising_canary_past_its_windows() -> None:
    # Six windows of a measured +4% with noisy step times: not proven yet, and worth more windows.
    stable = windows(3, 4.0, 6)
    canary = [record(i, "canary", snapshot(3, 4.0, slow=1 / (1.04 * (1.0 + 0.06 * (-1) ** i))), 300.0)
              for i in range(6)]
    v = judge(stable, canary, [4.0] * 6, "throughput", 0.02, 0.95, 6)
    assert v.decision == "continue" and v.gain > 0.02 and v.lower < 0


def test_judge_weighs_loads_by_the_round_mix_not_by_the_windows_it_saw() -> None:
    # Half the windows at 256 sequences, which carry almost all the throughput: light-load windows alone
    # are no verdict, however many. N=1 loses to 3 at both loads (its pods 5% slower than the prior's at
    # 256): once two heavy windows show it, with the doubt of two windows, it is rolled back without waiting
    # for a third (a promotion would wait).
    loads = [4.0] * 6 + [256.0] * 6
    stable = windows(3, 4.0, 4) + windows(3, 256.0, 3, start=4)
    canary = [record(i, "canary", snapshot(1, 4.0) if i < 4 else snapshot(1, 256.0, slow=1.05), 300.0)
              for i in range(7)]
    v = judge(stable, canary[:4], loads, "throughput", 0.02, 0.95, 6)
    assert v.decision == "continue" and "waiting for loads" in v.reason
    v = judge(stable, canary[:6], loads, "throughput", 0.02, 0.95, 6)
    assert v.decision == "rollback" and v.upper < 0.02


def test_health_gate() -> None:
    ok = snapshot(3, 4.0)
    bad = TrackWindow(n=5, delta=ok.delta, ready_pods=1, desired_pods=1, errors=5)
    assert health_problem(ok, None, 2.0) == "canary pods disappeared"
    assert health_problem(ok, bad, 2.0) == "canary errors 5 above stable's"
    assert health_problem(ok, TrackWindow(n=5, delta=ok.delta, ready_pods=1, desired_pods=1), 2.0) is None


def test_health_gate_follows_the_spec_error_gate() -> None:
    # Stable restarts 2 per pod: at the default errorGate 2 a canary may reach 2 x 2 + 1 = 5 per pod.
    stable = TrackWindow(n=3, delta=snapshot(3, 4.0).delta, ready_pods=1, desired_pods=1, errors=2)
    canary = TrackWindow(n=5, delta=stable.delta, ready_pods=1, desired_pods=1, errors=5)
    assert health_problem(stable, canary, Tuning().error_gate) is None
    assert health_problem(stable, canary, 1.0) == "canary errors 5 above stable's"


def test_schedule_lowers_n_as_batch_size_rises() -> None:
    model = StepModel(FAMILY)
    model = StepModel(FAMILY, exact_pairs(model, [4.0, 256.0]))
    records = windows(8, 4.0, 4) + windows(8, 256.0, 4, start=4)
    loads = [4.0] * 4 + [256.0] * 4
    s = propose("mtp", records, model, list(range(9)), loads, "throughput")
    ns = [e[2] for e in s.entries]
    assert len(s.entries) == 2 and ns[0] > ns[1]
    assert s.entries[0][0] == 1 and s.entries[0][1] + 1 == s.entries[1][0]
    assert s.num_speculative_tokens == max(ns)
    per_level = {b: max(range(9), key=lambda n: true_goodput(n, b)) for b in (4.0, 256.0)}
    assert ns == [per_level[4.0], per_level[256.0]]
    assert s.gain > 0.0
    assert np.isfinite(s.gain)


def test_schedule_rows_from_close_noisy_levels_are_ones_vllm_accepts() -> None:
    # Loads as measured (Little's law per window) give close levels, 1.0, 1.1, 1.2, ..., some with no whole
    # batch size of their own; with the levels' N differing, rows once came out as [2, 1, 6] (lo > hi).
    levels = np.array([1.0, 1.1, 1.2, 1.6, 2.0, 2.3, 31.0, 33.0, 250.0])
    rows = [list(e) for e in schedule.level_entries(levels, [6, 6, 5, 5, 4, 4, 3, 2, 1])]
    config = SpeculativeConfig(method="mtp", num_speculative_tokens=6,
                               num_speculative_tokens_per_batch_size=[tuple(r) for r in rows])
    assert config.problems() == [], rows
    assert all(lo <= hi for lo, hi, _ in rows) and rows[0][0] == 1 and rows[-1][1] == schedule.MAX_BATCH_SIZE


def test_schedule_n_never_rises_with_load() -> None:
    # Per level (rows, rising load) the value of N = 0..3: noise makes level 1 prefer 1 over its neighbours' 3.
    value = np.array([[0.0, 1.0, 2.0, 5.0],
                      [0.0, 3.1, 2.0, 3.0],
                      [0.0, 1.0, 2.0, 4.0],
                      [2.0, 1.0, 0.5, 0.0]])
    assert [int(value[i].argmax()) for i in range(4)] == [3, 1, 3, 0]  # what a per-level choice gave
    assert schedule._falling(value) == [3, 3, 3, 0]  # the best sequence that never rises: 5 + 3 + 4 + 2


def test_latency_objective_weighs_loads_alike() -> None:
    # Throughput weighs a load by its B, so the heavy load (where small N wins) dominates; per-request
    # latency weighs both alike, so its best N is at least as large.
    model = StepModel(FAMILY)
    model = StepModel(FAMILY, exact_pairs(model, [4.0, 256.0]))
    records = windows(8, 4.0, 4) + windows(8, 256.0, 4, start=4)
    loads = [4.0] * 4 + [256.0] * 4
    best = {obj: plan("mtp", records, model, list(range(9)), 3, loads, obj, 0.02, 0.25).best_n
            for obj in ("throughput", "latency")}
    assert best["latency"] > best["throughput"]


def test_a_parallel_drafter_s_schedule_is_valued_on_its_started_n_s_curve() -> None:
    # DFlash measured at N=4 and N=8: the block of 8 accepts more in all (E[L] 5.1 against 4.0) but less at
    # each of the first 4 positions. vLLM started at 8 drafts 8 and keeps the first K, so K=4 at a heavy load
    # accepts 3.6 tokens a step, not the 4.0 of a track started at 4. On the throughput the heavy load
    # carries, the best is then 4 at every load; valued on K's own curve, 8 at the light load and 4 at the
    # heavy one looked a free gain.
    family, c4, c8 = Family.PARALLEL, [0.9, 0.8, 0.7, 0.6], [0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3]

    def track(n: int, load: float, curve: list[float], seq: int) -> WindowRecord:
        step_ms = costs.step_ms(family, n, load)
        seqs = 300_000 / step_ms * load * 3
        acc = [seqs * s * (1.0 + 0.004 * (-1) ** seq) for s in curve[:n]]
        finished = (seqs + sum(acc)) / 256
        tokens = seqs + sum(acc)
        snap = Snapshot(drafts=seqs, draft_tokens=seqs * n, accepted_tokens=sum(acc), accepted_per_pos=tuple(acc),
                        generation_tokens=tokens, tpot_sum=finished * step_ms / 1000 * seqs / tokens,
                        tpot_count=finished, running=load * 3)
        return record(seq, "stable" if n == 4 else "canary", TrackWindow(n, snap, 3, 3), 300.0)

    loads = [4.0] * 6 + [256.0] * 6
    records = [track(4, b, c4, i) for i, b in enumerate(loads)] + [track(8, b, c8, i) for i, b in enumerate(loads)]
    model = StepModel(family)
    model = StepModel(family, [model.pair(8, 4, b, costs.step_ms(family, 8, b), costs.step_ms(family, 4, b))
                               for b in loads])
    def goodput(n: int, k: int, load: float, curve: list[float]) -> float:
        return (1 + sum(curve[:k])) * load / costs.step_ms(family, k, load)

    assert goodput(8, 8, 4.0, c8) > 1.05 * goodput(4, 4, 4.0, c4)  # the light load wants the longer block
    assert goodput(8, 4, 256.0, c8) < 0.95 * goodput(4, 4, 256.0, c4)  # 8 truncated to 4 costs at the heavy one
    s = propose("dflash", records, model, [0, 4, 8], loads, "throughput", stable_n=4)
    assert (s.num_speculative_tokens, s.rows, s.best_single_n) == (4, [[1, 4096, 4]], 4), s
    assert s.gain == pytest.approx(0.0, abs=1e-9) and s.stable_gain == pytest.approx(0.0, abs=1e-9)
