"""Every dashboard query, and the alert rules, against a real Prometheus scraping vLLM and the operator."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_harness import (Deployment, ExpositionServer, OperatorExposition, Prometheus, SimulatedEngines, poll,
                                prometheus_config)

from specpilot.observability import dashboards
from specpilot_runtime.live import SwitchbackCounters, bands_up_to, exposition, parse_live

ROOT = Path(__file__).resolve().parents[2]
VLLM_FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu-draft_model-n4.prom"
RULES = ROOT / "charts" / "specpilot" / "files" / "specpilot-alerts.yaml"
MODEL = "tiny"  # model_name in the fixture
DEPLOYMENTS = [Deployment("serving", "qwen", 4, 3), Deployment("research", "gemma", 4, 5)]
# Simulated engines (pod -> track, N), as the sandbox runs them for a SpeculativeDeployment.
SIM_NAMESPACE, SIM_DEPLOYMENT, SIM_PROFILE = "sim", "simulated", "example-mtp-sequential"
SIMULATED = {"simulated-stable-0": ("stable", 4), "simulated-canary-0": ("canary", 2)}
# One more engine, its own deployment, started at N=4 under a batch-size schedule that drafts 1 token at any
# load: vLLM still counts 4 draft tokens per draft, and positions 2-4 are never drafted.
SCHEDULED_DEPLOYMENT, SCHEDULED_POD, SCHEDULE = "scheduled", "scheduled-stable-0", [[1, 256, 1]]
# And one switching back between two arms (live.json), as a stable pod under spec.tuning.measure switchback.
SWITCHBACK_DEPLOYMENT, SWITCHBACK_POD = "switching", "switching-stable-0"
LIVE = {"arms": [[[1, 65536, 2]], [[1, 65536, 4]]], "dwellSeconds": [0.5, 0.75], "seed": 1}
# Grafana's $__rate_interval is at least four scrape intervals; the test scrapes every second.
RATE_INTERVAL = "10s"
ALL = ".*"


def _switchback_exposition() -> str:
    """What a stable pod under switchback adds to the fixture's /metrics: two arms' counters, K in force."""
    config = parse_live(json.dumps(LIVE).encode(), 4, "draft_model")
    counters = SwitchbackCounters()
    for arm in config.arms:
        for _ in range(10):
            counters.record_step(arm.key, 2, 0.02, 5, 8, 3)
    return exposition(counters, config.arms[0], config.arms, 4, bands_up_to(4))


def _pods() -> list[dict[str, str]]:
    return [{"namespace": d.namespace, "deployment": d.name, "track": track, "pod": f"{d.name}-{track}-{i}",
             "num_speculative_tokens": str(n)}
            for d in DEPLOYMENTS for track, n in (("stable", d.n_stable), ("canary", d.n_canary))
            for i in range(2 if track == "stable" else 1)]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: run `make tools`")
    workdir = tmp_path_factory.mktemp("prometheus")
    exporter = ExpositionServer(VLLM_FIXTURE.read_text() + _switchback_exposition(), OperatorExposition(DEPLOYMENTS))
    live_file = workdir / "live.json"
    live_file.write_text(json.dumps(LIVE))
    engines = SimulatedEngines(workdir, {**{pod: n for pod, (_, n) in SIMULATED.items()}, SCHEDULED_POD: 4,
                                         SWITCHBACK_POD: 4},
                               SIM_PROFILE, schedules={SCHEDULED_POD: SCHEDULE, SWITCHBACK_POD: [[1, 65536, 4]]},
                               live_files={SWITCHBACK_POD: live_file})
    try:
        engines.wait_ready()
        engines.start_load()
        simulated = {engines.ports[pod]: {"namespace": SIM_NAMESPACE, "deployment": SIM_DEPLOYMENT, "track": track,
                                          "pod": pod, "num_speculative_tokens": str(n)}
                     for pod, (track, n) in SIMULATED.items()}
        simulated[engines.ports[SCHEDULED_POD]] = {"namespace": SIM_NAMESPACE, "deployment": SCHEDULED_DEPLOYMENT,
                                                   "track": "stable", "pod": SCHEDULED_POD,
                                                   "num_speculative_tokens": "4"}
        simulated[engines.ports[SWITCHBACK_POD]] = {"namespace": SIM_NAMESPACE, "deployment": SWITCHBACK_DEPLOYMENT,
                                                    "track": "stable", "pod": SWITCHBACK_POD,
                                                    "num_speculative_tokens": "4"}
        with exporter.serve() as port:
            server = Prometheus(binary, workdir, prometheus_config(port, _pods(), simulated, RULES))
            try:
                server.wait_ready()
                yield server
            finally:
                server.stop()
    finally:
        engines.stop()


def _substitute(expr: str, values: dict[str, str]) -> str:
    """What Grafana sends for `expr` with these variable values (All is the regex .*)."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), expr)


