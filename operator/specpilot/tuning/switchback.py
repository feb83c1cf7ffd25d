"""Which draft lengths the serving pods measure live (spec.tuning.measure: switchback), and what that costs.

Under switchback the engines start at the largest candidate (`started_n`) and serve the tuner's N as a live
arm (a batch-size table under the started N): a canary at an N that fits under it is no pod of its own but
a second arm that every stable pod alternates with the stable's, so both are measured at the same load in
the same windows, with no restart. That holds only where an arm K under the started N drafts what a track
started at K would: drafters whose k-th token does not depend on N (`MethodRule.prefix_transfers`) and whose
runner serves a table (`SCHEDULE_METHODS`). A parallel drafter's block depends on the started N, so its N
stays a restart (a canary), as does another method, checkpoint or an N above the started one. Once the
table check (rules/table_check.py) has the stable fall back to static pods, nothing is measured live.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpilot.api import switchback as api
from specpilot.api.models import Tuning
from specpilot_runtime import speculative

from .constants import LIVE_ARM_SHARE, RESTART_WINDOWS
from .state import TunerState


def live_method(tuning: Tuning, method: str) -> bool:
    """The spec asks for switchback and the method's arms under a started N draft what N = K would."""
    return tuning.measure == "switchback" and speculative.live_method(method)


def switching(state: TunerState, tuning: Tuning) -> bool:
    """The stable pods serve live arms: switchback on for a live method, and no fall-back to static pods."""
    return live_method(tuning, state.method) and not state.stable_static


def started_n(state: TunerState, tuning: Tuning) -> int:
    """The N the engines start with under switchback (api/switchback.py: the pods may start higher, at spec
    N above every candidate, which serves every arm up to this one as well)."""
    return api.top_candidate(state.method, state.block_size, tuning.candidates)


def live_arm(state: TunerState, tuning: Tuning, n: int, schedule: Sequence[Sequence[int]] | None = None) -> bool:
    """A canary at N (and schedule) the stable's running engines can serve as an arm."""
    top = started_n(state, tuning)
    return (switching(state, tuning) and not state.canary_static and n <= top and state.stable_n <= top
            and all(row[2] <= top for row in schedule or ()))


def trial_costs(state: TunerState, tuning: Tuning, canary_share: float) -> tuple[float, float]:
    """(share of serving a trial takes, windows it serves nothing): an arm takes half of every stable pod
    and starts at once; a canary takes its pods' share and restarts."""
    if switching(state, tuning):
        return LIVE_ARM_SHARE, 0.0
    return canary_share, RESTART_WINDOWS
