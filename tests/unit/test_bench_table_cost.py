"""The tuner bench's simulated deployment pays a batch-size table's cost (`Profile.table_cost`) where its pods
carry one: under switchback the stable's pods and its canaries, until the tuner's table check falls back to
static pods; a static canary (no table) is pods of its own, a restart; under measure=canary nothing pays it.
Regret stays measured against the best static configuration, so a run that keeps a costly table shows it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specpilot.tuning import Action, ActionKind
from specpilot_harness.bench import report
from specpilot_harness.bench.simulate import Deployment, Fleet
from specpilot_harness.bench.strategies import Run, run_default
from specpilot_harness.sim.profile import Profile, load_profiles

TINY = {"name": "tiny-mtp", "method": "mtp", "max_n": 3, "survival": [0.8, 0.6, 0.4],
        "step_time_ms": {"4": [5.6, 6.3, 6.8, 7.3], "64": [7.7, 9.0, 10.8, 12.3]},
        "concurrency": {"4": 0.5, "64": 0.5}, "noise": 0.0}
COST = 0.2


def tiny(table_cost: float = COST, **changes: object) -> Profile:
    return load_profiles(json.dumps({"profiles": [{**TINY, "table_cost": table_cost, **changes}]}))["tiny-mtp"]


def switchback(p: Profile, stable_n: int = 1, started_n: int = 3) -> Deployment:
    return Deployment(p, np.random.default_rng(4), stable_n=stable_n, measure="switchback", started_n=started_n)


def test_switchback_pods_pay_the_tables_cost_in_their_step_time() -> None:
    costly, free = switchback(tiny()), switchback(tiny(0.0))
    tokens = []
    for dep in (costly, free):
        obs = dep.window()
        tokens.append(obs.stable.delta.generation_tokens)
    c, f = costly.costs[-1], free.costs[-1]
    assert c.load == f.load
    assert c.stable == pytest.approx(f.stable / (1 + COST))
    assert f.stable == pytest.approx(tiny().goodput_at(1, f.load))  # a free table serves as a static pod
    assert tokens[0] == pytest.approx(tokens[1] / (1 + COST), rel=0.02)  # what the scrapes show, too
    # A live arm canary: both arms in the same (table-carrying) pods pay it alike.
    costly.start_canary(3)
    costly.window()
    w = costly.costs[-1]
    assert costly.restarts == 0 and w.canary == pytest.approx(tiny().goodput_at(3, w.load) / (1 + COST))


def test_a_static_canary_is_a_restart_without_the_table_and_promoted_ends_the_table() -> None:
    p = tiny()
    dep = switchback(p)
    dep.apply(Action(ActionKind.START_CANARY, 1, "table check", static=True))
    assert dep.restarts == 1 and not dep.canary_live and not dep.canary_table and dep.stable_table
    first = dep.window()
    assert not first.switchback and first.canary is not None  # pods of its own, not an arm
    w = dep.costs[-1]
    split = w.load * dep.stable_pods / (dep.stable_pods + dep.canary_pods)
    # It served only once restarted, and without the table.
    assert w.canary == pytest.approx(p.goodput_at(1, split) * (1 - dep.restart_s / dep.window_s))
    dep.window()
    w = dep.costs[-1]
    split = w.load * dep.stable_pods / (dep.stable_pods + dep.canary_pods)
    assert w.canary == pytest.approx(p.goodput_at(1, split))  # static pods: no table
    assert w.stable == pytest.approx(p.goodput_at(1, split) / (1 + COST))  # the switching pods: the table
    dep.apply(Action(ActionKind.PROMOTE, 1, "table check", static=True))
    assert dep.restarts == 2 and dep.stable_static and not dep.stable_live and not dep.stable_table
    dep.window()
    w = dep.costs[-1]
    assert w.stable == pytest.approx(p.goodput_at(1, w.load))
    # After the fall-back every canary is static pods: a restart, no live arm, no table.
    dep.apply(Action(ActionKind.START_CANARY, 2, "explore"))
    assert dep.restarts == 3 and dep.canary_static and not dep.canary_live and not dep.canary_table
    dep.apply(Action(ActionKind.PROMOTE, 2, "better"))
    assert dep.restarts == 4 and dep.stable_static and not dep.stable_table


def test_a_rolled_back_table_check_keeps_the_table() -> None:
    dep = switchback(tiny())
    dep.apply(Action(ActionKind.START_CANARY, 1, "table check", static=True))
    dep.window()
    dep.apply(Action(ActionKind.ROLLBACK, 1, "not proven"))
    assert dep.stable_live and dep.stable_table and not dep.stable_static and not dep.canary_static
    dep.apply(Action(ActionKind.START_CANARY, 2, "explore"))
    assert dep.canary_live and dep.restarts == 1  # live arms again: only the static canary restarted


def test_a_switchback_canary_of_its_own_pods_carries_the_table() -> None:
    """A canary above the started N restarts pods, which the operator renders with a table under switchback."""
    p = tiny()
    dep = switchback(p, started_n=2)
    dep.start_canary(3)
    assert dep.restarts == 1 and not dep.canary_live and dep.canary_table
    dep.window()
    dep.window()
    w = dep.costs[-1]
    split = w.load * dep.stable_pods / (dep.stable_pods + dep.canary_pods)
    assert w.canary == pytest.approx(p.goodput_at(3, split) / (1 + COST))


def test_under_measure_canary_nothing_pays_the_table() -> None:
    p = tiny()
    dep = Deployment(p, np.random.default_rng(4), stable_n=1, measure="canary")
    dep.start_canary(2)
    dep.window()
    dep.window()
    w = dep.costs[-1]
    split = w.load * dep.stable_pods / (dep.stable_pods + dep.canary_pods)
    assert not dep.stable_table and not dep.canary_table
    assert (w.stable, w.canary) == pytest.approx((p.goodput_at(1, split), p.goodput_at(2, split)))


def test_a_parallel_drafters_switchback_pods_carry_no_table() -> None:
    dep = switchback(tiny(method="dflash"))
    dep.window()
    assert not dep.stable_table and dep.costs[-1].stable == pytest.approx(tiny().goodput_at(1, dep.costs[-1].load))


def test_regret_is_against_the_best_static_configuration_so_a_kept_table_shows() -> None:
    p = tiny()
    best = p.oracle_n()
    kept = report.row(p, 0, Run(best, table=True))
    static = report.row(p, 0, Run(best, table=False))
    assert kept["oracle_n"] == static["oracle_n"] == best
    assert static["regret_pct"] == 0.0
    assert kept["regret_pct"] == pytest.approx(100 * (1 - 1 / (1 + COST)), abs=1e-3)
    # The default baseline under switchback keeps its table; under measure=canary it has none.
    assert run_default(p, 0, fleet=Fleet(measure="switchback")).table is True
    assert run_default(p, 0, fleet=Fleet(measure="canary")).table is False
    # A free table costs nothing: every profile without table_cost scores as before.
    assert report.row(tiny(0.0), 0, Run(best, table=True))["regret_pct"] == 0.0


def test_table_cost_profiles_are_what_the_builder_makes() -> None:
    from specpilot_harness.bench.table_cost import BASES, COSTS, build

    path = Path(report.__file__).parent / "profiles" / "table-cost.json"
    built = build()
    assert json.loads(path.read_text()) == {"profiles": [json.loads(p.model_dump_json(exclude_defaults=True))
                                                         for p in built]}
    assert len(built) == len(BASES) * len(COSTS) and {p.table_cost for p in built} == set(COSTS)
    assert len({p.method for p in built}) >= 4
    by_name = {p.name: p for p in built}
    for base in BASES:
        copies = [by_name[f"{base}-table{c:g}"] for c in COSTS]
        # Only the table's cost differs: the oracle (the best static N) is the base's at every cost.
        assert len({(p.oracle_n(), p.goodput(p.oracle_n())) for p in copies}) == 1
        assert [p.family for p in copies] == [f"table-{c:g}" for c in COSTS]
