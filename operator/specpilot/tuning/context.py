"""What the tuner's rules see in one window (`Window`), and the measurements they share.

The planning calls (`Planner`) come in with the window: the state machine passes its own (`machine._plan`,
`schedule.propose`), looked up when the window starts, so the one planner runs every rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from specpilot.api.models import Tuning
from specpilot_runtime.speculative import METHODS, max_n

from .constants import DEFAULT_MAX_CANDIDATE, LOADS_KEPT
from .judge import promotion_power
from .observations import Observations
from .planner import Plan
from .schedule import ScheduleProposal
from .state import TunerState
from .step_model import StepModel, timings

# (state, tuning, observations, step-time model, load mix) -> the planner's numbers and next canary.
PlanCall = Callable[[TunerState, Tuning, Observations, StepModel, list[float]], Plan]
# schedule.propose's signature: (method, records, model, candidates, loads, objective, stable N, schedule).
ProposeCall = Callable[..., ScheduleProposal]


@dataclass(frozen=True)
class Planner:
    """The two planning calls the rules make: which N to canary, and which batch-size schedule."""

    plan: PlanCall
    propose: ProposeCall


@dataclass
class Window:
    """One window's decision: the tuner's state (the rules change it through `transitions`), the spec's
    tuning, the window's observations, the time, the planner, and why no round may plan now (`wait`: the
    method tournament has a canary of its own to run first)."""

    state: TunerState
    tuning: Tuning
    obs: Observations
    now: float
    planner: Planner
    wait: str | None = None

    def plan(self, model: StepModel, loads: list[float]) -> Plan:
        return self.planner.plan(self.state, self.tuning, self.obs, model, loads)

    def schedule_proposal(self, beat: float = 0.0) -> ScheduleProposal | None:
        """Schedule mode, once per round: the batch-size schedule the measurements propose (started N +
        schedule) when it may be canaried: it has two or more ranges, differs from what the stable serves,
        and is expected to beat the stable track by the margin and by `beat` (so its `stable_gain` is set);
        None otherwise."""
        state, tuning = self.state, self.tuning
        if tuning.mode != "schedule" or state.schedule_tried \
                or state.canaries_in_round >= tuning.max_canaries_per_round:
            return None
        proposal = self.propose()
        gain = proposal.stable_gain
        if len(proposal.entries) < 2 or proposal.num_speculative_tokens < 1 or gain is None \
                or gain < max(tuning.margin_for(state.method), beat) or proposal.rows == state.stable_schedule:
            return None
        return proposal

    def propose(self) -> ScheduleProposal:
        """The schedule the measurements propose on the load mix, whether or not it is worth a canary."""
        state = self.state
        return self.planner.propose(state.method, state.records, fitted_model(state),
                                    candidates(state, self.tuning), load_mix(state), self.tuning.objective,
                                    state.stable_n, state.stable_schedule)


def candidates(state: TunerState, tuning: Tuning) -> list[int]:
    """N values the tuner may choose: the spec's list, else 0..the method's useful limit."""
    limit = max_n(state.method, state.block_size)
    if tuning.candidates:
        return sorted({n for n in tuning.candidates if 0 <= n <= limit})
    family = METHODS[state.method].family
    return list(range(0, min(limit, DEFAULT_MAX_CANDIDATE.get(family, limit)) + 1))


def fitted_model(state: TunerState) -> StepModel:
    """The step-time model on the state's paired step times and measured timings."""
    return StepModel(METHODS[state.method].family, state.pairs, timings(state.records))


def load_mix(state: TunerState) -> list[float]:
    """The loads of the recent stable windows: the mix a plan and a promotion weigh."""
    return [r.mix_load for r in state.records if r.track == "stable"][-LOADS_KEPT:]


def canary_share(tuning: Tuning, obs: Observations) -> float:
    """Fraction of traffic a canary takes (traffic splits by replicas)."""
    stable_pods = obs.stable.desired_pods if obs.stable else 1
    return tuning.canary.replicas / (tuning.canary.replicas + max(stable_pods, 1))


def judge_power(model: StepModel, tuning: Tuning, margin: float) -> Callable[[np.ndarray], np.ndarray]:
    """The judge's chance of promoting a true gain by `margin`, with the per-window spread the paired step
    times show."""
    noise_sd = math.sqrt(model.noise_var)
    return partial(promotion_power, margin=margin, confidence=tuning.confidence,
                   noise_sd=noise_sd, windows=tuning.canary.windows)
