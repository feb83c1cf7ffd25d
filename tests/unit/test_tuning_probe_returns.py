"""A canary proven better may be rolled back to probe a neighbour the model expects better still; when the
probe fails, the proven N is tried again rather than lost for the round (a replay of one benchmark run:
gen-tp-mtp-47 seed 0, where N=1 is best, the model expected 2 to be better, and 2 was inconclusive)."""

from __future__ import annotations

from pathlib import Path

from specpilot_harness.bench import cli
from specpilot_harness.bench.strategies import run_tuner
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(cli.__file__).parent / "profiles" / "generated-dev.json"


def test_a_proven_canary_comes_back_after_a_failed_probe() -> None:
    profile = load_profiles(PROFILES.read_text())["gen-tp-mtp-47"]
    assert profile.oracle_n() == 1 and profile.default_n == 3
    run = run_tuner(profile, seed=0)
    assert run.tried[:2] == [1, 2]  # 1 proven, rolled back to probe 2
    assert run.chosen_n == 1 and run.promotions == [(3, 1)], run
