"""Pure tuning logic: choose the speculative method and num_speculative_tokens (N) from acceptance counters
and step times.

The controller's entry point (stable; see docs/tuner.md) is the method tournament's `tournament.step`:

    from specpilot.tuning import TunerState, Observations, TrackWindow, tournament, tournament_state

    contenders = tournament_state.contenders_of(spec)     # spec.speculative, then spec.tuning.alternatives
    tour = tournament_state.Tournament.from_status(status.get("tournament"), contenders, now)
    state = TunerState.from_status(status.get("tuning"), method=contenders[tour.stable].method,
                                   stable_n=..., block_size=..., now=now)
    obs = Observations(window_s=300.0,
                       stable=TrackWindow(n=3, delta=stable_delta, ready_pods=3, desired_pods=3),
                       canary=None)          # or a TrackWindow while canary pods exist
    tour, state, action = tournament.step(tour, state, spec.tuning, contenders, obs, now)
    status["tournament"], status["tuning"] = tour.to_status(), state.to_status()
    # action.kind: hold | start_canary(n) | keep_analysing | promote(n) | rollback(reason) | stop

With one contender (no spec.tuning.alternatives) `tournament.step` is the N tuner's `step` (machine.py),
exported here for the benchmark and tests that drive the N tuner alone.

Modules, one job each: `constants` (every number that steers the tuner, with its provenance), `costs`
(step-time priors from measured shapes), `observations` (what a window gives), `survival` (S_k with
batch-means errors), `transfer` (what counters at N say about N'), `step_model` (t(N, B) learned online),
`goodput`, `planner` (next canary by value of information), `judge` (the sequential canary test and health
gates), `evidence` (an unproven canary's windows, for one retry), `schedule` (per-load N), `drift`, `state`
(JSON), `actions` (what the controller is told), `context` (what a rule sees), `transitions` (the state
changes a decision makes), `rules/` (the decisions, as ordered rules), `machine` (the N tuner's `step`),
`tournament` and `tournament_state` (the method as well as N).
"""

from . import tournament, tournament_state
from .actions import Action
from .context import candidates
from .kinds import ActionKind, Phase, Ruling
from .machine import step
from .observations import Observations, TrackWindow
from .state import TunerState

__all__ = ["Action", "ActionKind", "Observations", "Phase", "Ruling", "TrackWindow", "TunerState", "candidates",
           "step", "tournament", "tournament_state"]
