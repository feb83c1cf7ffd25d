"""The tuning loop's pure half: what the cluster shows -> the tuner's Observations, and the tuner's answer
-> the status patch, the Tuning condition and the Events to post. No I/O: tuning_loop.py does that.

How the tuner's decisions become manifests is not here: the loop writes `status.tuning` (stableN,
canaryN) and the reconciler renders the tracks from it (reconcile.plan_tracks): start_canary -> a canary
Deployment at canaryN; promote -> the stable Deployment rolls to the new stableN and the canary goes;
rollback and stop -> the canary goes and stable is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from specpilot_runtime.vllm_metrics import Snapshot, mean_acceptance_length

from specpilot.api.models import Speculative
from specpilot.controller import status as st
from specpilot.display import some_of
from specpilot.render.names import N_LABEL, TRACK_LABEL
from specpilot.scrape.pods import PodScrape, PodTarget
from specpilot.scrape.windows import TrackDelta
from specpilot.tuning import Action, ActionKind, Observations, Phase, TrackWindow, TunerState
from specpilot.tuning.observations import DRAFTED_PER_POS_ABSENT, acceptance_note, has_traffic, implausible
from specpilot.tuning.schedule import schedule_text
from specpilot.tuning.tournament import standings
from specpilot.tuning.tournament_state import Contender, Tournament

# status.tuning key (besides the tuner's own) holding the spec N the state was started from: when the user
# edits spec N by hand, the two differ and the user wins (the tuner restarts from the new N).
SPEC_N_KEY = "specN"


def _camel(kind: str) -> str:
    return "".join(w.capitalize() for w in kind.split("_"))


# The one mapping of the tuner's phases to Tuning condition reasons and of its actions to Event reasons.
PHASE_REASONS: dict[Phase, str] = {p: _camel(p) for p in Phase}
EVENT_REASONS: dict[ActionKind, str] = {k: "Tuning" + _camel(k) for k in ActionKind}
# A rollback that is a probe (the canary won; what it measured points to a better canary): a Normal Event.
PROBE_REASON = "TuningProbe"
METRICS_UNAVAILABLE = "MetricsUnavailable"
# A track's window that no engine could have counted (a broken exporter, a forged /metrics): not measured.
METRICS_IMPLAUSIBLE = "MetricsImplausible"
# Condition on tracks serving a batch-size schedule: is each position's acceptance divided by the drafts
# that reached it (specpilot's drafted-per-position counter), or by every draft (reads low past K)?
ACCEPTANCE_MEASURED = "AcceptanceMeasured"
DRAFTED_PER_POS = "DraftedPerPosition"


def template_n(deployment: dict[str, Any]) -> int | None:
    labels = ((deployment.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    value = str(labels.get(N_LABEL, ""))
    return int(value) if value.isascii() and value.isdigit() else None


def by_track(deployments: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["labels"][TRACK_LABEL]: d for d in deployments
            if TRACK_LABEL in (d["metadata"].get("labels") or {})}


def _current_pods(deployment: dict[str, Any]) -> int | None:
    """Pods of the Deployment's current template, as its controller reports them: a rolling update that keeps
    N (another method or draft at the same N) still has old pods at that N, which are not the track's."""
    status = deployment.get("status") or {}
    if "updatedReplicas" not in status:
        return None  # no report yet: the pods' N alone tells them apart
    generation = (deployment.get("metadata") or {}).get("generation")
    if isinstance(generation, int) and status.get("observedGeneration", generation) < generation:
        return 0  # the template changed and the controller has not rolled anything yet
    return int(status.get("updatedReplicas") or 0)


def track_window(deployment: dict[str, Any] | None, targets: list[PodTarget],
                 deltas: dict[tuple[str, int], TrackDelta]) -> TrackWindow | None:
    """One track's window: pods at the Deployment's current N only (old pods of a rolling update are not
    the track's N); a track whose pods are not ready yet gets an empty delta."""
    if deployment is None:
        return None
    n = template_n(deployment)
    if n is None:
        return None
    track = deployment["metadata"]["labels"][TRACK_LABEL]
    ready = sum(1 for t in targets if t.track == track and t.n == n and t.ready)
    current = _current_pods(deployment)
    if current is not None:
        ready = min(ready, current)
    got = deltas.get((track, n))
    return TrackWindow(n=n, delta=got.delta if got else Snapshot(), ready_pods=ready if got else 0,
                       desired_pods=int((deployment.get("spec") or {}).get("replicas", 0)),
                       errors=float(got.restarts) if got else 0.0)


def observations(deployments: list[dict[str, Any]], targets: list[PodTarget],
                 deltas: dict[tuple[str, int], TrackDelta], window_s: float, replicas: int) -> Observations:
    """`replicas`: spec.replicas, the pods the stable track runs with no canary beside it."""
    tracks = by_track(deployments)
    return Observations(window_s=window_s, stable=track_window(tracks.get("stable"), targets, deltas),
                        canary=track_window(tracks.get("canary"), targets, deltas), stable_replicas=replicas)


def scrape_problem(scrapes: list[PodScrape]) -> str | None:
    """Why this window's metrics cannot be used, naming the pods; None when every scrape worked."""
    by_error: dict[str, list[str]] = {}
    for s in scrapes:
        if s.snapshot is None:
            by_error.setdefault(s.error or "not scraped", []).append(s.target.name)
    # Pods failing alike (a network policy, a version skew) are said once, with a few of their names.
    return "; ".join(f"{some_of(names)}: {error}" for error, names in by_error.items()) or None


def implausible_counters(obs: Observations) -> dict[str, str]:
    """The tracks whose window the tuner does not measure because no engine could have counted it, and why."""
    return {name: why for name, w in (("stable", obs.stable), ("canary", obs.canary))
            if has_traffic(w) and (why := implausible(w, obs.window_s))}


def edited_by_hand(tuning_status: dict[str, Any] | None, spec_n: int) -> bool:
    """The user changed spec N since the tuner started from it."""
    recorded = (tuning_status or {}).get(SPEC_N_KEY)
    return recorded is not None and recorded != spec_n


def restart_at_spec(state: TunerState, spec: Speculative, now: float) -> TunerState:
    """A fresh tuner at the user's method and N (spec.speculative: a tournament starts over from it), keeping
    the decision history (with this reset in it)."""
    spec_n = spec.num_speculative_tokens
    fresh = TunerState.new(spec.method, spec_n, spec.block_size, now)
    fresh.history = list(state.history)
    fresh.log({"time": now, "seq": state.seq, "round": state.round, "phase": state.phase,
               "action": ActionKind.RESET, "n": spec_n,
               "reason": f"spec N edited by hand ({state.stable_n} -> {spec_n}): the user wins", "numbers": {}})
    return fresh


def tuning_condition(state: TunerState, action: Action, tour: Tournament | None = None,
                     contenders: Sequence[Contender] = ()) -> tuple[str, str, str]:
    """(status, reason, message) of the Tuning condition after a decision; with a method tournament the
    tracks' methods are named."""
    stable = f"stable N={state.stable_n}"
    canary = f", canary N={state.canary_n}" if state.canary_n is not None else ""
    if tour is not None and contenders:
        stable = f"stable {contenders[tour.stable].method} N={state.stable_n}"
        if tour.canary is not None:
            canary = f", canary {contenders[tour.canary].method} N={tour.canary_n}"
    return "True", PHASE_REASONS[state.phase], f"round {state.round}, {stable}{canary}: {action.reason}"


def tournament_status(tour: Tournament | None, state: TunerState,
                      contenders: Sequence[Contender]) -> dict[str, Any] | None:
    """status.tournament: the tournament's state and, per contender, what is known of it (None: no alternatives,
    which removes the key)."""
    if tour is None or len(contenders) < 2:
        return None
    return {**tour.to_status(), "standings": standings(tour, state, contenders)}


