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
# The targets (docs/benchmark.md, "Targets"): max regret of a run, and no promotion worse than this.
MAX_REGRET_PCT = 3.0
WORST_PROMOTION_PCT = -0.5


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
                                "--measure", "canary",
                                *extra])
    assert args.func(args) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"]["confidence"] == (float(extra[-1]) if extra else Tuning().confidence)  # what it ran
    return doc["results"][0]


def test_a_lower_confidence_proves_a_gain_the_default_leaves_unproven(tmp_path: Path) -> None:
    # Best N is 4; when this replay was found, at 0.95 its canary ended the round unproven and the deployment
    # stayed at 3 (1.7% short), while 0.8 promoted it.
    path = one_profile(tmp_path, "minimax-m3-eagle3-humaneval")
    default = bench_tuner(path, tmp_path / "a.json")
    lower = bench_tuner(path, tmp_path / "b.json", "--confidence", "0.8")
    # The flag reaches the judge: the same seed decides otherwise at the lower confidence.
    assert (default["tried"], default["promotions"]) != (lower["tried"], lower["promotions"])
    # What the lower bar buys here is regret, within the N-tuner target (max regret <= 3%) and no
    # more than the default's, with no promotion worse than the target's -0.5%.
    assert lower["regret_pct"] <= min(MAX_REGRET_PCT, default["regret_pct"])
    assert lower["worst_promotion_pct"] >= WORST_PROMOTION_PCT


def test_the_tournament_judge_runs_at_the_fleets_confidence() -> None:
    t = next(t for t in tournament.load_tournaments((PROFILES / "tournaments-article.json").read_text())
             if t.name == "qwen35-27b-gsm8k-mtp-vs-dflash")
    default = tournament.run_tuner(t, 3)
    lower = tournament.run_tuner(t, 3, fleet=Fleet(confidence=0.8))
    # The fleet's confidence reaches the tournament's judge: the same seed is decided otherwise.
    assert default.promotions != lower.promotions
    for run in (default, lower):
        # No promotion worse than the tournaments' target (-0.5%), and each run within 3% of the oracle (the
        # N tuner's max-regret target; MTP at 3, where it starts, is 4.5% short).
        assert all(t.goodput(b) / t.goodput(a) - 1 >= WORST_PROMOTION_PCT / 100 for a, b in run.promotions)
        assert t.goodput(run.chosen) >= (1 - MAX_REGRET_PCT / 100) * t.goodput(t.oracle())


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
