"""The tuner's decisions as Kubernetes Events: the history entries a window added, each as an Event (reason,
type, a message naming the method, N, schedule and the numbers behind it). No I/O: loop.py posts them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from specpilot.tuning import ActionKind
from specpilot.tuning.schedule import schedule_text
from specpilot.tuning.tournament_state import Contender

# Event reasons: the actions in CamelCase, as the Tuning condition's are the phases (status.PHASE_REASONS).
EVENT_REASONS: dict[ActionKind, str] = {k: "Tuning" + "".join(w.capitalize() for w in k.split("_"))
                                        for k in ActionKind}
# A rollback that is a probe (the canary won; what it measured points to a better canary): a Normal Event.
PROBE_REASON = "TuningProbe"


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
    bands = numbers.get("bands") or []
    if bands:
        # Schedule mode under switchback: the arm judged band by band (tuning/bands.py).
        parts.append("by band: " + ", ".join(
            f"{b.get('band')} K={b.get('canaryK')} vs {b.get('stableK')} {b.get('decision')} "
            f"{b.get('gain_pct')}% [{b.get('lower_pct')}%, {b.get('upper_pct')}%] in {b.get('windows')} windows"
            for b in bands if isinstance(b, dict)))
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
    method = f" {contenders[who].label}" if isinstance(who, int) and 0 <= who < len(contenders) else ""
    pods = f"; {placement}" if placement and action == ActionKind.START_CANARY else ""
    message = (f"{action}{method} N={entry.get('n')}{served} (round {entry.get('round')}): "
               f"{entry.get('reason', '')}{pods}")
    numbers = _numbers(entry.get("numbers") or {})
    return Decision("Warning" if action == ActionKind.ROLLBACK and not probe else "Normal", reason,
                    f"{message}. {numbers}" if numbers else message)
