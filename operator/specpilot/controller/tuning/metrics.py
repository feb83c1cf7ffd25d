"""The tuner's operator metrics (names from metric_names), on the operator's registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from specpilot.controller import metric_names as m
from specpilot.tuning import Action, ActionKind, TrackWindow
from specpilot.tuning.observations import finite, measurable, whole, whole_n
from specpilot_runtime.live import MAX_BATCH_SIZE, band_range, bands_up_to

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
        if not isinstance(entry, dict):
            continue
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


# The most bands a decision can judge: one per label `live.band_of` writes.
MAX_BANDS = len(bands_up_to(MAX_BATCH_SIZE))


@dataclass(frozen=True)
class BandJudgement:
    """One band's verdict as a decision's numbers keep it (bands.BandVerdict.to_json): the two arms' K, the
    estimated gain (percent) and its interval, None where the judge had too few pairs for one."""

    stable_k: int
    canary_k: int
    gain: float | None
    bounds: tuple[float, float] | None


def _pct(value: Any, what: str) -> float | None:
    """A percent as Verdict.to_json writes it: a finite number, or None; else ValueError."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{what} {value!r:.32} is not a number")
    return finite(value, what)


def _judgement(v: Any) -> tuple[str, BandJudgement] | None:
    """A band verdict read back from a status, None unless shaped as the tuner writes it."""
    if not isinstance(v, dict) or not isinstance(v.get("band"), str):
        return None
    try:
        band_range(v["band"])
        gain, lower, upper = (_pct(v[k], k) for k in ("gain_pct", "lower_pct", "upper_pct"))
        ks, kc = whole_n(v["stableK"], "band stableK"), whole_n(v["canaryK"], "band canaryK")
    except (KeyError, ValueError):
        return None
    bounds = None if lower is None or upper is None else (lower, upper)
    return v["band"], BandJudgement(ks, kc, gain, bounds)


def latest_bands(history: list[dict[str, Any]]) -> dict[str, BandJudgement]:
    """The band verdicts of the newest decision that judged an arm band by band (numbers.bands), by band; {}
    when none did. A verdict not as the tuner writes it is passed over, a band's second one too."""
    for entry in reversed(history):
        numbers = entry.get("numbers") if isinstance(entry, dict) else None
        verdicts = numbers.get("bands") if isinstance(numbers, dict) else None
        if not isinstance(verdicts, list):
            continue
        out: dict[str, BandJudgement] = {}
        for band, judged in filter(None, map(_judgement, verdicts[:MAX_BANDS])):
            out.setdefault(band, judged)
        return out
    return {}


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
        band = [NS, DEP, m.LABEL_BAND]
        self.band_gain = Gauge(m.TUNER_BAND_GAIN, "Estimated gain (percent) of the arm's K over the stable's "
                               "at each batch-size band, from the newest band-by-band decision.", band,
                               registry=registry)
        self.band_bounds = Gauge(m.TUNER_BAND_GAIN_BOUND, "Ends of the interval of that per-band estimate.",
                                 band + [m.LABEL_BOUND], registry=registry)
        self.band_k = Gauge(m.TUNER_BAND_K, "K each arm drafted at each batch-size band in that comparison.",
                            band + [m.LABEL_TRACK], registry=registry)

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

    def bands(self, ns: str, name: str, history: list[dict[str, Any]]) -> None:
        """The newest band-by-band judgement in the history (`latest_bands`); an older one's series go."""
        for gauge in self._band_gauges():
            gauge.remove_by_labels({NS: ns, DEP: name})
        for band, j in latest_bands(history).items():
            self.band_k.labels(ns, name, band, "stable").set(j.stable_k)
            self.band_k.labels(ns, name, band, "canary").set(j.canary_k)
            if j.gain is not None:
                self.band_gain.labels(ns, name, band).set(j.gain)
            for bound, value in zip(m.BOUNDS, j.bounds or ()):
                self.band_bounds.labels(ns, name, band, bound).set(value)

    def forget(self, ns: str, name: str) -> None:
        """Tuning is off or the object is gone: its gauges go (the TunerStalled alert reads `last`)."""
        for gauge in (self.last, self.observed, self.predicted, self.bounds, self.schedule, self.method_goodput,
                      *self._band_gauges()):
            gauge.remove_by_labels({NS: ns, DEP: name})

    def drop(self, ns: str, name: str) -> None:
        """The object is deleted: its decision counts go too."""
        self.forget(ns, name)
        self.decisions.remove_by_labels({NS: ns, DEP: name})

    def _clear_predicted(self, ns: str, name: str) -> None:
        # Bounds go with their prediction: a plan without them leaves none of an older plan's behind.
        self.predicted.remove_by_labels({NS: ns, DEP: name})
        self.bounds.remove_by_labels({NS: ns, DEP: name})

    def _band_gauges(self) -> tuple[Gauge, ...]:
        return self.band_gain, self.band_bounds, self.band_k

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass
