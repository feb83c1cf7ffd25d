"""`specpilot demo` with a mixed-load profile: the bundled profile, the load phases, schedule mode in the
manifest, the per-level PNG and the views (no sandbox)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from specpilot.api.models import SpeculativeDeployment
from specpilot_harness.demo import readings
from specpilot_harness.demo.mix import is_mixed, mix_plan, spread_goodput
from specpilot_harness.demo.plot import demo_plot
from specpilot_harness.demo.session import DemoOptions, load_config, load_profile, load_text, manifest
from specpilot_harness.demo.view import dashboard, summary
from specpilot_harness.load.runner import LoadPhase
from specpilot_runtime.speculative import METHODS

MIXED, SINGLE = "mixed-eagle3-chat", "qwen35-122b-mtp-math500"
SCHEDULE = [[1, 7, 6], [8, 22, 3], [23, 4096, 2]]


def options(profile: str, window: str = "3s", max_clients: int = 64) -> DemoOptions:
    return DemoOptions(profile=profile, time_limit_s=300.0, window=window, time_scale=1.0, concurrency=8,
                       out=Path("unused.png"), workdir=Path("unused"), max_clients=max_clients)


def test_the_bundled_mixed_profile_wants_a_schedule() -> None:
    profile = load_profile(MIXED)  # as the sandbox's pod runner finds it
    assert is_mixed(profile) and not is_mixed(load_profile(SINGLE))
    default_n = METHODS[profile.method].default_n
    truth = readings.mix_truth(profile, default_n, 6, SCHEDULE)
    # The best N falls with load: 6 at 2 sequences per pod, 2 at 32; no single N serves both.
    assert truth.best_k == {2: 6, 32: 2}
    assert truth.single.n == profile.oracle_n() == 3
    assert truth.served.k_by_level == {2: 6, 32: 2}
    # The schedule beats the best single N well beyond the tuner's 2% promotion margin, at both levels.
    assert truth.gain(truth.served, truth.single) > 0.045
    assert all(truth.served.by_level[b] > truth.single.by_level[b] for b in truth.levels)
    assert truth.oracle.k_by_level == truth.best_k and truth.oracle.total == pytest.approx(truth.served.total)
    # A schedule that misses the light level's K serves less than the best single N there.
    worse = readings.mix_truth(profile, default_n, 6, [[1, 1, 6], [2, 2, 3], [3, 24, 4], [25, 4096, 1]])
    assert worse.served.k_by_level == {2: 3, 32: 1} and worse.gain(worse.served, worse.single) < 0


def test_mixed_load_cycles_the_profile_levels_on_two_pods() -> None:
    profile = load_profile(MIXED)
    plan = mix_plan(profile, window_s=3.0)
    # 2 and 32 sequences per pod on 2 pods; the rarer level (30%) lasts 4 windows, the other its share.
    assert plan.phases == (LoadPhase(4, 28.0), LoadPhase(64, 12.0))
    assert [plan.per_pod(i) for i in range(2)] == [2, 32]
    assert plan.label(1, 6.2) == "phase 2/2: 64 clients (32 per pod), 6 s left"
    capped = mix_plan(profile, window_s=3.0, max_clients=16)
    assert [p.concurrency for p in capped.phases] == [1, 16] and capped.scale == 0.25
    assert "scaled by 0.25" in capped.label(0)
    config, plan2 = load_config(profile, options(MIXED))
    assert config.phases == plan.phases and config.peak_concurrency == 64 and plan2 == plan
    assert "4:28,64:12" in load_text(config, plan)
    with pytest.raises(ValueError):
        mix_plan(profile, window_s=0.0)


def test_single_load_profiles_keep_fixed_concurrency() -> None:
    config, plan = load_config(load_profile(SINGLE), options(SINGLE))
    assert plan is None and config.phases == () and config.concurrency == 8


def test_manifest_picks_schedule_mode_for_a_mixed_profile() -> None:
    doc = manifest(load_profile(MIXED), options(MIXED))
    tuning = doc["spec"]["tuning"]
    assert tuning["mode"] == "schedule"
    assert doc["spec"]["replicas"] == 2 and tuning["canary"]["mode"] == "replace"
    SpeculativeDeployment.model_validate(doc)  # the CRD's model accepts it (replace needs replicas >= 2)
    single = manifest(load_profile(SINGLE), options(SINGLE))
    assert single["spec"]["tuning"].get("mode", "single") == "single" and single["spec"]["replicas"] == 1
    SpeculativeDeployment.model_validate(single)


def status(n: int = 6, schedule: list[list[int]] | None = SCHEDULE, canary: bool = False) -> dict:
    history = [{"seq": 9, "action": "start_canary", "n": 6, "reason": "schedule 1-7:6 8-22:3 23+:2 expected 4%",
                "schedule": SCHEDULE}]
    if schedule:
        history.append({"seq": 20, "action": "promote", "n": 6, "reason": "gain 5%", "schedule": SCHEDULE})
    tuning = {"phase": "Converged", "stableN": n, "stableSchedule": schedule, "seq": 24, "round": 1,
              "history": history, "canaryN": 6 if canary else None, "canarySchedule": SCHEDULE if canary else None,
              "records": [{"seq": 1, "track": "stable", "n": 3, "drafts": 100.0, "acc": [80.0, 64.0, 51.0],
                           "l": 2.95, "t": 0.008, "b": 2.0},
                          {"seq": 21, "track": "stable", "n": 6, "drafts": 100.0,
                           "acc": [80.0, 64.0, 51.0, 20.0, 16.0, 13.0], "dr": [100, 100, 100, 50, 50, 50],
                           "l": 3.4, "t": 0.01, "b": 17.0}]}
    return {"tuning": tuning, "numSpeculativeTokens": n,
            "servedSchedule": "1-7:6 8-22:3 23+:2" if schedule else None}


@pytest.mark.parametrize("schedule", [SCHEDULE, None])
def test_plot_writes_a_png_per_load_level(tmp_path: Path, schedule: list[list[int]] | None) -> None:
    out = demo_plot(status(6 if schedule else 3, schedule), load_profile(MIXED), 3, tmp_path / "d" / "g.png",
                    mixed=True)
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_records_for_a_single_profile_is_skipped(tmp_path: Path) -> None:
    assert demo_plot({"tuning": {}}, load_profile(SINGLE), 3, tmp_path / "g.png", mixed=False) is None


def test_views_show_the_schedule_and_the_load_phase() -> None:
    profile = load_profile(MIXED)
    console = Console(record=True, width=200)
    console.print(dashboard(status(canary=True), profile, 3, 40.0, 300.0, "phase 2/2: 64 clients (32 per pod), 6 s left",
                            mixed=True))
    live = console.export_text()
    assert "load: phase 2/2: 64 clients (32 per pod)" in live
    assert "schedule: stable 1-7:6 8-22:3 23+:2, canary 1-7:6 8-22:3 23+:2" in live
    assert "per load level" in live and "start_canary" in live and "6 [1-7:6 8-22:3 23+:2]" in live
    assert "would serve 1336 (+5.3%)" in " ".join(live.split())
    assert "Goodput per pod at" not in live  # no curve against N from windows at different loads
    console.print(summary(status(), profile, 3, 200.0, "out/g.png", mixed=True, load="phases 4:28,64:12",
                          plan=mix_plan(profile, 3.0)))
    text = " ".join(console.export_text().split())
    assert "as served here" in text and "Binomial(clients, 1/2)" in text
    assert "served 1-7:6 8-22:3 23+:2 (started N=6)" in text
    assert "+5.3% over the best single N" in text and "6 at 2, 2 at 32" in text


def test_survival_reads_a_scheduled_window_by_the_drafts_that_reached_each_position() -> None:
    record = status()["tuning"]["records"][1]
    assert readings.survival(record) == pytest.approx([0.8, 0.64, 0.51, 0.4, 0.32, 0.26])
    short = {**record, "acc": [80.0, 64.0, 0.0], "dr": [100, 100, 0]}  # K=2 under N=3: none reached 3
    assert readings.survival(short) == [0.8, 0.64, None]
    assert 6 not in readings.observed(status()["tuning"])  # a schedule's windows are no point of G(N)


def test_spread_goodput_averages_the_batch_sizes_a_random_split_gives() -> None:
    profile = load_profile(MIXED)
    plan = mix_plan(profile, 2.0)
    # A schedule drafting 3 at every batch size under N=6 serves what N=3 serves (a chain drafter).
    assert spread_goodput(profile, plan, 6, [[1, 4096, 3]]) == pytest.approx(spread_goodput(profile, plan, 3, None))
    # One client on one pod: the pod always holds that one sequence.
    one = mix_plan(profile, 2.0, pods=1, max_clients=1)
    assert [p.concurrency for p in one.phases] == [1, 1]
    assert spread_goodput(profile, one, 3, None) == pytest.approx(readings.served_goodput(profile, 3, None, 1))
