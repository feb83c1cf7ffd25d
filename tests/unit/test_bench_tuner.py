"""`specpilot bench tuner`: profile parsing, the simulated deployment, and the CLI's JSON shape."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from specpilot.tuning.observations import has_traffic, record
from specpilot_harness.bench import cli
from specpilot_harness.sim.profile import ProfileError, load_profiles
from specpilot_harness.bench.simulate import Deployment

TINY = {
    "name": "tiny-mtp",
    "method": "mtp",
    "max_n": 3,
    "survival": [0.8, 0.6, 0.4],
    "step_time_ms": {"4": [5.6, 6.3, 6.8, 7.3], "64": [7.7, 9.0, 10.8, 12.3]},
    "concurrency": {"4": 0.5, "64": 0.5},
    "noise": 0.1,
}


def parse_profiles(doc: dict) -> list:
    return list(load_profiles(json.dumps(doc)).values())


def parse(**changes) -> list:
    return parse_profiles({"profiles": [{**TINY, **changes}]})


def test_oracle_is_the_best_goodput_from_the_profile() -> None:
    (p,) = parse()
    g = [sum(0.5 * b * (1 + sum(p.survival[:n])) / p.step_time_ms[b][n] for b in (4, 64)) for n in range(4)]
    assert p.oracle_n() == int(np.argmax(g))
    assert p.goodput(2) == pytest.approx(g[2])
    assert p.default_n == 3  # the method's common default, capped at max_n


def test_survival_by_n_overrides_the_curve() -> None:
    (p,) = parse(method="dflash", survival_by_n={"2": [0.5, 0.2]})
    assert p.survival_at(2) == (0.5, 0.2)
    assert p.survival_at(3) == (0.8, 0.6, 0.4)


@pytest.mark.parametrize("change, field", [
    ({"method": "medusa"}, "method"),
    ({"survival": [0.8, 0.9, 0.4]}, "survival"),
    ({"survival": [0.8]}, "survival"),
    ({"step_time_ms": {}}, "step_time_ms"),
    ({"step_time_ms": {"4": [5.6, 6.3, 6.8]}}, r"step_time_ms\[4\] has 3 values"),
    ({"noise": 2}, "noise"),
    ({"max_n": 0}, "max_n"),
    # Infinite or NaN numbers (JSON as Python reads it allows both) pass every range check.
    ({"concurrency": {"4": float("inf"), "64": 0.5}}, "concurrency.4"),
    ({"step_time_ms": {"4": [5.6, float("nan"), 6.8, 7.3], "64": [7.7, 9.0, 10.8, 12.3]}}, "step_time_ms.4.1"),
    ({"noise": float("nan")}, "noise"),
    ({"name": "x" * 300}, r"\(xxxx.*\.\.\.\): name: String should have at most 253"),
])
def test_bad_profiles_name_the_field(change: dict, field: str) -> None:
    with pytest.raises(ProfileError, match=field):
        parse(**change)


def test_simulated_counters_follow_the_profile() -> None:
    (p,) = parse(noise=0.0)
    dep = Deployment(p, np.random.default_rng(0), stable_n=3)
    lengths = []
    for _ in range(20):
        d = dep.window().stable.delta
        acc = d.accepted_per_pos
        assert len(acc) == 3 and acc[0] >= acc[1] >= acc[2] and d.drafts >= acc[0]
        assert d.accepted_tokens == pytest.approx(sum(acc))
        lengths.append(1 + d.accepted_tokens / d.drafts)
    assert np.mean(lengths) == pytest.approx(p.expected_length(3), rel=0.02)


def test_switchback_measures_an_n_in_the_stable_pods_without_a_restart() -> None:
    """Under switchback a canary of the same drafter under the started N is an arm of the stable's pods: it
    serves at once at the stable's load, the two arms share the window's noise, and nothing restarts; a
    parallel drafter's N stays a canary of its own (its block depends on the started N)."""
    (p,) = parse()
    dep = Deployment(p, np.random.default_rng(1), stable_n=1, measure="switchback", started_n=3)
    dep.start_canary(3)
    obs = dep.window()
    assert obs.switchback and obs.canary is not None and obs.stable is not None
    assert obs.canary.ready_pods == obs.stable.ready_pods == dep.stable_pods
    assert obs.canary.delta.generation_tokens > 0  # no restart: it served the whole window
    assert len(obs.canary.delta.accepted_per_pos) == 3 and len(obs.stable.delta.accepted_per_pos) == 1
    dep.promote(3)
    assert dep.restarts == 0 and dep.served() == (3, None)
    dep.promote(2)
    assert dep.served() == (3, [[1, 65536, 2]])  # K=2 served as a table under the started 3
    (q,) = parse(method="dflash")
    block = Deployment(q, np.random.default_rng(1), stable_n=1, measure="switchback", started_n=3)
    block.start_canary(3)
    assert not block.canary_live and block.restarts == 1


