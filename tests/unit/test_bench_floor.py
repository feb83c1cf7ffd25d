"""`specpilot bench tuner --floor`: the tuner's machine and judge with a planner told the answer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specpilot.tuning import machine, schedule
from specpilot_harness.bench import cli, floor, strategies
from specpilot_harness.bench.report import served_goodput
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(__file__).parents[2] / "harness" / "specpilot_harness" / "bench" / "profiles"


def shipped(file: str, name: str):
    return load_profiles((PROFILES / file).read_text())[name]


def test_the_floor_canaries_the_best_n_first_and_the_judge_decides() -> None:
    p = shipped("article.json", "qwen35-27b-mtp-gsm8k")  # best 5; the tuner's first canary is 7
    assert p.oracle_n() != p.default_n
    run = floor.run_floor(p, seed=0)
    assert run.tried == [p.oracle_n()]  # the floor's rule: the best N, and no other
    # The judge decides: no promotion worse than the issue's -0.5%, and the run within its 3% max regret
    # (the default is 4.5% short of the best N here, so the judge proved it).
    assert all(p.goodput(new) >= 0.995 * p.goodput(old) for old, new in run.promotions), run
    assert p.goodput(run.chosen_n) >= 0.97 * p.goodput(p.oracle_n()), run


def test_the_floor_spends_no_canary_where_the_default_is_best() -> None:
    p = shipped("article.json", "qwen35-27b-mtp-mtbench")
    assert p.oracle_n() == p.default_n
    run = floor.run_floor(p, seed=0)
    assert run.tried == [] and run.chosen_n == p.default_n


def test_the_floor_leaves_the_tuners_planner_in_place() -> None:
    p = shipped("article.json", "qwen35-27b-mtp-gsm8k")
    before = strategies.run_tuner(p, seed=1)
    floor.run_floor(p, seed=1)
    assert machine._plan.__module__ == "specpilot.tuning.machine" and machine.propose is schedule.propose
    after = strategies.run_tuner(p, seed=1)
    assert (after.tried, after.chosen_n, after.promotions) == (before.tried, before.chosen_n, before.promotions)


def test_in_schedule_mode_the_floor_canaries_the_per_load_oracle_first() -> None:
    p = shipped("mixed-load.json", "mix-dense-dspark-2009")
    started, rows = floor.oracle_schedule(p)
    assert len(rows) >= 2 and rows[0][:2] == [1, rows[0][1]] and rows[-1][1] == schedule.MAX_BATCH_SIZE
    run = floor.run_floor(p, seed=0, mode="schedule")
    assert run.tried[0] == started and run.schedule_canaries >= 1
    # Served as vLLM serves it, the oracle's rows are worth the per-load oracle's gain over the best single N.
    assert served_goodput(p, started, rows) > served_goodput(p, p.oracle_n()) * 1.02
    # The judge decides: the run serves no less than 0.5% below the best single N (the schedule
    # target), and no promotion lost more than 0.5%.
    assert served_goodput(p, run.chosen_n, run.schedule) >= 0.995 * p.goodput(p.oracle_n()), run
    assert all(served_goodput(p, *new) >= 0.995 * served_goodput(p, *old) for old, new in run.promotion_configs())


def test_cli_floor_reports_beside_the_baselines(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.json"
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "tuner", "--profiles", str(PROFILES / "mixed-load.json"), "--seeds", "1",
                              "--mode", "schedule", "--floor", "--json", str(out)])
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert set(doc["baselines"]) == {"sweep", "default", "hill-climb", "floor"}
    assert len(doc["baselines"]["floor"]) == len(doc["results"])
    assert "floor" in doc["summary"] and "floor" in doc["mixed"]
    printed = capsys.readouterr().out
    assert "floor: mean regret" in printed and "floor: share mean" in printed
    args = parser.parse_args(["bench", "tuner", "--profiles", str(PROFILES / "article.json"), "--seeds", "1",
                              "--json", str(out)])
    assert args.func(args) == 0
    assert "floor" not in json.loads(out.read_text())["baselines"]
