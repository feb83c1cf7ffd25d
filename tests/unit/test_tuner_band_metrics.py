"""Schedule mode under switchback: the judge's per-band estimate, its interval and the two K, as the tuner's
decisions keep them in status.tuning.history, on the operator's /metrics and the tuner dashboard."""

from __future__ import annotations

import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specpilot.controller import metric_names as m
from specpilot.controller.tuning.metrics import MAX_BANDS, TunerMetrics, predicted_goodput
from specpilot.observability import dashboards
from specpilot.tuning.bands import BandVerdict
from specpilot.tuning.judge import Verdict
from specpilot.tuning.kinds import Ruling

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _verdict(band: str, ks: int, kc: int, gain: float, lower: float, upper: float,
             ruling: Ruling = Ruling.PROMOTE) -> dict[str, Any]:
    """A band verdict exactly as the tuner writes it into a decision's numbers."""
    return BandVerdict(band, ks, kc, Verdict(ruling, gain, lower, upper, 6, "judged")).to_json()


def _decision(*verdicts: dict[str, Any], action: str = "promote") -> dict[str, Any]:
    return {"time": 1.0, "seq": 9, "round": 1, "phase": "Analysing", "action": action, "n": 5,
            "reason": "bands judged", "numbers": {"bands": list(verdicts)}}


def _band_series(registry: CollectorRegistry) -> Series:
    """The band series on the metrics endpoint, parsed as Prometheus would: (name, labels but namespace and
    deployment) -> value."""
    names = {m.TUNER_BAND_GAIN, m.TUNER_BAND_GAIN_BOUND, m.TUNER_BAND_K}
    out: Series = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name in names:
                assert (s.labels[m.LABEL_NAMESPACE], s.labels[m.LABEL_DEPLOYMENT]) == ("ns", "sd")
                rest = {k: v for k, v in s.labels.items() if k not in (m.LABEL_NAMESPACE, m.LABEL_DEPLOYMENT)}
                out[(s.name, tuple(sorted(rest.items())))] = s.value
    return out


