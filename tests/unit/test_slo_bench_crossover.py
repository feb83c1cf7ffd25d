"""`specpilot bench slo` on the KV-crossover family's big-share draft: at light load both objectives speculate;
at heavy load the draft still decodes faster, so the old objective keeps it, while the SLO gates roll its
canaries back and the N the new objective keeps serves more SLO goodput."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from specpilot_harness.bench import cli

FAMILY = Path(cli.__file__).parent / "profiles" / "kv-crossover.json"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One seed of the big-share draft at its lightest and heaviest levels, through the CLI."""
    doc = json.loads(FAMILY.read_text())
    draft = next(p for p in doc["profiles"] if p["name"] == "kv-draft-big-share")
    doc["profiles"] = [{**draft, "concurrency": {"2": 1, "20": 1}}]
    tmp = tmp_path_factory.mktemp("slo")
    (tmp / "family.json").write_text(json.dumps(doc))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "slo", "--profiles", str(tmp / "family.json"), "--seeds", "1",
                              "--serve-seconds", "60", "--json", str(tmp / "out.json"),
                              "--markdown", str(tmp / "table.md")])
    assert args.func(args) == 0
    out = json.loads((tmp / "out.json").read_text())
    out["markdown"] = (tmp / "table.md").read_text()
    return out


def level(bench: dict, b: int) -> dict:
    return next(r for r in bench["rows"] if r["level"] == b)


def test_at_light_load_both_objectives_speculate_and_no_gate_fires(bench: dict) -> None:
    light = level(bench, 2)
    assert light["old_n"] > 0 and light["new_n"] > 0
    assert light["gate_rollbacks"] == 0
    assert light["new_share"] == light["old_share"] == 1.0  # every request meets the SLOs at every N
    tpot = light["tpot_median_ms"]
    assert tpot[str(light["new_n"])] < tpot["0"] / 2  # what speculation wins there: decode speed


def test_at_heavy_load_the_slo_gate_rolls_the_speculative_canaries_back(bench: dict) -> None:
    heavy = level(bench, 20)
    assert heavy["old_n"] > 0  # decode speed alone still says speculate
    assert heavy["new_n"] == 0 and heavy["best_n"] == [0]
    assert heavy["canaries"] >= 1 and heavy["gate_rollbacks"] == heavy["canaries"]
    assert all("breaks the SLO 2 s" in r for r in heavy["gate_reasons"])
    goodput = heavy["slo_goodput"]
    assert goodput[str(heavy["new_n"])] > 2 * goodput[str(heavy["old_n"])]


def test_the_summary_scores_both_choices_and_the_gates_share(bench: dict) -> None:
    s = bench["summary"]
    assert s["new_mean_share"] > s["old_mean_share"]
    assert s["new_mean_slo_goodput"] > s["old_mean_slo_goodput"]
    assert s["gate_rollback_share"] == pytest.approx(s["gate_rollbacks"] / s["canaries"], abs=1e-4)
    assert s["gate_rollbacks"] >= 1
    assert "| kv-draft-big-share | 20 |" in bench["markdown"] and "TPOT ms new N / N=0" in bench["markdown"]
