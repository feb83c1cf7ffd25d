"""`specpilot bench tuner` in schedule mode: a track serving a batch-size schedule drafts K by load and
counts as vLLM 0.33 does; the per-load oracle; the tuner's schedule actions applied; result rows; the
mixed-load profile files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from specpilot.tuning import Action, ActionKind
from specpilot_harness.bench import cli, strategies
from specpilot_harness.bench.report import per_load_oracle, row, served_goodput
from specpilot_harness.bench.simulate import STABLE_PODS, Deployment, Fleet
from specpilot_harness.bench.strategies import Run
from specpilot_harness.sim.profile import Profile, load_profiles

# Best K is 3 at one sequence per pod and 1 at 64 (worked out by hand in test_per_load_oracle_by_hand).
HAND = {
    "name": "hand-mtp",
    "method": "mtp",
    "max_n": 3,
    "survival": [0.8, 0.6, 0.4],
    "step_time_ms": {"1": [10.0, 10.5, 11.0, 11.5], "64": [20.0, 30.0, 45.0, 70.0]},
    "concurrency": {"1": 0.5, "64": 0.5},
    "noise": 0.0,
}
SCHEDULE = [[1, 8, 3], [9, 4096, 1]]  # K = 3 up to 8 sequences per pod, 1 above


def profile(**changes) -> Profile:
    (p,) = load_profiles(json.dumps({"profiles": [{**HAND, **changes}]})).values()
    return p


def at_load(load: int, **changes) -> Profile:
    return profile(concurrency={str(load): 1.0}, **changes)


@pytest.mark.parametrize("load, k", [(1, 3), (64, 1)])
def test_a_scheduled_track_drafts_k_by_load_and_counts_as_vllm(load: int, k: int) -> None:
    p = at_load(load)
    dep = Deployment(p, np.random.default_rng(0), stable_n=3, stable_schedule=SCHEDULE)
    ks, lengths = [], []
    for _ in range(20):
        d = dep.window().stable.delta
        assert d.drafts > 0
        assert d.draft_tokens == d.drafts * 3  # vLLM truncates centrally: all N positions count as drafted
        assert len(d.accepted_per_pos) == 3 and all(a == 0 for a in d.accepted_per_pos[k:])
        assert all(a > 0 for a in d.accepted_per_pos[:k])
        assert d.drafted_per_pos == (d.drafts,) * k + (0.0,) * (3 - k)  # specpilot's plugin counter
        assert d.accepted_tokens == pytest.approx(sum(d.accepted_per_pos))
        # Step time from the counters, as the tuner derives it: TPOT = step time / tokens per step.
        per_step = d.generation_tokens / d.drafts
        assert d.tpot_sum / d.tpot_count * per_step * 1000 == pytest.approx(p.step_time_ms[load][k])
        lengths.append(per_step)
        ks.append(dep.costs[-1].stable_k)
        assert dep.costs[-1].stable == pytest.approx(p.goodput_at(k, load))  # noise-free goodput at K
    assert set(ks) == {k}
    assert np.mean(lengths) == pytest.approx(p.expected_length(k), rel=0.02)


def test_k_zero_drafts_nothing_that_window() -> None:
    p = at_load(64)
    dep = Deployment(p, np.random.default_rng(0), stable_n=3, stable_schedule=[[1, 8, 3], [9, 4096, 0]])
    d = dep.window().stable.delta
    assert d.drafts == 0 and d.draft_tokens == 0 and d.accepted_tokens == 0
    assert d.accepted_per_pos == (0.0, 0.0, 0.0) and d.drafted_per_pos == (0.0, 0.0, 0.0)
    assert d.generation_tokens > 0
    assert d.tpot_sum / d.tpot_count * 1000 == pytest.approx(p.step_time_ms[64][0])
    assert dep.costs[-1].stable == pytest.approx(p.goodput_at(0, 64))


def test_the_load_level_picks_k_within_one_run() -> None:
    p = profile()
    dep = Deployment(p, np.random.default_rng(3), stable_n=3, stable_schedule=SCHEDULE)
    for _ in range(30):
        d = dep.window().stable.delta
        c = dep.costs[-1]
        assert c.stable_k == (3 if c.load == 1 else 1)
        assert sum(x > 0 for x in d.drafted_per_pos) == c.stable_k
    assert {c.load for c in dep.costs} == {1, 64}


def test_canary_and_promotion_carry_the_schedule() -> None:
    p = at_load(64)
    dep = Deployment(p, np.random.default_rng(0), stable_n=2, restart_s=0.0)
    dep.start_canary(3, SCHEDULE)
    obs = dep.window()
    assert obs.canary is not None and obs.canary.n == 3
    assert obs.canary.delta.drafted_per_pos == (obs.canary.delta.drafts, 0.0, 0.0)  # K = 1 at 64
    assert obs.stable.delta.drafted_per_pos is None  # a plain-N track: as before schedules existed
    assert dep.costs[-1].canary_k == 1 and dep.costs[-1].stable_k == 2
    dep.promote(3, SCHEDULE)
    assert (dep.stable_n, dep.stable_schedule, dep.canary_n, dep.canary_schedule) == (3, SCHEDULE, None, None)
    assert dep.window().stable.delta.drafted_per_pos[1:] == (0.0, 0.0)
    dep.start_canary(2, [[1, 4096, 2]])
    dep.remove_canary()
    assert dep.canary_schedule is None
    dep.promote(2)  # a plain-N promotion drops the schedule
    assert dep.stable_schedule is None and dep.window().stable.delta.drafted_per_pos is None


def test_a_schedule_at_n_everywhere_draws_the_same_as_no_schedule() -> None:
    p = profile(noise=0.1)
    plain = Deployment(p, np.random.default_rng(5), stable_n=3)
    sched = Deployment(p, np.random.default_rng(5), stable_n=3, stable_schedule=[[1, 4096, 3]])
    for _ in range(10):
        a, b = plain.window().stable.delta, sched.window().stable.delta
        assert a.drafted_per_pos is None and b.drafted_per_pos == (b.drafts,) * 3
        assert (a.drafts, a.accepted_per_pos, a.tpot_sum, a.generation_tokens) == \
            (b.drafts, b.accepted_per_pos, b.tpot_sum, b.generation_tokens)


def test_without_a_schedule_the_draws_are_those_from_before_schedules() -> None:
    # Golden numbers from the simulator before schedules were added (commit 74fcc59): existing bench
    # numbers must not move. Since a canary takes its share of the traffic (a Service's split), the windows
    # it serves in carry 3/4 of the sequences per pod at 4 (this step-time table's flat lowest level); the
    # random draws are the same ones.
    p = profile(**{"step_time_ms": {"4": [5.6, 6.3, 6.8, 7.3], "64": [7.7, 9.0, 10.8, 12.3]},
                   "concurrency": {"4": 0.5, "64": 0.5}, "noise": 0.1})
    dep = Deployment(p, np.random.default_rng(7), stable_n=3, restart_s=0.0)
    seen = []
    for i in range(6):
        if i == 1:
            dep.start_canary(2)
        if i == 4:
            dep.promote(1)
        o = dep.window()
        seen += [(t.n, t.delta.drafts, t.delta.accepted_per_pos) for t in (o.stable, o.canary) if t]
    assert seen[:3] == [(3, 4994171.0, (4020204.0, 3034761.0, 2035079.0)),
                        (3, 359478.0, (282368.0, 207808.0, 135622.0)), (2, 131773.0, (103405.0, 76067.0))]
    assert seen[-2:] == [(1, 6672587.0, (5289031.0,)), (1, 666511.0, (545890.0,))]
    assert float(dep.rng.standard_normal()) == pytest.approx(-0.46316986495236695, abs=0)


def test_per_load_oracle_by_hand() -> None:
    p = profile()
    lengths = [1.0, 1.8, 2.4, 2.8]

    def g(k: int, b: int) -> float:
        return b * lengths[k] / HAND["step_time_ms"][str(b)][k]

    single = [0.5 * g(n, 1) + 0.5 * g(n, 64) for n in range(4)]
    assert p.oracle_n() == 1 and p.goodput(1) == pytest.approx(single[1])
    ks, oracle = per_load_oracle(p)
    assert ks == {1: 3, 64: 1}
    assert oracle == pytest.approx(0.5 * g(3, 1) + 0.5 * g(1, 64))
    assert oracle / single[1] - 1 == pytest.approx(0.01796, abs=1e-4)
    # Served goodput under a schedule is K by load; the schedule that is the oracle reaches it.
    assert served_goodput(p, 3, SCHEDULE) == pytest.approx(oracle)
    assert served_goodput(p, 3, [[1, 8, 2], [9, 4096, 0]]) == pytest.approx(0.5 * g(2, 1) + 0.5 * g(0, 64))
    assert served_goodput(p, 2, SCHEDULE) == pytest.approx(0.5 * g(2, 1) + 0.5 * g(1, 64))  # K <= started N
    assert served_goodput(p, 2) == pytest.approx(single[2])


# A parallel drafter whose longer block accepts less at its first positions (0.75 against 0.8).
PARALLEL = {**HAND, "name": "hand-dflash", "method": "dflash",
            "survival_by_n": {"1": [0.8], "2": [0.8, 0.6], "3": [0.75, 0.6, 0.5]}}


def test_a_parallel_drafter_under_a_schedule_accepts_as_the_started_n_block() -> None:
    # vLLM drafts the N=3 block and truncates it to K=1: the first position of the N=3 curve (0.75), not
    # the N=1 curve (0.8); goodput and the oracle follow.
    p = profile(**{k: v for k, v in PARALLEL.items() if k != "concurrency"}, concurrency={"64": 1.0})
    dep = Deployment(p, np.random.default_rng(0), stable_n=3, stable_schedule=SCHEDULE)
    rates = []
    for _ in range(10):
        d = dep.window().stable.delta
        rates.append(d.accepted_per_pos[0] / d.drafts)
        assert dep.costs[-1].stable == pytest.approx(64 * 1.75 / 30.0)
    assert np.mean(rates) == pytest.approx(0.75, abs=0.01)
    assert served_goodput(p, 3, SCHEDULE) == pytest.approx(64 * 1.75 / 30.0)
    assert served_goodput(p, 1) == pytest.approx(64 * 1.8 / 30.0)


def test_the_per_load_oracle_of_a_parallel_drafter_runs_under_one_started_n() -> None:
    p = profile(**{k: v for k, v in PARALLEL.items()})
    lengths = {1: [1.0, 1.8], 2: [1.0, 1.8, 2.4], 3: [1.0, 1.75, 2.35, 2.85]}

    def g(n: int, k: int, b: int) -> float:
        return b * lengths[n][k] / HAND["step_time_ms"][str(b)][k]

    # Each level on its own curve: K=3 at light load (2.85 / 11.5), K=1 at heavy load (N=1's 1.8 / 30);
    # but started at 3 the heavy load gets K=1 of the N=3 block (1.75 / 30). Started at 2: 2.4 / 11 and
    # 1.8 / 30, the best schedule vLLM can serve.
    assert max(range(1, 4), key=lambda n: g(n, n, 1)) == 3
    by_n = {n: sum(0.5 * max(g(n, k, b) for k in range(n + 1)) for b in (1, 64)) for n in (1, 2, 3)}
    assert max(by_n, key=by_n.get) == 2
    ks, oracle = per_load_oracle(p)
    assert ks == {1: 2, 64: 1} and oracle == pytest.approx(by_n[2])
    r = row(p, 0, Run(2, schedule=[[1, 8, 2], [9, 4096, 1]]))
    assert r["oracle_started_n"] == 2 and r["oracle_gain_share"] == pytest.approx(1.0)
    # Each level's best K on its own curve, [1-8:3, 9+:1], started at 3: below the best single N (1).
    assert p.oracle_n() == 1
    assert row(p, 0, Run(3, schedule=SCHEDULE))["oracle_gain_share"] < 0


def test_rows_carry_chosen_n_schedule_and_the_oracle_shares() -> None:
    p = profile()
    ks, oracle = per_load_oracle(p)
    single = p.goodput(1)
    r = row(p, 0, Run(3, [1, 3], 0.01, [(3, 1), (1, 3)], SCHEDULE, promotion_schedules=[None, SCHEDULE]))
    assert r["chosen_n"] == 3 and r["schedule"] == SCHEDULE
    assert r["oracle_n"] == 1 and r["oracle_k_by_load"] == {"1": 3, "64": 1}
    assert r["regret_pct"] == 0.0
    assert r["vs_single_pct"] == pytest.approx(100 * (oracle / single - 1), abs=1e-3)
    assert r["oracle_gain_pct"] == r["vs_single_pct"]
    assert r["oracle_gain_share"] == pytest.approx(1.0)
    assert r["promotions"] == [{"from": 3, "to": 1, "schedule": None}, {"from": 1, "to": 3, "schedule": SCHEDULE}]
    # The promotion to the schedule is scored as served (a gain), not as plain N=3 (a loss of 30%); the
    # first promotion, 3 -> 1, gained 43%.
    assert p.goodput(3) / p.goodput(1) - 1 < -0.3 and p.goodput(1) / p.goodput(3) - 1 > 0.4
    assert r["worst_promotion_pct"] == pytest.approx(r["oracle_gain_pct"], abs=1e-3)
    plain = row(p, 0, Run(1))
    assert plain["schedule"] is None and plain["oracle_gain_share"] == 0.0 and plain["vs_single_pct"] == 0.0
    worse = row(p, 0, Run(3))
    assert worse["regret_pct"] > 0 and worse["oracle_gain_share"] < 0
    # A half-way schedule reaches part of the oracle's gain.
    half = row(p, 0, Run(2, schedule=[[1, 8, 2], [9, 4096, 1]]))
    expected = (served_goodput(p, 2, [[1, 8, 2], [9, 4096, 1]]) - single) / (oracle - single)
    assert 0 < half["oracle_gain_share"] < 1 and half["oracle_gain_share"] == pytest.approx(expected, abs=1e-4)
    # One load level: no per-load gain, no share.
    assert row(at_load(64), 0, Run(1))["oracle_gain_share"] is None


def scripted_step(seen: list):
    """A stand-in for the tuner: a schedule canary at window 3, promoted with its schedule at window 6."""
    calls = {"i": 0}

    def step(state, tuning, obs, now):
        seen.append(obs)
        calls["i"] += 1
        if calls["i"] == 3:
            return state, Action(ActionKind.START_CANARY, 3, "schedule canary", SCHEDULE)
        if calls["i"] == 6:
            return state, Action(ActionKind.PROMOTE, 3, "schedule proven", SCHEDULE)
        return state, Action(ActionKind.HOLD, state.stable_n, "")

    return step


def test_run_tuner_applies_the_schedule_of_start_canary_and_promote(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list = []
    monkeypatch.setattr(strategies, "step", scripted_step(seen))
    p = profile(noise=0.1)
    run = strategies.run_tuner(p, 0)
    assert run.chosen_n == 3 and run.schedule == SCHEDULE and run.tried == [3] and run.schedule_canaries == 1
    assert run.promotions == [(p.default_n, 3)] and run.promotion_schedules == [SCHEDULE]
    ready = [o.canary for o in seen[3:6] if o.canary is not None and o.canary.ready_pods > 0]
    assert ready and all(c.delta.drafted_per_pos is not None for c in ready)
    # After the promotion the stable track serves the schedule: K = 3 or 1, never 2.
    for o in seen[7:]:
        drafted = o.stable.delta.drafted_per_pos
        assert drafted is not None and sum(x > 0 for x in drafted) in (1, 3)


def test_cli_json_rows_carry_chosen_n_and_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strategies, "step", scripted_step([]))
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"profiles": [{**HAND, "noise": 0.1}]}))
    out = tmp_path / "out.json"
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "tuner", "--profiles", str(profiles), "--seeds", "1", "--json", str(out),
                              "--markdown", str(tmp_path / "t.md")])
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    (r,) = doc["results"]
    assert r["chosen_n"] == 3 and r["schedule"] == SCHEDULE and r["oracle_gain_share"] == pytest.approx(1.0)
    assert r["schedule_canaries"] == 1 and r["tried"] == [3]
    assert all(b["schedule"] is None for rows in doc["baselines"].values() for b in rows)
    mixed = doc["mixed"]
    assert mixed["targets"] == {"mean_oracle_gain_share": 0.95, "worst_vs_single_pct": -0.5}
    assert mixed["tuner"]["runs_serving_schedule"] == 1 and mixed["tuner"]["mean_oracle_gain_share"] == 1.0
    assert "3 [1-8:3 9+:1]" in (tmp_path / "t.md").read_text()


@pytest.mark.parametrize("split, name", [("mixed", "mixed-load.json"), ("mixed-holdout", "mixed-load-holdout.json"),
                                         ("mixed-holdout2", "mixed-load-holdout2.json"),
                                         ("mixed-holdout3", "mixed-load-holdout3.json")])
def test_mixed_load_profiles_are_what_the_generator_builds(split: str, name: str) -> None:
    from specpilot_harness.bench.generate import MIXED_SPLITS, PARALLEL_METHODS, build

    doc = json.loads((Path(cli.__file__).parent / "profiles" / name).read_text())
    assert doc == json.loads(json.dumps(build(split)))
    profiles = list(load_profiles(json.dumps(doc)).values())
    assert len(profiles) >= 6
    assert {p.method in PARALLEL_METHODS for p in profiles} == {True, False}  # chain and parallel drafters
    for p in profiles:
        loads = sorted(p.concurrency)
        assert len(loads) >= 3 and loads[0] <= 4 and loads[-1] >= 64
        assert min(p.concurrency.values()) >= 0.095  # every level seen in a round's windows
        ks, oracle = per_load_oracle(p)
        assert ks[loads[0]] > ks[loads[-1]]  # the best N falls as load rises
        assert oracle / p.goodput(p.oracle_n()) - 1 >= 0.02
    seeds = [s for split in MIXED_SPLITS.values() for s in split]
    assert len(seeds) == len(set(seeds))  # no profile in two splits


def test_windows_sets_the_run_length_for_every_strategy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Deployment] = []
    orig = strategies._deployment

    def spy(prof: Profile, seed: int, windows: int = strategies.MAX_WINDOWS, fleet: Fleet = Fleet()) -> Deployment:
        made.append(orig(prof, seed, windows, fleet))
        return made[-1]

    monkeypatch.setattr(strategies, "_deployment", spy)
    for fn in (*strategies.BASELINES.values(), strategies.run_tuner):
        fn(profile(noise=0.1), 0, 60)
    assert [len(d.costs) for d in made] == [60] * 4
    assert all(d.stable_pods == STABLE_PODS for d in made)
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"profiles": [HAND]}))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))

    def bench(*extra: str) -> int:
        args = parser.parse_args(["bench", "tuner", "--profiles", str(profiles), "--seeds", "1", *extra])
        return args.func(args)

    # --stable-replicas reaches every strategy's deployment.
    made.clear()
    assert bench("--stable-replicas", "2") == 0
    assert len(made) == 4 and all(d.stable_pods == 2 for d in made)
    assert bench("--windows", "4") == 2
