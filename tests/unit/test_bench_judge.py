"""`specpilot bench judge`: the judge's verdicts by the canary's true gain, and its command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from specpilot_harness.bench import cli
from specpilot_harness.bench.judge_bench import operating_characteristic


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "judge", *argv])
    return args.func(args)


def test_a_clearly_worse_canary_is_never_promoted_and_a_clearly_better_one_almost_always() -> None:
    worse, even, better = operating_characteristic([-0.05, 0.0, 0.08], trials=150, noise=0.1, windows=6,
                                                   margin=0.02, confidence=0.95)
    for p in (worse, even, better):
        assert p.promoted + p.rolled_back + p.inconclusive == p.trials == 150
    assert worse.promoted == 0
    # A canary no better than the stable: promoted at most as often as the confidence allows (5%, with
    # room for 150 trials' own spread).
    assert even.promoted / even.trials <= 0.1
    assert better.promoted / better.trials >= 0.9
    # A clearly worse canary is told early; one whose gain is near zero takes the extended windows.
    assert worse.mean_windows < even.mean_windows
    # The planner's model of the judge agrees with it where the answer is clear.
    assert worse.expected < 0.01 and better.expected > 0.9


def test_less_noise_buys_power() -> None:
    noisy, quiet = (operating_characteristic([0.03], trials=150, noise=n, windows=6, margin=0.02,
                                             confidence=0.95)[0] for n in (0.15, 0.03))
    assert quiet.promoted > noisy.promoted + 30


def test_cli_prints_the_table_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "oc.json"
    assert _run("--gains=-2,5", "--trials", "20", "--json", str(out)) == 0
    printed = capsys.readouterr().out
    assert "promoted %" in printed and "planner expects %" in printed and "false promotions" in printed
    doc = json.loads(out.read_text())
    assert doc["windows"] == 6 and doc["confidence"] == 0.95
    assert [p["gain_pct"] for p in doc["points"]] == [-2.0, 5.0]
    assert set(doc["points"][0]) == {"gain_pct", "trials", "promote_rate", "planner_promote_rate", "rollback_rate",
                                     "inconclusive_rate", "mean_windows"}


@pytest.mark.parametrize("argv,flag", [
    (["--gains", "1,x"], "--gains"),
    (["--gains", "nan"], "--gains"),
    (["--gains", "-100"], "--gains"),
    (["--trials", "0"], "--trials"),
    (["--noise", "inf"], "--noise"),
    (["--confidence", "1"], "--confidence"),
    (["--margin", "-0.1"], "--margin"),
    (["--windows", "0"], "--windows"),
])
def test_bad_arguments_name_the_flag(argv: list[str], flag: str, capsys: pytest.CaptureFixture) -> None:
    assert _run(*argv) == 2
    assert flag in capsys.readouterr().err
