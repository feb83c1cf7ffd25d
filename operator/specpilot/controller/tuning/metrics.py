"""The tuner's operator metrics (names from metric_names), on the operator's registry."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from specpilot.controller import metric_names as m
from specpilot.tuning import Action, ActionKind, TrackWindow
from specpilot.tuning.observations import finite, measurable, whole

NS, DEP = m.LABEL_NAMESPACE, m.LABEL_DEPLOYMENT
# The one mapping of the tuner's actions to `decision` label values (RESET is the controller's, never counted).
DECISION_OF: dict[ActionKind, str] = {
    ActionKind.HOLD: m.DECISION_HOLD, ActionKind.START_CANARY: m.DECISION_START_CANARY,
    ActionKind.KEEP_ANALYSING: m.DECISION_CONTINUE, ActionKind.PROMOTE: m.DECISION_PROMOTE,
    ActionKind.ROLLBACK: m.DECISION_ROLLBACK, ActionKind.STOP: m.DECISION_STOP}


def observed_goodput(w: TrackWindow | None, window_s: float) -> float | None:
    """Output tokens per second per ready pod over the window (engine time), None without traffic."""
    if not measurable(w, window_s):
        return None
    return w.delta.generation_tokens / window_s / w.ready_pods


# Per N, the low and high ends of an interval.
Bounds = dict[int, tuple[float, float]]


def _bounds(plan: dict[str, Any]) -> Bounds:
    """The plan's credible interval of the gain (percent) per N; {} when it has none (written before plans
    kept one) or it is not as the tuner writes it."""
    lower, upper = plan.get("lower_pct"), plan.get("upper_pct")
    if not isinstance(lower, dict) or not isinstance(upper, dict):
        return {}
    try:
        return {whole(int(n), "plan N"): (finite(lo, "plan lower"), finite(upper[n], "plan upper"))
                for n, lo in lower.items() if n in upper}
    except (TypeError, ValueError):
        return {}


def _newest_plan(history: list[dict[str, Any]]) -> tuple[int, dict[int, float], Bounds] | None:
    """The newest plan's stable N, expected gain (percent) over that N per candidate and its interval. Entries
    read back from a status are anyone's: one that is not a plan as the tuner writes it is passed over."""
    for entry in reversed(history):
        numbers = entry.get("numbers") or {}
        plan = (numbers.get("plan") or numbers) if isinstance(numbers, dict) else {}
        if not isinstance(plan, dict) or not isinstance(plan.get("gain_pct"), dict) or not plan["gain_pct"]:
            continue
        try:
            gains = {whole(int(n), "plan N"): finite(g, "plan gain") for n, g in plan["gain_pct"].items()}
            stable_n = whole(plan.get("stable_n"), "plan stable_n")
        except (TypeError, ValueError):
            continue
        # Only the Ns with a gain: an edited interval adds no series the prediction does not have.
        return stable_n, gains, {n: ends for n, ends in _bounds(plan).items() if n in gains}
    return None


def latest_plan(history: list[dict[str, Any]]) -> tuple[int, dict[int, float]] | None:
    """The newest plan's stable N and its expected gain (percent) over that N for each candidate."""
    plan = _newest_plan(history)
    return None if plan is None else plan[:2]


def predicted_goodput(history: list[dict[str, Any]], stable_n: int, stable_goodput: float | None) -> dict[int, float]:
    """Goodput per candidate N from the newest plan made at the current stable N, scaled by stable's measured
    goodput (the planner predicts ratios; the level is what stable serves now). Empty when there is none."""
    plan = _newest_plan(history)
    if stable_goodput is None or plan is None or plan[0] != stable_n:
        return {}
    return {n: stable_goodput * (1 + g / 100) for n, g in plan[1].items()}


def predicted_bounds(history: list[dict[str, Any]], stable_n: int, stable_goodput: float | None) -> Bounds:
    """The credible interval of `predicted_goodput`, scaled the same way; empty when the plan kept none."""
    plan = _newest_plan(history)
    if stable_goodput is None or plan is None or plan[0] != stable_n:
        return {}
    return {n: (stable_goodput * (1 + lo / 100), stable_goodput * (1 + hi / 100)) for n, (lo, hi) in plan[2].items()}


class TunerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(m.TUNER_DECISIONS, "Tuning decisions, one per analysis window.",
                                 [NS, DEP, m.LABEL_DECISION], registry=registry)
        self.last = Gauge(m.TUNER_LAST_DECISION_TIMESTAMP, "Unix time of the latest tuning decision.",
                          [NS, DEP], registry=registry)
        self.predicted = Gauge(m.TUNER_PREDICTED_GOODPUT, "Goodput per pod the tuner predicts for each N.",
                               [NS, DEP, m.LABEL_NUM_SPECULATIVE_TOKENS], registry=registry)
        self.bounds = Gauge(m.TUNER_PREDICTED_GOODPUT_BOUND,
                            "Ends of the credible interval of the goodput per pod the tuner predicts for each N.",
                            [NS, DEP, m.LABEL_NUM_SPECULATIVE_TOKENS, m.LABEL_BOUND], registry=registry)
        self.observed = Gauge(m.TUNER_OBSERVED_GOODPUT, "Goodput per pod measured in the latest window.",
                              [NS, DEP, m.LABEL_TRACK], registry=registry)
        self.schedule = Gauge(m.TUNER_SCHEDULE, "N a track serves in each batch-size range of its schedule.",
                              [NS, DEP, m.LABEL_TRACK, m.LABEL_BATCH_SIZES], registry=registry)
        self.method_goodput = Gauge(m.TUNER_METHOD_GOODPUT,
                                    "Expected goodput of each measured contender at its best N, relative to the "
                                    "stable track's.", [NS, DEP, m.LABEL_CONTENDER, m.LABEL_METHOD, m.LABEL_ROLE],
                                    registry=registry)

    def record(self, ns: str, name: str, action: Action, now: float, observed: dict[str, float | None],
               predicted: dict[int, float], bounds: Bounds) -> None:
        self.decisions.labels(ns, name, DECISION_OF[action.kind]).inc()
        self.last.labels(ns, name).set(now)
        for track, value in observed.items():
            if value is None:
                self._remove(self.observed, ns, name, track)
            else:
                self.observed.labels(ns, name, track).set(value)
        if predicted:
            self._clear_predicted(ns, name)
            for n, value in predicted.items():
                self.predicted.labels(ns, name, str(n)).set(value)
            for n, ends in bounds.items():
                for bound, value in zip(m.BOUNDS, ends):
                    self.bounds.labels(ns, name, str(n), bound).set(value)

    def schedules(self, ns: str, name: str, served: dict[str, list[list[int]] | None]) -> None:
        """Each track's schedule as it is now (a track without one has no series)."""
        self.schedule.remove_by_labels({NS: ns, DEP: name})
        for track, rows in served.items():
            for i, (lo, hi, k) in enumerate(rows or []):
                ranges = f"{lo}+" if i == len(rows or []) - 1 else f"{lo}-{hi}"
                self.schedule.labels(ns, name, track, ranges).set(k)

    def methods(self, ns: str, name: str, standings: list[dict[str, Any]] | None) -> None:
        """The method tournament's standings as they are now (None: no alternatives, no series)."""
        self.method_goodput.remove_by_labels({NS: ns, DEP: name})
        for row in standings or []:
            value = 1.0 if row["role"] == "stable" else (
                1.0 + row["expectedGain"] if row.get("expectedGain") is not None else None)
            if value is not None:
                self.method_goodput.labels(ns, name, str(row["contender"]), row["method"], row["role"]).set(value)

    def forget(self, ns: str, name: str) -> None:
        """Tuning is off or the object is gone: its gauges go (the TunerStalled alert reads `last`)."""
        for gauge in (self.last, self.observed, self.predicted, self.bounds, self.schedule, self.method_goodput):
            gauge.remove_by_labels({NS: ns, DEP: name})

    def drop(self, ns: str, name: str) -> None:
        """The object is deleted: its decision counts go too."""
        self.forget(ns, name)
        self.decisions.remove_by_labels({NS: ns, DEP: name})

    def _clear_predicted(self, ns: str, name: str) -> None:
        # Bounds go with their prediction: a plan without them leaves none of an older plan's behind.
        self.predicted.remove_by_labels({NS: ns, DEP: name})
        self.bounds.remove_by_labels({NS: ns, DEP: name})

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass
