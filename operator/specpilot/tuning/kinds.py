"""The tuner's vocabulary: phases, actions and verdicts.

StrEnums, so each member is the very string `status.tuning` has always held (phase, history[].action,
numbers.verdict.decision): the status JSON is unchanged and old statuses still read. The controller maps
them to condition reasons, Event reasons and metric labels in one place each (controller/tuning_status.py,
controller/tuning_metrics.py).
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    OBSERVING = "observing"
    CANARY_STARTING = "canary_starting"
    ANALYSING = "analysing"
    PROMOTING = "promoting"
    ROLLING_BACK = "rolling_back"
    CONVERGED = "converged"


# Phases in which a canary runs at canary N: the machine steps it, so a state in one has a canary N.
CANARY_PHASES = (Phase.CANARY_STARTING, Phase.ANALYSING)


class ActionKind(StrEnum):
    """What the controller does after a window (see machine.Action); RESET only appears in the history,
    when the controller restarts the tuner (spec N edited by hand, or a status.tuning it cannot read)."""

    HOLD = "hold"
    START_CANARY = "start_canary"
    KEEP_ANALYSING = "keep_analysing"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    STOP = "stop"
    RESET = "reset"


class Ruling(StrEnum):
    """The judge's verdict on a canary (judge.Verdict.decision)."""

    PROMOTE = "promote"
    ROLLBACK = "rollback"
    CONTINUE = "continue"
