"""The tuner's answer -> the status patch and the Tuning condition (and its AcceptanceMeasured companion),
and a restart at the spec's N when the user edits it. No I/O: loop.py writes the patch (observe.py turns
the cluster into the tuner's Observations; decision_events.py its decisions into Events).

How the tuner's decisions become manifests is not here: the loop writes `status.tuning` (stableN,
canaryN) and the reconciler renders the tracks from it (canary/tracks.py): start_canary -> a canary
Deployment at canaryN; promote -> the stable Deployment rolls to the new stableN and the canary goes;
rollback and stop -> the canary goes and stable is untouched.
"""

from __future__ import annotations

from typing import Any, Sequence

from specpilot_runtime.vllm_metrics import mean_acceptance_length

from specpilot.api.models import Speculative
from specpilot.controller import status as st
from specpilot.tuning import Action, ActionKind, Phase, TrackWindow, TunerState
from specpilot.tuning.observations import DRAFTED_PER_POS_ABSENT, acceptance_note
from specpilot.tuning.schedule import schedule_text
from specpilot.tuning.tournament import standings
from specpilot.tuning.tournament_state import Contender, Tournament

# status.tuning key (besides the tuner's own) holding the spec N the state was started from: when the user
# edits spec N by hand, the two differ and the user wins (the tuner restarts from the new N).
SPEC_N_KEY = "specN"


def _camel(kind: str) -> str:
    return "".join(w.capitalize() for w in kind.split("_"))


# The one mapping of the tuner's phases to Tuning condition reasons (decision_events.py maps its actions
# to Event reasons).
PHASE_REASONS: dict[Phase, str] = {p: _camel(p) for p in Phase}
METRICS_UNAVAILABLE = "MetricsUnavailable"
# A track's window that no engine could have counted (a broken exporter, a forged /metrics): not measured.
METRICS_IMPLAUSIBLE = "MetricsImplausible"
# Condition on tracks serving a batch-size schedule: is each position's acceptance divided by the drafts
# that reached it (specpilot's drafted-per-position counter), or by every draft (reads low past K)?
ACCEPTANCE_MEASURED = "AcceptanceMeasured"
DRAFTED_PER_POS = "DraftedPerPosition"


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
    # The table check's tracks are static pods (no batch-size table): said, so "N=7 against N=7" reads right.
    stable = f"stable N={state.stable_n}{' (static pods)' if state.stable_static else ''}"
    canary = f", canary N={state.canary_n}{' (static pods)' if state.canary_static else ''}" \
        if state.canary_n is not None else ""
    if tour is not None and contenders:
        stable = f"stable {contenders[tour.stable].label} N={state.stable_n}"
        if tour.canary is not None:
            canary = f", canary {contenders[tour.canary].label} N={tour.canary_n}"
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


def stopped_patch(state: TunerState, spec_n: int, tournament: dict[str, Any] | None) -> dict[str, Any]:
    """The merge patch of status when tuning is turned off: the tuner's state without its canary (the reconciler
    already runs spec N), and the method tournament's."""
    return {"tuning": {**state.to_status(), SPEC_N_KEY: spec_n}, "tournament": tournament}


def condition_patch(old_status: dict[str, Any], reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """Only the Tuning condition: no decision was made this window, and this says why."""
    conds = st.set_condition(list(old_status.get("conditions") or []), st.TUNING, "False", reason, message,
                             generation)
    return {"conditions": conds}
