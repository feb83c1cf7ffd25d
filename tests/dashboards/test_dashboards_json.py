"""The dashboards' JSON: checked in as generated, valid for Grafana's own types, built on the names modules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from specpilot.controller import metric_names as op
from specpilot.observability import dashboards
from specpilot_runtime import live, vllm_metrics as vm

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = ROOT / "charts" / "specpilot" / "dashboards"
RENDERED = dashboards.rendered()
RoundTrip = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="module")
def sdk_round_trip() -> RoundTrip:
    """Through Grafana's own dashboard types and back: fields they do not know are dropped."""
    try:
        from grafana_foundation_sdk.cog import plugins
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import Dashboard as SdkDashboard
    except ImportError:
        pytest.fail("grafana-foundation-sdk is missing: run `make tools`")
    # Panel options and queries decode through the plugins' own types only once they are registered.
    plugins.register_default_plugins()

    def round_trip(dashboard: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps(SdkDashboard.from_json(dashboard), cls=JSONEncoder))
    return round_trip


def _dropped(original: Any, round_trip: Any, path: str = "") -> list[str]:
    """Paths of everything in `original` that Grafana's types did not carry through (unknown to them)."""
    if isinstance(original, dict):
        if not isinstance(round_trip, dict):
            return [path]
        return [p for key, value in original.items()
                for p in ([f"{path}/{key}"] if key not in round_trip
                          else _dropped(value, round_trip[key], f"{path}/{key}"))]
    if isinstance(original, list):
        if not isinstance(round_trip, list) or len(original) != len(round_trip):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, round_trip)) for p in _dropped(a, b, f"{path}[{i}]")]
    return [] if original == round_trip else [path]


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_checked_in_dashboards_are_generated_from_code() -> None:
    on_disk = {p.stem: p.read_text() for p in CHECKED_IN.glob("*.json")}
    assert on_disk == {name: dashboards.to_text(d) for name, d in RENDERED.items()}, \
        "charts/specpilot/dashboards is stale: run `specpilot dashboards` (or `make chart-assets`)"


@pytest.mark.parametrize("name", RENDERED)
def test_grafana_types_carry_every_field(name: str, sdk_round_trip: RoundTrip) -> None:
    assert _dropped(RENDERED[name], sdk_round_trip(RENDERED[name])) == []


def test_round_trip_check_catches_fields_grafana_does_not_know(sdk_round_trip: RoundTrip) -> None:
    broken = json.loads(json.dumps(RENDERED["operator"]))
    broken["refreshEvery"] = "30s"
    _panels(broken)[0]["targets"][0]["legendFormt"] = "{{result}}"
    assert sorted(_dropped(broken, sdk_round_trip(broken))) == ["/panels[1]/targets[0]/legendFormt", "/refreshEvery"]


@pytest.mark.parametrize("name", ["speculative-decoding", "tuner"])
def test_serving_dashboards_filter_by_namespace_deployment_model_and_track(name: str) -> None:
    variables = [v["name"] for v in RENDERED[name]["templating"]["list"]]
    assert variables == ["datasource", "namespace", "deployment", "model", "track"]
    for panel in _panels(RENDERED[name]):
        for target in panel["targets"]:
            assert '=~"$namespace"' in target["expr"] and '=~"$deployment"' in target["expr"], panel["title"]


def test_required_panels_exist() -> None:
    titles = {name: {p["title"] for p in _panels(d)} for name, d in RENDERED.items()}
    assert {"Mean accepted length", "Acceptance by position", "Accepted vs drafted tokens/s",
            "Generation tokens/s", "Time per output token", "Running requests",
            "KV cache use"} <= titles["speculative-decoding"]
    assert {"N by track", "Decision timeline", "Predicted goodput by N",
            "Observed vs predicted goodput", "Method tournament", "K in force by batch-size band",
            "Output tokens per step-second by arm"} <= titles["tuner"]
    assert {"Reconciles/s by result", "Reconcile errors/s", "Reconcile latency"} <= titles["operator"]


def _module_metric_names() -> set[str]:
    names = set()
    for module in (vm, op, live):
        for key, value in vars(module).items():
            if key.isupper() and isinstance(value, str) and value.startswith((*vm.PREFIXES, op.PREFIX)):
                names |= {value, f"{value}_total", f"{value}_bucket"}
    return names | {f"{old}_total" for old in vm.DEPRECATED_NAMES}


def test_every_metric_in_a_query_comes_from_a_names_module() -> None:
    known = _module_metric_names()
    metric = re.compile(r"\b((?:vllm:|specpilot:|specpilot_)[a-z_:]+)")
    for name, dashboard in RENDERED.items():
        exprs = [t["expr"] for p in _panels(dashboard) for t in p["targets"]]
        exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
        for expr in exprs:
            assert set(metric.findall(expr)) <= known, (name, expr)


@pytest.mark.parametrize("name", RENDERED)
def test_panels_have_unique_ids_and_do_not_overlap(name: str) -> None:
    panels = RENDERED[name]["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & area, panel["title"]
        cells |= area