def test_canary_serves_nothing_while_it_restarts() -> None:
    (p,) = parse()
    dep = Deployment(p, np.random.default_rng(0), stable_n=3, restart_s=600.0)
    dep.start_canary(1)
    first = dep.window().canary
    assert first is not None and first.ready_pods == 0 and first.delta.generation_tokens == 0
    assert dep.exploration_cost() > 0


def _loads(dep: Deployment, windows: int) -> list[tuple[float, float | None]]:
    """Per window, the stable's and the canary's sequences per pod (Little's law, as the tuner reads them)."""
    out = []
    for _ in range(windows):
        obs = dep.window()
        per_pod = [record(0, "stable", w, obs.window_s).load if has_traffic(w) else None
                   for w in (obs.stable, obs.canary)]
        out.append((per_pod[0] or 0.0, per_pod[1]))
    return out


def test_with_one_stable_replica_a_canary_halves_every_pods_load() -> None:
    # A Service spreads the same requests over one more pod: what the canary is measured at is not the load
    # a promoted N will serve alone.
    (p,) = parse(noise=0.0, concurrency={"64": 1.0})
    dep = Deployment(p, np.random.default_rng(0), stable_n=3, stable_pods=1, restart_s=0.0)
    ((alone, none),) = _loads(dep, 1)
    assert alone == pytest.approx(64, rel=0.02) and none is None
    dep.start_canary(1)
    for stable, canary in _loads(dep, 3):
        assert stable == pytest.approx(32, rel=0.02) and canary == pytest.approx(32, rel=0.02)
    # Three stable replicas: a quarter of the traffic goes to the canary.
    three = Deployment(p, np.random.default_rng(0), stable_n=3, restart_s=0.0)
    three.start_canary(1)
    assert all(s == pytest.approx(48, rel=0.02) for s, _ in _loads(three, 3))


def test_a_replace_canary_keeps_every_pods_load_and_starts_on_the_stables_pods() -> None:
    # tuning.canary.mode replace: the stable gives a pod up while the canary runs, so the canary is measured
    # at the load a promotion will serve; while it starts the stable's two pods carry the three pods' load.
    (p,) = parse(noise=0.0, concurrency={"64": 1.0})
    dep = Deployment(p, np.random.default_rng(0), stable_n=3, canary_mode="replace", restart_s=300.0)
    dep.start_canary(1)
    starting = dep.window()
    assert starting.stable is not None and starting.stable.desired_pods == 2 and starting.stable_replicas == 3
    assert record(0, "stable", starting.stable, starting.window_s).load == pytest.approx(96, rel=0.02)
    for stable, canary in _loads(dep, 3):
        assert stable == pytest.approx(64, rel=0.02) and canary == pytest.approx(64, rel=0.02)
    assert dep.canary_share == pytest.approx(1 / 3)
    dep.remove_canary()
    ((alone, none),) = _loads(dep, 1)
    assert alone == pytest.approx(64, rel=0.02) and none is None


def test_cli_refuses_a_replace_canary_with_one_stable_replica(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, _ = run_cli(tmp_path, "--canary-mode", "replace", "--stable-replicas", "1")
    assert rc == 2 and "--canary-mode replace needs --stable-replicas of at least 2" in capsys.readouterr().err
    rc, out = run_cli(tmp_path, "--canary-mode", "replace")
    assert rc == 0 and json.loads(out.read_text())["results"]


@pytest.mark.parametrize("replicas", ["0", "65", "-1"])
def test_cli_refuses_stable_replicas_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                  replicas: str) -> None:
    rc, _ = run_cli(tmp_path, "--stable-replicas", replicas)
    assert rc == 2 and "--stable-replicas must be a whole number from 1 to 64" in capsys.readouterr().err