def status_patch(old_status: dict[str, Any], state: TunerState, spec_n: int, condition: tuple[str, str, str],
                 generation: int | None, stable: TrackWindow | None,
                 tournament: dict[str, Any] | None = None) -> dict[str, Any]:
    """The merge patch of status after a window: the tuner's state, the method tournament's (None removes
    it), the Tuning condition, accepted length."""
    conds = st.set_condition(list(old_status.get("conditions") or []), st.TUNING, *condition, generation)
    conds = _acceptance_condition(conds, state, generation)
    patch: dict[str, Any] = {"tuning": {**state.to_status(), SPEC_N_KEY: spec_n}, "conditions": conds,
                             "servedSchedule": schedule_text(state.stable_schedule) or None,
                             "tournament": tournament}
    length = mean_acceptance_length(stable.delta) if stable is not None else None
    if length is not None:
        patch["acceptedLength"] = round(length, 4)
    return patch


def _acceptance_condition(conds: list[dict[str, Any]], state: TunerState,
                          generation: int | None) -> list[dict[str, Any]]:
    """AcceptanceMeasured while a track serves a schedule; gone when none does."""
    scheduled = {t for t, rows in (("stable", state.stable_schedule), ("canary", state.canary_schedule)) if rows}
    if not scheduled:
        return [c for c in conds if c.get("type") != ACCEPTANCE_MEASURED]
    note = acceptance_note(state.records, scheduled)
    if note:
        return st.set_condition(conds, ACCEPTANCE_MEASURED, "False", DRAFTED_PER_POS_ABSENT, note, generation)
    return st.set_condition(conds, ACCEPTANCE_MEASURED, "True", DRAFTED_PER_POS,
                            "acceptance per position is divided by the drafts that reached it", generation)


def condition_patch(old_status: dict[str, Any], reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """Only the Tuning condition: no decision was made this window, and this says why."""
    conds = st.set_condition(list(old_status.get("conditions") or []), st.TUNING, "False", reason, message,
                             generation)
    return {"conditions": conds}


@dataclass(frozen=True)
class Decision:
    """A history entry as a Kubernetes Event."""

    event_type: str
    reason: str
    message: str


def new_entries(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """History entries added by this step (the list is bounded, so compare entries, not lengths)."""
    last = old[-1] if old else None
    if last is None:
        return list(new)
    for i in range(len(new) - 1, -1, -1):
        if new[i] == last:
            return new[i + 1:]
    return list(new)


def _numbers(numbers: dict[str, Any]) -> str:
    verdict = numbers.get("verdict") or {}
    plan = numbers.get("plan") or numbers
    parts = []
    if verdict:
        parts.append(", ".join(f"{k}={v}" for k, v in verdict.items() if not isinstance(v, (dict, list))))
    if "gain_pct" in plan:
        gains = ", ".join(f"N={n} {g:+.1f}%" for n, g in plan["gain_pct"].items())
        parts.append(f"expected goodput against stable N={plan.get('stable_n')}: {gains}")
    return "; ".join(p for p in parts if p)


def decision_event(entry: dict[str, Any], contenders: Sequence[Contender] = (), placement: str = "") -> Decision:
    """The Event for a history entry; a method canary's (entry["contender"]) names its method, a started
    canary's says where its pods come from (`placement`, render.replicas.placement)."""
    action = ActionKind(entry["action"])
    probe = action == ActionKind.ROLLBACK and entry.get("probe") is True
    reason = PROBE_REASON if probe else EVENT_REASONS[action]
    schedule = entry.get("schedule")
    served = f" schedule {schedule_text(schedule)}" if isinstance(schedule, list) and schedule else ""
    who = entry.get("contender")
    method = f" {contenders[who].method}" if isinstance(who, int) and 0 <= who < len(contenders) else ""
    pods = f"; {placement}" if placement and action == ActionKind.START_CANARY else ""
    message = (f"{action}{method} N={entry.get('n')}{served} (round {entry.get('round')}): "
               f"{entry.get('reason', '')}{pods}")
    numbers = _numbers(entry.get("numbers") or {})
    return Decision("Warning" if action == ActionKind.ROLLBACK and not probe else "Normal", reason,
                    f"{message}. {numbers}" if numbers else message)
