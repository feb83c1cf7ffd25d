"""`specpilot demo --profile <tournament>`: every entry of the article's tournaments is a simulated-engine
profile, the manifest a method tournament is applied as, when the demo ends, and its views and plot (no
sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specpilot.api.validate import validate_object
from specpilot.tuning.tournament_state import contenders_of
from specpilot.api.models import SpeculativeDeployment
from specpilot_harness.bench.tournament import contenders, load_tournaments
from specpilot_harness.demo import readings
from specpilot_harness.demo import tournament as tour
from specpilot_harness.demo.command import TOURNAMENT_EXAMPLE
from specpilot_harness.demo.mix import is_mixed
from specpilot_harness.demo.plot import tournament_plot
from specpilot_harness.demo.session import DemoError, DemoOptions, load_profile, manifest, resolve_profile
from specpilot_harness.demo.view import tournament_dashboard, tournament_summary
from specpilot_harness.sandbox.pod_runtime import PodContext
from specpilot_harness.sandbox.sim_pods import (ARTICLE_TOURNAMENTS, DEFAULT_PROFILE_FILES, SimEngineRuntime,
                                                read_profiles)

TOURNAMENTS = load_tournaments(ARTICLE_TOURNAMENTS.read_text(encoding="utf-8"), str(ARTICLE_TOURNAMENTS))
NAMES = [t.name for t in TOURNAMENTS]
# The issue's head-to-heads: Qwen3.5-27B and Qwen3.6-35B-A3B MTP vs DFlash, Qwen3-8B EAGLE-3 vs DSpark vs
# off (no speculation is N=0 of either), Gemma 4 MTP vs DFlash.
REQUIRED = {"qwen35-27b-gsm8k-mtp-vs-dflash": {"mtp", "dflash"}, "qwen36-35b-a3b-mtp-vs-dflash": {"mtp", "dflash"},
            "qwen3-8b-math500-eagle3-vs-dspark-vs-off": {"eagle3", "dspark"},
            "gemma4-26b-mtp-vs-dflash": {"mtp", "dflash"}}


def options(name: str) -> DemoOptions:
    return DemoOptions(profile=name, time_limit_s=150.0, window="2s", time_scale=3.0, concurrency=8,
                       out=Path("unused.png"), workdir=Path("unused"))


def test_the_issues_head_to_heads_are_there() -> None:
    for name, methods in REQUIRED.items():
        assert {p.method for p in TOURNAMENTS[NAMES.index(name)].entries} == methods


def test_every_tournament_entry_is_a_sim_profile_by_its_name() -> None:
    profiles = read_profiles(DEFAULT_PROFILE_FILES)
    for t in TOURNAMENTS:
        for entry in t.entries:
            name = f"{t.name}/{entry.method}"
            assert profiles[name] == entry  # its tournament's load mix and noise included
            assert load_profile(name) == entry
    assert "qwen35-122b-mtp-math500" in profiles and "mixed-eagle3-chat" in profiles  # the old names stay


def _pod(annotations: dict[str, str], method: str, n: int) -> PodContext:
    speculative: dict[str, Any] = {"method": method, "num_speculative_tokens": n}
    engine = {"model": "org/model", "served_model_name": "demo", "port": 8000, "speculative": speculative}
    owner = {"metadata": {"name": "demo", "uid": "u3", "annotations": annotations}}
    return PodContext({"metadata": {"name": "demo-abc-1", "namespace": "default", "uid": "u1"}}, "127.0.0.1",
                      {"/etc/specpilot/engine.json": json.dumps(engine)}, ({"metadata": {"name": "rs"}}, owner))


def test_each_pod_serves_its_methods_entry_from_the_manifest_annotations() -> None:
    runtime = SimEngineRuntime()
    t = tour.find_tournament("qwen3-8b-gsm8k-eagle3-vs-dflash-vs-dspark")
    assert t is not None
    annotations = manifest(t.entry(t.start.method), options(t.name), t)["metadata"]["annotations"]
    for method, n in (("eagle3", 3), ("dflash", 7), ("dspark", 15)):
        config = runtime.engine_for(_pod(annotations, method, n))
        assert config is not None and config.profile.name == f"{t.name}/{method}"
    # N=0 renders method off: the start's entry serves it, and every entry has the target's step time there.
    config = runtime.engine_for(_pod(annotations, "off", 0))
    assert config is not None and config.profile.name == f"{t.name}/eagle3"
    for tt in TOURNAMENTS:
        assert len({tuple(p.step_time_ms[b][0] for b in sorted(p.step_time_ms)) for p in tt.entries}) == 1


@pytest.mark.parametrize("name", NAMES)
def test_the_manifest_runs_the_tournament(name: str) -> None:
    profile, t = resolve_profile(name)
    assert t is not None and t.name == name and profile == t.entry(t.start.method)
    doc = manifest(profile, options(name), t)
    assert validate_object(doc) == []
    spec, meta = doc["spec"], doc["metadata"]
    ordered = t.ordered()
    # Starts at the tournament's start, with every N its entry serves.
    assert (spec["speculative"]["method"], spec["speculative"]["numSpeculativeTokens"]) == (t.start.method, t.start.n)
    assert spec["tuning"]["candidates"] == list(range(tour.top_n(ordered[0]) + 1))
    # The others as alternatives at their method's default N, own candidates 0..max_n, fake drafts, block 16.
    alts = spec["tuning"]["alternatives"]
    assert [a["method"] for a in alts] == [p.method for p in ordered[1:]]
    for a, p in zip(alts, ordered[1:]):
        assert a["candidates"] == list(range(p.max_n + 1))
        assert a["numSpeculativeTokens"] == {"mtp": 3, "eagle3": 3, "dflash": 7, "dspark": 7}[p.method]
        if p.method in ("dflash", "dspark"):
            assert a["blockSize"] == 16 and a["draftModel"].startswith("example/")
        if p.method == "eagle3":
            assert a["draftModel"].startswith("example/")
    # The contenders the operator reads from it are the benchmark's (bench/tournament.py).
    sd = SpeculativeDeployment.model_validate(doc)
    assert [(c.method, c.n, c.candidates) for c in contenders_of(sd.spec)] \
        == [(c.method, c.n, c.candidates) for c in contenders(t)]
    # Each method's engines serve its entry.
    annotations = meta["annotations"]
    assert annotations["specpilot.io/sim-profile"] == f"{name}/{t.start.method}"
    for p in ordered[1:]:
        assert annotations[f"specpilot.io/sim-profile-{p.method}"] == f"{name}/{p.method}"
    assert annotations["specpilot.io/sim-time-scale"] == "3.0"
    # Several load levels: two pods and a replacing canary, but one N (no schedule mode).
    assert spec["replicas"] == (2 if is_mixed(profile) else 1)
    assert "mode" not in spec["tuning"]


def test_a_plain_profile_keeps_its_manifest() -> None:
    profile, t = resolve_profile("qwen35-122b-mtp-math500")
    assert t is None
    doc = manifest(profile, options("qwen35-122b-mtp-math500"))
    assert "alternatives" not in doc["spec"]["tuning"]
    assert doc["spec"]["speculative"] == {"method": "mtp", "numSpeculativeTokens": 3}
    assert doc["metadata"]["annotations"] == {"specpilot.io/sim-profile": "qwen35-122b-mtp-math500",
                                              "specpilot.io/sim-time-scale": "3.0"}


def test_unknown_names_list_the_tournaments_too() -> None:
    with pytest.raises(DemoError, match=f"tournaments: .*{TOURNAMENT_EXAMPLE}"):
        resolve_profile("nope")


def _status(phase: str = "converged", roles: tuple[str, ...] = ("measured", "stable"), canary: int | None = None,
            stage: str = "idle", stable: int = 1, converged_seq: int = 28) -> dict[str, Any]:
    standings = [{"contender": i, "method": m, "role": r, "n": n}
                 for i, (m, r, n) in enumerate(zip(("mtp", "dflash"), roles, (3, 7)))]
    standings[0].update(acceptedLength=2.2, measuredGain=-0.31, expectedGain=-0.27, bestN=5, sd=0.04)
    record = {"seq": 20, "track": "stable", "n": 7, "b": 4.0, "drafts": 100, "acc": [60, 40, 25, 15, 9, 5, 3],
              "l": 2.6, "t": 0.011}
    history = [{"seq": 4, "action": "start_canary", "n": 0, "contender": 0, "reason": "N=0 not measured"},
               {"seq": 8, "action": "rollback", "n": 0, "contender": 0, "reason": "worse"},
               {"seq": 10, "action": "start_canary", "n": 7, "contender": 1, "reason": "dflash untried"},
               {"seq": 16, "action": "promote", "n": 7, "contender": 1, "reason": "better"},
               {"seq": 22, "action": "start_canary", "n": 9, "reason": "plan"}]
    return {"method": ("mtp", "dflash")[stable], "numSpeculativeTokens": 7, "acceptedLength": 2.6,
            "tuning": {"phase": phase, "round": 2, "seq": 30, "convergedSeq": converged_seq, "stableN": 7,
                       "records": [record], "history": history},
            "tournament": {"stable": stable, "canary": canary, "canaryN": None if canary is None else 7,
                           "stage": stage, "canaries": 2, "standings": standings},
            "conditions": [{"type": "Tuning", "reason": "Converged", "message": "stable dflash N=7"}]}


def test_the_demo_ends_when_every_method_was_measured_and_n_converged() -> None:
    assert tour.finished(_status())
    assert not tour.finished(_status(phase="observing"))  # the stable's N is still being tuned
    assert not tour.finished(_status(roles=("untried", "stable"), stable=1))  # a method never canaried
    assert not tour.finished(_status(roles=("canary", "stable"), canary=0, stage="analysing"))
    assert not tour.finished(_status(canary=0))  # a method canary runs
    assert not tour.finished(_status(stage="switching"))  # the stable track is rolling to the winner
    # Converged in this very window: a loser's second canary is decided in the next one.
    assert not tour.finished(_status(converged_seq=30))
    broken = _status()
    broken["tuning"]["seq"] = "30"  # a status someone else wrote: not finished, and no crash
    assert not tour.finished(broken)
    assert not tour.finished({"tuning": {"phase": "converged"}})  # no tournament written yet
    assert not tour.finished({})


def test_views_name_the_methods_and_score_the_winner_against_the_oracle(tmp_path: Path) -> None:
    t = tour.find_tournament(TOURNAMENT_EXAMPLE)
    assert t is not None
    assert t.oracle() == ("dflash", 7)
    status = _status()
    console = Console(width=200, record=True)
    console.print(tournament_dashboard(status, t, 90.0, 150.0))
    live = console.export_text()
    assert "standings" in live and "mtp N=0" in live and "dflash N=7" in live and "-31.0%" in live
    assert "-27.0% ± 4.0% (N=5)" in live
    console.print(tournament_summary(status, t, 95.0, "out.png", False, "8 clients"))
    text = console.export_text()
    assert "mtp N=3 -> dflash N=7 (the tournament's oracle: dflash N=7, found)" in text
    assert "100.0% of the oracle" in text
    assert "mtp N=0, dflash N=7, N=9" in text  # canaries: methods named where the tournament ran them
    png = tournament_plot(status, t, tmp_path / "t.png", False)
    assert png.stat().st_size > 10_000


def test_measurements_are_read_on_the_engine_clock() -> None:
    """The engines report wall seconds (engine seconds / time scale): the tournament's view and plot divide the
    measured rate by the time scale, and read the truth at the measured (fractional) load."""
    t = tour.find_tournament(TOURNAMENT_EXAMPLE)
    assert t is not None
    tuning = _status()["tuning"]
    wall = readings.observed(tuning)
    assert readings.observed(tuning, 3.0) == pytest.approx({n: g / 3 for n, g in wall.items()})
    truth = tour.truth(t, tuning, mixed=False)
    assert truth["dflash"][7] == pytest.approx(1000 * t.entry("dflash").goodput_at(7, 4.0))


def test_a_mixed_tournament_shows_truth_over_its_load_mix(tmp_path: Path) -> None:
    t = tour.find_tournament("qwen36-35b-a3b-busy-mtp-vs-dflash")
    assert t is not None and is_mixed(t.entries[0])
    truth = tour.truth(t, {}, mixed=True)
    assert tour.best(truth) == t.oracle()
    console = Console(width=200, record=True)
    console.print(tournament_dashboard({}, t, 1.0, 150.0, "phase 1/2: 32 clients", True))
    console.print(tournament_summary({}, t, 2.0, None, True, "phases"))
    text = console.export_text()
    assert "over the tournament's load mix" in text and "(3 first)" in text
    assert tournament_plot({}, t, tmp_path / "m.png", True).exists()
