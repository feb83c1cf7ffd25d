"""Profiles drive the simulated engine: step time by load, survival by N, and clear errors."""

from __future__ import annotations

import json

import pytest

from specpilot_harness.sim.profile import ProfileError, load_profiles, read_profile


def profile_doc(**overrides: object) -> str:
    p = {"name": "p", "method": "mtp", "max_n": 2, "survival": [0.8, 0.5],
         "step_time_ms": {"1": [10.0, 11.0, 12.0], "16": [20.0, 23.0, 26.0], "64": [40.0, 50.0, 60.0]},
         "concurrency": {"16": 1.0}, "noise": 0.1}
    p.update(overrides)
    return json.dumps({"profiles": [p]})


def test_step_time_is_interpolated_between_load_levels() -> None:
    p = load_profiles(profile_doc())["p"]
    assert p.step_time(1, 16) == 23.0
    assert p.step_time(1, 40) == pytest.approx(36.5)  # halfway from 16 to 64
    assert p.step_time(0, 1) == 10.0


def test_step_time_is_flat_below_the_lowest_level_and_extended_above_the_highest() -> None:
    doc = profile_doc(step_time_ms={"4": [10.0, 11.0, 12.0], "16": [20.0, 23.0, 26.0]})
    p = load_profiles(doc)["p"]
    assert p.step_time(2, 1) == 12.0
    assert p.step_time(2, 28) == pytest.approx(40.0)  # slope 14/12 ms per sequence beyond 16


def test_survival_override_applies_only_at_its_n() -> None:
    p = load_profiles(profile_doc(survival_by_n={"2": [0.7, 0.3]}))["p"]
    assert p.survival_at(1) == (0.8,)
    assert p.survival_at(2) == (0.7, 0.3)
    assert p.survival_at(0) == ()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"survival": [0.5, 0.8]}, "non-increasing"),
    ({"survival": [1.2, 0.5]}, "[0, 1]"),
    ({"survival": [0.8]}, "max_n"),
    ({"step_time_ms": {"16": [20.0, 23.0]}}, "step_time_ms[16]"),
    ({"step_time_ms": {"16": [20.0, -1.0, 3.0]}}, "positive"),
    ({"survival_by_n": {"2": [0.7]}}, "survival_by_n"),
    ({"max_n": 0, "survival": []}, "needs max_n 0; every other method needs max_n >= 1"),
    ({"method": "off"}, "method 'off' drafts nothing"),
])
def test_bad_profiles_are_refused_naming_the_field(overrides: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=r"profiles\[0\] \(p\)") as e:
        load_profiles(profile_doc(**overrides), "f.json")
    assert message in str(e.value)


def test_a_load_level_between_rows_is_scored_as_the_engine_steps_there() -> None:
    p = load_profiles(profile_doc(concurrency={"40": 1.0}))["p"]
    assert p.goodput(1) == pytest.approx(40 * 1.8 / 36.5)  # t(1, 40) halfway between the rows at 16 and 64


def test_no_speculation_is_a_profile_of_one_column() -> None:
    p = load_profiles(profile_doc(method="off", max_n=0, survival=[], step_time_ms={"16": [20.0]}))["p"]
    assert (p.default_n, p.expected_length(0), p.oracle_n()) == (0, 1.0, 0)
    assert p.goodput(0) == pytest.approx(16 / 20.0)


def test_n_outside_the_profile_is_refused() -> None:
    p = load_profiles(profile_doc())["p"]
    with pytest.raises(ProfileError, match="outside 0..max_n"):
        p.survival_at(3)


def test_unknown_keys_travel_with_a_profile() -> None:
    assert load_profiles(profile_doc(note="calibrated from the article"))["p"].max_n == 2


def test_profiles_are_picked_by_name_from_a_file(tmp_path) -> None:
    f = tmp_path / "profiles.json"
    f.write_text(profile_doc())
    assert read_profile(f, None).name == "p"
    with pytest.raises(ProfileError, match="no profile 'q'.*it has: p"):
        read_profile(f, "q")
    with pytest.raises(ProfileError, match="cannot read"):
        read_profile(tmp_path / "missing.json", "p")


def test_bundled_examples_load_and_need_a_name() -> None:
    assert read_profile(None, "example-dflash-parallel").method == "dflash"
    with pytest.raises(ProfileError, match="pick one with --name"):
        read_profile(None, None)


def test_the_tuner_profiles_drive_the_simulator_at_every_n() -> None:
    """The benchmark's profile file (docs/benchmark.md format) is what sandbox pods run by."""
    from pathlib import Path

    article = Path(__file__).parents[2] / "harness" / "specpilot_harness" / "bench" / "profiles" / "article.json"
    for p in load_profiles(article.read_text(), str(article)).values():
        for n in range(p.max_n + 1):
            assert len(p.survival_at(n)) == n
            assert p.step_time(n, 1) > 0 and p.step_time(n, 512) >= p.step_time(n, 1)