def _queries() -> list[tuple[str, str, str]]:
    return [(name, panel["title"], target["expr"])
            for name, dashboard in dashboards.rendered().items()
            for panel in dashboard["panels"] if panel["type"] != "row"
            for target in panel["targets"]]


def _variables() -> list[tuple[str, dict[str, Any]]]:
    return [(name, v) for name, d in dashboards.rendered().items()
            for v in d["templating"]["list"] if v["type"] == "query"]


def _wait_for_results(prometheus: Prometheus, exprs: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """Poll until every query returns something (rates need two scrapes); return the last results."""
    results: dict[str, list[dict[str, Any]]] = {}

    def all_answered() -> bool:
        for key, expr in exprs.items():
            if not results.get(key):
                results[key] = prometheus.query(expr)
        return all(results.values())

    try:
        poll(all_answered, 60, "a result for every query")
    except TimeoutError:
        empty = [f"{key}: {exprs[key]}" for key, result in results.items() if not result]
        raise AssertionError("queries with no result:\n" + "\n".join(empty)) from None
    return results


def test_every_panel_query_returns_data_for_all(prometheus: Prometheus) -> None:
    values = {"namespace": ALL, "deployment": ALL, "model": ALL, "track": ALL}
    exprs = {f"{name} / {title} / {i}": _substitute(expr, values)
             for i, (name, title, expr) in enumerate(_queries())}
    _wait_for_results(prometheus, exprs)


def test_per_track_panels_keep_stable_and_canary_apart(prometheus: Prometheus) -> None:
    expr = next(e for name, title, e in _queries() if name == "speculative-decoding" and title == "Mean accepted length")
    expr = _substitute(expr, {"namespace": ALL, "deployment": ALL, "model": ALL, "track": ALL})
    expected = {(d.name, t) for d in DEPLOYMENTS for t in ("stable", "canary")} | \
        {(SIM_DEPLOYMENT, track) for track, _ in SIMULATED.values()} | {(SCHEDULED_DEPLOYMENT, "stable"),
                                                                         (SWITCHBACK_DEPLOYMENT, "stable")}
    # Each pod's first rate needs two of its scrapes; wait until every track has one.
    poll(lambda: {(s["metric"]["deployment"], s["metric"]["track"]) for s in prometheus.query(expr)} == expected,
         30, "mean accepted length for every deployment and track")
    for series in prometheus.query(expr):
        # 1 + accepted/drafts is at most N + 1: the fixture and the stable engine run N=4, the canary N=2.
        ceiling = 3 if series["metric"]["track"] == "canary" and series["metric"]["deployment"] == SIM_DEPLOYMENT else 5
        assert 1 <= float(series["value"][1]) <= ceiling, series


def test_panel_queries_follow_the_chosen_variables(prometheus: Prometheus) -> None:
    chosen = {"namespace": "serving", "deployment": "qwen", "model": MODEL, "track": "canary"}
    exprs = {f"{name} / {title} / {i}": _substitute(expr, chosen)
             for i, (name, title, expr) in enumerate(_queries())}
    results = _wait_for_results(prometheus, exprs)
    for key, result in results.items():
        for series in result:
            for label in ("namespace", "deployment", "track"):
                if label in series["metric"]:
                    assert series["metric"][label] == chosen[label], (key, series["metric"])


def test_predicted_goodput_joins_the_n_each_track_runs(prometheus: Prometheus) -> None:
    expr = next(e for name, title, e in _queries() if title == "Observed vs predicted goodput" and "group_right" in e)
    results = _wait_for_results(prometheus, {"joined": _substitute(expr, {"namespace": ALL, "deployment": ALL,
                                                                          "track": ALL})})["joined"]
    got = {(s["metric"]["deployment"], s["metric"]["track"]): float(s["value"][1]) for s in results}
    # OperatorExposition predicts 100 + 10 N tokens/s for each N.
    assert got == {(d.name, t): 100.0 + 10 * n for d in DEPLOYMENTS
                   for t, n in (("stable", d.n_stable), ("canary", d.n_canary))}


def test_template_variables_list_the_scraped_values(prometheus: Prometheus) -> None:
    operator = {"namespace": {d.namespace for d in DEPLOYMENTS}, "deployment": {d.name for d in DEPLOYMENTS}}
    # Variables read from vLLM series also list the simulated engines.
    vllm = {"namespace": operator["namespace"] | {SIM_NAMESPACE},
            "deployment": operator["deployment"] | {SIM_DEPLOYMENT, SCHEDULED_DEPLOYMENT, SWITCHBACK_DEPLOYMENT},
            "model": {MODEL, SIM_PROFILE}, "track": {"stable", "canary"}}
    for dashboard, variable in _variables():
        metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"]).groups()
        match = _substitute(metric, {"namespace": ALL, "deployment": ALL})
        expected = (vllm if metric.startswith("vllm:") else operator)[variable["name"]]
        poll(lambda: set(prometheus.label_values(label, match)) == expected, 30, f"values of {label} in {dashboard}")


def test_alert_rules_load_and_evaluate(prometheus: Prometheus) -> None:
    def evaluated() -> bool:
        rules = prometheus.rules()
        # Prometheus reports the zero time for a rule it has not evaluated yet.
        return bool(rules) and not any(r["lastEvaluation"].startswith("0001") for r in rules)
    poll(evaluated, 30, "every rule evaluated")
    rules = prometheus.rules()
    assert [r for r in rules if r["health"] != "ok"] == []
    poll(lambda: bool(prometheus.query("specpilot:vllm_mean_accepted_length:rate5m")), 30, "recording rule")

    def active() -> set[str]:
        return {a["labels"]["alertname"] for r in prometheus.rules() if r["type"] == "alerting"
                for a in r.get("alerts", [])}
    # The exposition reports a rollback on every scrape, and a leader throughout.
    poll(lambda: "SpecpilotCanaryRolledBack" in active(), 30, "the rollback alert")
    assert "SpecpilotOperatorDown" not in active()


def test_speculative_decoding_dashboard_shows_a_simulated_engine(prometheus: Prometheus) -> None:
    """The engines `make demo` and the sandbox run fill the serving dashboard like real vLLM does."""
    chosen = {"namespace": SIM_NAMESPACE, "deployment": SIM_DEPLOYMENT, "model": SIM_PROFILE, "track": ALL}
    exprs = {f"{title} / {i}": _substitute(expr, chosen)
             for i, (name, title, expr) in enumerate(_queries()) if name == "speculative-decoding"}
    results = _wait_for_results(prometheus, exprs)
    for result in results.values():
        assert {s["metric"].get("deployment", SIM_DEPLOYMENT) for s in result} == {SIM_DEPLOYMENT}


def test_acceptance_panels_count_only_what_was_drafted(prometheus: Prometheus) -> None:
    """Under a schedule that drafts 1 of N=4 tokens, the acceptance panels read the runtime plugin's drafted
    counter: position 1 and the acceptance rate are what the drafter achieves, and positions never drafted
    show no value rather than 0 (vLLM's counters alone would show 0% there and a rate cut by 4)."""
    chosen = {"namespace": SIM_NAMESPACE, "deployment": SCHEDULED_DEPLOYMENT, "model": SIM_PROFILE, "track": ALL}
    panels = {title: _substitute(expr, chosen) for name, title, expr in _queries()
              if name == "speculative-decoding" and title in ("Acceptance by position", "Draft acceptance rate")}

    def answered() -> bool:
        by_position = prometheus.query(panels["Acceptance by position"])
        return len(by_position) == 4 and bool(prometheus.query(panels["Draft acceptance rate"]))

    poll(answered, 30, "both acceptance panels for the scheduled engine")
    values = {s["metric"]["position"]: float(s["value"][1]) for s in prometheus.query(panels["Acceptance by position"])}
    assert 0.3 < values["0"] <= 1.0, values  # the profile's first-position acceptance, not a quarter of it
    assert all(math.isnan(values[p]) for p in ("1", "2", "3")), values
    (rate,) = prometheus.query(panels["Draft acceptance rate"])
    assert abs(float(rate["value"][1]) - values["0"]) < 0.05, (rate, values)


def test_switchback_panels_show_each_arm_of_a_switching_engine(prometheus: Prometheus) -> None:
    """A simulated stable pod alternating K=2 and K=4: the tuner dashboard shows both arms' throughput, and the
    K in force at its bands is one of the two."""
    chosen = {"namespace": SIM_NAMESPACE, "deployment": SWITCHBACK_DEPLOYMENT, "model": ALL, "track": ALL}
    exprs = {title: _substitute(expr, chosen) for name, title, expr in _queries()
             if title in ("Output tokens per step-second by arm", "K in force by batch-size band")}
    arms = {"1-65536:2", "1-65536:4"}
    poll(lambda: {s["metric"]["arm"] for s in prometheus.query(exprs["Output tokens per step-second by arm"])
                  if float(s["value"][1]) > 0} == arms, 30, "both arms' throughput")
    k = prometheus.query(exprs["K in force by batch-size band"])
    assert k and {float(s["value"][1]) for s in k} <= {2.0, 4.0}
