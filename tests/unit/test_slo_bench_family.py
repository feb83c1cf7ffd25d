"""The KV-crossover family (bench/profiles/kv-crossover.json) loads as `specpilot bench slo` and `bench tuner`
read it, its shapes are what its names say, and a malformed file is refused naming the field."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from specpilot_harness.bench import cli
from specpilot_harness.bench.engine_tuning import Requests
from specpilot_harness.bench.slo_bench import load_family, request_rate
from specpilot_harness.bench.slo_goodput import serve
from specpilot_harness.sim.profile import ProfileError, load_profiles

FAMILY = Path(cli.__file__).parent / "profiles" / "kv-crossover.json"


def family_doc() -> dict:
    return json.loads(FAMILY.read_text())


def test_the_family_loads_with_kv_capacity_slos_and_load_levels() -> None:
    family = load_family(FAMILY.read_text(), str(FAMILY))
    assert len(family.profiles) == 3
    assert all(p.kv is not None and len(p.concurrency) >= 2 and p.default_n == 0 for p in family.profiles)
    assert family.traffic.slo.ttft_s == 2.0 and family.traffic.slo.tpot_s == 0.05
    # bench tuner reads the same file as a profiles file (the traffic keys beside "profiles" are not its).
    assert set(load_profiles(FAMILY.read_text(), str(FAMILY))) == {p.name for p in family.profiles}


def test_a_level_is_served_as_the_rate_at_which_no_speculation_holds_it() -> None:
    family = load_family(FAMILY.read_text(), str(FAMILY))
    p = family.profiles[0]
    rate = request_rate(p, 20, family.traffic)
    # Little's law: 20 sequences, each 256 steps of t(0, 20).
    assert rate == pytest.approx(20 / (256 * p.step_time(0, 20) / 1000))


def test_where_the_stable_already_breaks_the_slo_no_speculation_misses_it_for_many_requests() -> None:
    family = load_family(FAMILY.read_text(), str(FAMILY))
    over = next(p for p in family.profiles if p.name == "kv-draft-stable-over-slo")
    t = family.traffic
    served = serve(over, 0, Requests(request_rate(over, 20, t), t.prompt_tokens, t.output_tokens), t.slo, 60.0, 0)
    assert served.met_share < t.slo.percentile  # its TTFT percentile is over the SLO: the SLO cannot tell


@pytest.mark.parametrize(("kv", "field"), [
    ({"blocks": 640, "draft_kv_ratio": -0.5}, "kv.draft_kv_ratio"),
    ({"block_tokens": 16}, "kv.blocks"),
    ({"blocks": 640, "draft_weight_blocks": 640}, "kv"),
    ({"blocks": 640, "draft_blocks": 1}, "kv.draft_blocks"),
])
def test_a_malformed_kv_section_is_refused_naming_the_field(kv: dict, field: str) -> None:
    doc = family_doc()
    doc["profiles"][1]["kv"] = kv
    with pytest.raises(ProfileError) as err:
        load_family(json.dumps(doc), "family.json")
    assert f"kv-mtp-small-share): {field}:" in str(err.value)


@pytest.mark.parametrize(("change", "field"), [
    ({"slo": {"ttft": "two seconds"}}, "slo.ttft"),
    ({"output_tokens": 1}, "output_tokens"),
    ({"prompt_tokens": None}, "prompt_tokens"),
])
def test_malformed_traffic_is_refused_naming_the_field(change: dict, field: str) -> None:
    with pytest.raises(ProfileError, match=f"family.json: {field}:"):
        load_family(json.dumps({**family_doc(), **change}), "family.json")


def test_a_profile_without_load_levels_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    doc = family_doc()
    del doc["profiles"][0]["concurrency"]
    path = tmp_path / "family.json"
    path.write_text(json.dumps(doc))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "slo", "--profiles", str(path)])
    assert args.func(args) == 2
    assert "'kv-draft-big-share': concurrency: needs the load levels" in capsys.readouterr().err
