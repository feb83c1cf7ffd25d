"""`specpilot bench tuner|tournament --confidence`: the spec's tuning.confidence, as a user would set it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from specpilot.api.models import Tuning
from specpilot_harness.bench import cli, tournament
from specpilot_harness.bench.simulate import Fleet

PROFILES = Path(__file__).parents[2] / "harness" / "specpilot_harness" / "bench" / "profiles"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers(dest="command"))
    return p


def one_profile(tmp_path: Path, name: str) -> Path:
    doc = json.loads((PROFILES / "article.json").read_text())
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"profiles": [p for p in doc["profiles"] if p["name"] == name]}))
    return path


def bench_tuner(path: Path, out: Path, *extra: str) -> dict:
    args = parser().parse_args(["bench", "tuner", "--profiles", str(path), "--seeds", "1", "--json", str(out),
                                *extra])
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["confidence"] == (float(extra[-1]) if extra else Tuning().confidence)  # what it ran
    return doc["results"][0]


def test_a_lower_confidence_proves_a_gain_the_default_leaves_unproven(tmp_path: Path) -> None:
    # Best N is 4; at 0.95 its canary ends the round unproven and the deployment stays at 3 (1.7% short).
    path = one_profile(tmp_path, "minimax-m3-eagle3-humaneval")
    default = bench_tuner(path, tmp_path / "a.json")
    lower = bench_tuner(path, tmp_path / "b.json", "--confidence", "0.8")
    assert default["oracle_n"] == 4 and default["chosen_n"] != 4 and default["regret_pct"] > 1.0
    assert lower["chosen_n"] == 4 and lower["regret_pct"] == 0.0
    assert default["tried"] != lower["tried"]


def test_the_tournament_judge_runs_at_the_fleets_confidence() -> None:
    t = next(t for t in tournament.load_tournaments((PROFILES / "tournaments-article.json").read_text())
             if t.name == "qwen35-27b-gsm8k-mtp-vs-dflash")
    default = tournament.run_tuner(t, 3)
    lower = tournament.run_tuner(t, 3, fleet=Fleet(confidence=0.8))
    assert default.promotions == [(("mtp", 3), ("mtp", 5))]
    assert lower.promotions == [(("mtp", 3), ("mtp", 4))]


def test_a_tournament_results_file_says_its_confidence(tmp_path: Path) -> None:
    doc = json.loads((PROFILES / "tournaments-article.json").read_text())
    path, out = tmp_path / "one.json", tmp_path / "out.json"
    path.write_text(json.dumps({"tournaments": [t for t in doc["tournaments"]
                                                if t["name"] == "qwen35-27b-gsm8k-mtp-vs-dflash"]}))
    args = parser().parse_args(["bench", "tournament", "--profiles", str(path), "--seeds", "1",
                                "--confidence", "0.8", "--json", str(out)])
    assert args.func(args) == 0
    res = json.loads(out.read_text())
    assert res["settings"]["confidence"] == 0.8 and len(res["results"]) == 1


@pytest.mark.parametrize("value", ["1", "0.4", "nan", "high"])
def test_a_confidence_the_spec_refuses_is_refused_naming_the_flag(value: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["bench", "tournament", "--profiles", "x.json", "--confidence", value])
    assert e.value.code == 2
    assert "--confidence" in capsys.readouterr().err
