"""A canary proven better may be rolled back to probe a neighbour the model expects better still; when the
probe does not win over it, the proven N is tried again rather than lost for the round (a replay of one
benchmark run: gen-old-gpu-eagle3-38 seed 1, where N=7 was proven +13% and rolled back to probe N=5,
expected +14%; N=5 was then rolled back in its turn, expected to trail 7, and 7 came back and was
promoted). The replay follows the model: when a change to it takes another path, pick a run that probes
again. It was found with a surge canary beside three stable pods."""

from __future__ import annotations

from pathlib import Path

from specpilot_harness.bench import cli
from specpilot_harness.bench.simulate import Fleet
from specpilot_harness.bench.strategies import run_tuner
from specpilot_harness.sim.profile import load_profiles

PROFILES = Path(cli.__file__).parent / "profiles" / "generated-dev.json"


def test_a_proven_canary_comes_back_after_a_failed_probe() -> None:
    profile = load_profiles(PROFILES.read_text())["gen-old-gpu-eagle3-38"]
    assert profile.default_n == 3 and profile.goodput(7) > 1.1 * profile.goodput(3)
    run = run_tuner(profile, seed=1, fleet=Fleet(3, "surge"))
    # The rule fired: an N proven, rolled back to probe another, then canaried again (when found: 7, 5, 7).
    back = [run.tried[i] for i in range(len(run.tried) - 2) if run.tried[i] == run.tried[i + 2] != run.tried[i + 1]]
    assert back, run
    assert back[0] in [new for _, new in run.promotions], run  # and not lost for the round: promoted
    # What the user sees: no promotion worse than the issue's -0.5%, and the run ends within its 3% max
    # regret of the oracle (the default, 3, is more than 10% short of it).
    assert all(profile.goodput(new) >= 0.995 * profile.goodput(old) for old, new in run.promotions), run
    assert profile.goodput(run.chosen_n) >= 0.97 * profile.goodput(profile.oracle_n()), run
