"""What the tuner tells the controller after a window (`Action`), and the decision history it keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .kinds import ActionKind
from .state import TunerState


@dataclass(frozen=True)
class Action:
    """What the controller should do after this window.

    hold: nothing changes. start_canary: create the canary track at `n`. keep_analysing: leave the canary
    running. promote: roll the stable track to `n` and remove the canary. rollback: remove the canary.
    stop: remove any canary and stop tuning this round (disabled, or the round's budget is spent).
    """

    kind: ActionKind
    n: int | None = None
    reason: str = ""
    schedule: list[list[int]] | None = None  # start_canary/promote: the track's batch-size schedule
    # start_canary/promote/rollback of a method canary: the contender (0 = spec.speculative, i >= 1 =
    # spec.tuning.alternatives[i - 1]) the track runs; None: the stable track's own method (tournament.py).
    contender: int | None = None
    # rollback: the canary was proven better, and goes so that what it measured points to can be canaried
    # against the same stable (a probe); not a failure.
    probe: bool = False
    # start_canary/promote: the track runs static pods, no batch-size table (the table check,
    # rules/table_check.py); promoted, the stable stops switching.
    static: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "reason": self.reason, "schedule": self.schedule,
                "contender": self.contender, "probe": self.probe, "static": self.static}


def decide(state: TunerState, now: float, action: Action, numbers: dict[str, Any]) -> Action:
    """Log `action` (with the numbers behind it) in the state's decision history, and return it."""
    entry = {"time": now, "seq": state.seq, "round": state.round, "phase": state.phase,
             "action": action.kind, "n": action.n, "reason": action.reason, "numbers": numbers}
    if action.schedule is not None:
        entry["schedule"] = action.schedule
    if action.contender is not None:
        entry["contender"] = action.contender
    if action.probe:
        entry["probe"] = True
    if action.static:
        entry["static"] = True
    state.log(entry)
    return action