def run_cli(tmp_path: Path, *extra: str, profile: dict = TINY) -> tuple[int, Path]:
    profiles = tmp_path / "profiles.json"
    profiles.write_text(json.dumps({"profiles": [profile]}))
    out = tmp_path / "out.json"
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "tuner", "--profiles", str(profiles), "--seeds", "2",
                              "--json", str(out), *extra])
    return args.func(args), out


def test_cli_noise_replaces_every_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specpilot_harness.bench import strategies

    made: list[Deployment] = []
    orig = strategies._deployment
    monkeypatch.setattr(strategies, "_deployment", lambda *a, **k: made.append(orig(*a, **k)) or made[-1])
    rc, _ = run_cli(tmp_path, "--noise", "0.2")
    assert rc == 0 and made and {d.profile.noise for d in made} == {0.2}


def test_cli_writes_the_documented_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = run_cli(tmp_path, "--markdown", str(tmp_path / "table.md"))
    assert rc == 0
    doc = json.loads(out.read_text())
    keys = {"name", "seed", "method", "chosen_n", "restarts", "canaries", "tried", "oracle_n", "regret_pct", "exploration_cost_pct",
            "family", "promotions", "worst_promotion_pct", "schedule", "schedule_canaries", "vs_single_pct", "oracle_k_by_load", "oracle_started_n",
            "oracle_gain_pct", "oracle_gain_share"}
    assert len(doc["results"]) == 2 and {r["seed"] for r in doc["results"]} == {0, 1}
    assert set(doc["baselines"]) == {"sweep", "default", "hill-climb"}
    for rows in (doc["results"], *doc["baselines"].values()):
        for r in rows:
            assert set(r) == keys
            assert r["canaries"] == len(r["tried"]) and r["regret_pct"] >= 0
            # Promotions in order, each from the N it replaced: they chain from the default to the chosen N.
            chain = [p["from"] for p in r["promotions"]] + [r["chosen_n"]]
            assert all(p["to"] == nxt for p, nxt in zip(r["promotions"], chain[1:]))
    assert doc["baselines"]["sweep"][0]["canaries"] == 3  # every other candidate of 0..3
    assert doc["baselines"]["default"][0]["canaries"] == 0
    captured = capsys.readouterr()
    assert "tiny-mtp" in captured.out and "regret" in captured.out
    assert "seed 1" in captured.err  # progress goes to stderr
    assert (tmp_path / "table.md").read_text().startswith("| profile |")


def test_a_profile_without_a_load_mix_runs_at_its_one_step_row(tmp_path: Path) -> None:
    one_row = {k: v for k, v in TINY.items() if k != "concurrency"} | {"step_time_ms": {"8": [5.6, 6.3, 6.8, 7.3]}}
    rc, out = run_cli(tmp_path, profile=one_row)
    assert rc == 0
    assert all(r["oracle_n"] == 3 for r in json.loads(out.read_text())["results"])


def test_a_profile_without_a_load_mix_over_several_rows_is_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    rc, _ = run_cli(tmp_path, profile={k: v for k, v in TINY.items() if k != "concurrency"})
    err = capsys.readouterr().err
    assert rc == 2 and "'tiny-mtp': concurrency:" in err and '"4": w, "64": w' in err


def test_cli_reports_a_bad_profile_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"profiles": [{**TINY, "noise": -1}]}))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "tuner", "--profiles", str(bad)])
    assert args.func(args) == 2
    assert "noise" in capsys.readouterr().err


def test_shipped_profiles_parse_and_cover_every_family() -> None:
    path = Path(cli.__file__).parent / "profiles" / "article.json"
    profiles = parse_profiles(json.loads(path.read_text()))
    methods = {p.method for p in profiles}
    assert {"mtp", "eagle3", "dflash", "dspark", "ngram"} <= methods
    assert any(p.oracle_n() == 0 for p in profiles)
    assert all(p.noise == pytest.approx(0.10) for p in profiles)


