"""Pure tuning logic: choose num_speculative_tokens (N) from acceptance counters and step times.

The controller's contract (stable; see docs/tuner.md):

    from specpilot.tuning import TunerState, Observations, TrackWindow, Action, step

    state = TunerState.from_status(status.get("tuning"), method=spec.speculative.method,
                                   stable_n=spec.speculative.num_speculative_tokens,
                                   block_size=spec.speculative.block_size, now=now)
    obs = Observations(window_s=300.0,
                       stable=TrackWindow(n=3, delta=stable_delta, ready_pods=3, desired_pods=3),
                       canary=None)          # or a TrackWindow while canary pods exist
    state, action = step(state, spec.tuning, obs, now)
    status["tuning"] = state.to_status()
    # action.kind: hold | start_canary(n) | keep_analysing | promote(n) | rollback(reason) | stop

Modules, one job each: `costs` (H200 step-time priors), `observations` (what a window gives),
`survival` (S_k with batch-means errors), `transfer` (what counters at N say about N'), `step_model`
(t(N, B) learned online), `goodput`, `planner` (next canary by value of information), `judge` (the
sequential canary test and health gates), `evidence` (an unproven canary's windows, for one retry),
`schedule` (per-load N), `drift`, `state` (JSON), `machine` (`step`).
"""

from .kinds import ActionKind, Phase, Ruling
from .machine import Action, candidates, step
from .observations import Observations, TrackWindow
from .state import TunerState

__all__ = ["Action", "ActionKind", "Observations", "Phase", "Ruling", "TrackWindow", "TunerState", "candidates",
           "step"]