def _gain(band: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return m.TUNER_BAND_GAIN, ((m.LABEL_BAND, band),)


def _bound(band: str, bound: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return m.TUNER_BAND_GAIN_BOUND, ((m.LABEL_BAND, band), (m.LABEL_BOUND, bound))


def _k(band: str, track: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return m.TUNER_BAND_K, ((m.LABEL_BAND, band), (m.LABEL_TRACK, track))


def test_a_band_decision_shows_each_bands_estimate_interval_and_k_on_the_metrics_endpoint() -> None:
    registry = CollectorRegistry()
    history = [{"action": "start_canary", "numbers": {"schedule": {}}},
               _decision(_verdict("16-31", 3, 5, 0.12, 0.04, 0.2),
                         _verdict("32-63", 3, 2, -0.05, -0.1, 0.01, Ruling.ROLLBACK)),
               {"action": "hold", "numbers": {}}]  # a later decision that judged no band keeps them
    TunerMetrics(registry).bands("ns", "sd", history)
    assert _band_series(registry) == {
        _gain("16-31"): 12.0, _bound("16-31", m.BOUND_LOWER): 4.0, _bound("16-31", m.BOUND_UPPER): 20.0,
        _k("16-31", "stable"): 3.0, _k("16-31", "canary"): 5.0,
        _gain("32-63"): -5.0, _bound("32-63", m.BOUND_LOWER): -10.0, _bound("32-63", m.BOUND_UPPER): 1.0,
        _k("32-63", "stable"): 3.0, _k("32-63", "canary"): 2.0}


def test_a_band_paired_too_rarely_for_an_estimate_shows_its_k_only() -> None:
    registry = CollectorRegistry()
    rare = _verdict("1-1", 4, 5, math.nan, -math.inf, math.inf, Ruling.CONTINUE)
    assert rare["gain_pct"] is None and rare["lower_pct"] is None  # how the tuner writes "no estimate"
    TunerMetrics(registry).bands("ns", "sd", [_decision(rare, action="rollback")])
    assert _band_series(registry) == {_k("1-1", "stable"): 4.0, _k("1-1", "canary"): 5.0}


def test_a_newer_band_decision_replaces_the_older_ones_series() -> None:
    registry = CollectorRegistry()
    tuner = TunerMetrics(registry)
    old = _decision(_verdict("16-31", 3, 5, 0.12, 0.04, 0.2), _verdict("32-63", 3, 2, -0.05, -0.1, 0.01))
    tuner.bands("ns", "sd", [old])
    new = _decision(_verdict("4-7", 5, 6, 0.02, -0.01, 0.05, Ruling.ROLLBACK), action="rollback")
    tuner.bands("ns", "sd", [old, new])
    assert {labels for _, labels in _band_series(registry)} <= {
        ((m.LABEL_BAND, "4-7"),), ((m.LABEL_BAND, "4-7"), (m.LABEL_BOUND, m.BOUND_LOWER)),
        ((m.LABEL_BAND, "4-7"), (m.LABEL_BOUND, m.BOUND_UPPER)),
        ((m.LABEL_BAND, "4-7"), (m.LABEL_TRACK, "stable")), ((m.LABEL_BAND, "4-7"), (m.LABEL_TRACK, "canary"))}
    assert _band_series(registry)[_gain("4-7")] == 2.0
    # A decision judging no band pair at all (an arm rolled back, "no band paired") leaves no band series.
    tuner.bands("ns", "sd", [old, new, _decision(action="rollback")])
    assert _band_series(registry) == {}
    tuner.bands("ns", "sd", [new])
    tuner.forget("ns", "sd")
    assert _band_series(registry) == {}


GOOD = _verdict("16-31", 3, 5, 0.12, 0.04, 0.2)


@pytest.mark.parametrize("bad", [
    "16-31",
    {**GOOD, "band": "16-30"},  # no band `live.band_of` writes
    {**GOOD, "band": "x" * 10_000},
    {**GOOD, "band": 16},
    {**GOOD, "gain_pct": "12"},
    {**GOOD, "gain_pct": True},
    {**GOOD, "lower_pct": 1e400},  # JSON's 1e400 reads as infinity
    {**GOOD, "upper_pct": [20.0]},
    {**GOOD, "stableK": -1},
    {**GOOD, "canaryK": 3.0},
    {k: v for k, v in GOOD.items() if k != "upper_pct"},
])
def test_a_verdict_not_as_the_tuner_writes_it_is_skipped(bad: Any) -> None:
    registry = CollectorRegistry()
    other = _verdict("4-7", 5, 6, 0.02, -0.01, 0.05)
    TunerMetrics(registry).bands("ns", "sd", [_decision(bad, other)])
    assert {labels[0] for _, labels in _band_series(registry)} == {(m.LABEL_BAND, "4-7")}


@pytest.mark.parametrize("entry", [None, "promote", 7, [], {"numbers": None}, {"numbers": ["bands"]},
                                   {"numbers": {"bands": "16-31"}}, {"numbers": {"bands": {"16-31": GOOD}}}])
def test_an_entry_not_as_the_tuner_writes_it_is_passed_over(entry: Any) -> None:
    registry = CollectorRegistry()
    TunerMetrics(registry).bands("ns", "sd", [_decision(GOOD), entry])
    assert _band_series(registry)[_gain("16-31")] == 12.0
    # The plan's gauges read the same history, and pass over it too.
    plan = {"numbers": {"plan": {"stable_n": 3, "gain_pct": {"0": -20.0, "3": 0.0}}}}
    assert predicted_goodput([plan, entry], 3, 100.0) == {0: 80.0, 3: 100.0}


def test_the_bands_exported_are_bounded_one_per_band() -> None:
    registry = CollectorRegistry()
    again = _verdict("16-31", 3, 7, 0.5, 0.4, 0.6)
    every = [_verdict(f"{1 << i}-{(2 << i) - 1}", 3, 5, 0.1, 0.0, 0.2) for i in range(MAX_BANDS)]
    TunerMetrics(registry).bands("ns", "sd", [_decision(GOOD, again, *every, *every)])
    series = _band_series(registry)
    assert len([k for k in series if k[0] == m.TUNER_BAND_GAIN]) <= MAX_BANDS
    assert series[_gain("16-31")] == 12.0 and series[_k("16-31", "canary")] == 5.0  # the first verdict stands


def test_the_tuner_dashboard_shows_each_bands_estimate_interval_and_k() -> None:
    panels = [p for p in dashboards.rendered()["tuner"]["panels"] if p["type"] != "row"]
    exprs = {p["title"]: [t["expr"] for t in p["targets"]] for p in panels}
    gain = exprs["Judged gain by batch-size band"]
    assert sum(m.TUNER_BAND_GAIN + "{" in e for e in gain) == 1
    for bound in m.BOUNDS:
        assert sum(m.TUNER_BAND_GAIN_BOUND in e and f'{m.LABEL_BOUND}="{bound}"' in e for e in gain) == 1
    assert all(f"by (namespace, deployment, {m.LABEL_BAND})" in e for e in gain)
    assert any(m.TUNER_BAND_K in e and m.LABEL_TRACK in e for e in exprs["Judged K by batch-size band"])
