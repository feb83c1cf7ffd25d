"""A canary proven better may be rolled back to probe a neighbour the model expects better still; when the
probe does not win, the proven N is tried again rather than lost for the round (a replay of one benchmark
run: gen-old-gpu-mtp-48 seed 2, where N=0 was proven +32% and rolled back to probe N=1, expected +33%; N=1
was then rolled back in its turn, expected to trail 0, and 0 came back and was promoted). The replay
follows the model: when a change to it takes another path, pick a run that probes again."""

from __future__ import annotations

from pathlib import Path

from specpilot_harness.bench import cli
from specpilot_harness.bench.strategies import run_tuner
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(cli.__file__).parent / "profiles" / "generated-dev.json"


def test_a_proven_canary_comes_back_after_a_failed_probe() -> None:
    profile = load_profiles(PROFILES.read_text())["gen-old-gpu-mtp-48"]
    assert profile.default_n == 3 and profile.goodput(0) > 1.25 * profile.goodput(3)
    run = run_tuner(profile, seed=2)
    assert run.tried[:3] == [0, 1, 0]  # 0 proven, rolled back to probe 1, then back
    assert run.chosen_n == 0 and run.promotions == [(3, 0)], run