def test_shipped_profiles_are_what_the_calibration_builds() -> None:
    from specpilot_harness.bench.calibrate import build

    path = Path(cli.__file__).parent / "profiles" / "article.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(build()))


def test_structural_profiles_are_what_the_deformer_builds_and_hold_every_shape() -> None:
    from specpilot_harness.bench.structural import SHAPES, build

    path = Path(cli.__file__).parent / "profiles" / "structural.json"
    doc = json.loads(path.read_text())
    built = [json.loads(p.model_dump_json(exclude_defaults=True)) for p in build()]
    assert doc == {"profiles": built}
    assert {p["family"] for p in built} == set(SHAPES)
    # A cliff's N after the best steps slower at every load than the undeformed table said.
    cliff = next(p for p in build() if p.family == "cliff")
    best = cliff.oracle_n()
    assert all(row[best + 1] / row[best] > 1.05 for row in cliff.step_time_ms.values())


def test_structural_mixed_profiles_are_what_the_deformer_builds_with_several_loads_each() -> None:
    from specpilot_harness.bench.structural import SHAPES, build_mixed

    path = Path(cli.__file__).parent / "profiles" / "structural-mixed.json"
    built = build_mixed()
    assert json.loads(path.read_text()) == {"profiles": [json.loads(p.model_dump_json(exclude_defaults=True))
                                                         for p in built]}
    assert {p.family for p in built} == set(SHAPES)
    assert all(len(p.concurrency) > 1 for p in built)  # schedule mode needs a load mix


def test_generated_profiles_are_what_the_generator_builds_and_cover_every_family() -> None:
    from specpilot_harness.bench.generate import FAMILIES, SPLITS, build

    for split in SPLITS:
        path = Path(cli.__file__).parent / "profiles" / f"generated-{split}.json"
        doc = json.loads(path.read_text())
        assert doc == json.loads(json.dumps(build(split)))
        profiles = parse_profiles(doc)
        assert len(profiles) >= 50 and {p.family for p in profiles} == set(FAMILIES)
        assert len({p.oracle_n() for p in profiles}) >= 5  # the best N varies widely
    seeds = [s for split in SPLITS.values() for s in split]
    assert len(seeds) == len(set(seeds))  # no profile in two splits


def test_a_generated_machine_steps_cheaper_at_a_canarys_split_load() -> None:
    # One canary pod beside three stable ones at a level of 32 serves 24 sequences per pod: a generated
    # profile must step there as its machine does (the measured table between 16 and 32), not at the step
    # time of 32, or every split-load canary measures a cost ratio no real engine shows.
    from specpilot_harness.bench.generate import shape_step_times, step_loads

    shape = {"family": "moe", "shapes": ["h200-moe512"], "load_stretch": 1.0, "fixed": 0.0, "blend": 1.0}
    doc = {"name": "moe-24", "method": "dflash", "max_n": 7, "survival": [0.8] * 7, "noise": 0.0,
           "concurrency": {"32": 1.0}, "step_time_ms": shape_step_times(shape, "dflash", 1.0, 7, step_loads([32]))}
    (p,) = parse_profiles({"profiles": [doc]})
    assert step_loads([32]) == [1, 2, 4, 8, 16, 32] and step_loads([4, 64]) == [1, 2, 4, 8, 16, 32, 64]
    for n in (0, 3, 7):
        assert p.step_time(n, 16) < p.step_time(n, 24) < p.step_time(n, 32)
    # The relative cost of speculating moves with the load too (an MoE reads more experts per token when
    # lightly loaded), which a level's flat step time would hide.
    ratio = {b: p.step_time(7, b) / p.step_time(0, b) for b in (16, 32)}
    assert ratio[16] > ratio[32] * 1.2
    # Every shipped generated profile has those rows.
    for split in ("dev", "holdout"):
        doc = json.loads((Path(cli.__file__).parent / "profiles" / f"generated-{split}.json").read_text())
        assert all(set(map(int, d["step_time_ms"])) == set(step_loads(list(map(int, d["concurrency"]))))
                   for d in doc["profiles"])
