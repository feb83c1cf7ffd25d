"""The N tuner's state machine: one pure `step()` per analysis window.

    state = TunerState.from_status(status.get("tuning"), method=..., stable_n=..., block_size=...)
    state, action = step(state, spec.tuning, observations, now)
    status["tuning"] = state.to_status()

Phases: observing -> canary_starting -> analysing -> promoting | rolling_back -> observing ... -> converged;
drift after convergence (and the cooldown) starts a new round in observing. In observing, analysing and
converged the decision is the first of an ordered list of rules that returns an action (`rules/`). `step`
never mutates its input state and depends on nothing but its arguments. The method tournament
(`tournament.step`, the controller's entry point) runs it for the stable method's N.
"""

from __future__ import annotations

import dataclasses

from specpilot.api.models import Slo, Tuning, duration_seconds

from .actions import Action, decide
from .bands import band_records
from .constants import LOADS_KEPT as LOADS_KEPT  # noqa: F401 - the controller's resume check imports it here
from .context import Planner, Window, candidates, canary_share, fitted_model, judge_power, load_mix
from .kinds import CANARY_PHASES, ActionKind, Phase
from .observations import Observations, WindowRecord, alone, measurable, record
from .planner import Plan, bracketed, plan
from .rules import first
from .rules.analysing import ANALYSIS_RULES, Analysis
from .rules.converged import CONVERGED_RULES, Converged, settle_reference
from .rules.observing import OBSERVING_RULES, Observing
from .schedule import propose, steady_k
from .state import TunerState
from .step_model import StepModel
from .switchback import switching, trial_costs
from .transitions import converge, rollback
from .warmup import analysis_start, warmup_until

__all__ = ["Action", "candidates", "decide", "fitted_model", "judge_power", "load_mix", "record_window", "step"]


def _plan(state: TunerState, tuning: Tuning, obs: Observations, model: StepModel, loads: list[float]) -> Plan:
    """The planner on the tuner's measurements, for the load mix `loads`; N tried this round excluded."""
    share, restart = trial_costs(state, tuning, canary_share(tuning, obs))
    return plan(state.method, state.records, model, candidates(state, tuning), state.stable_n, loads,
                tuning.objective, tuning.margin_for(state.method), share,
                exclude=[*state.tried, *bracketed(state.stable_n, state.worse, candidates(state, tuning))],
                power=judge_power(model, tuning, tuning.margin_for(state.method)), restart_windows=restart)


def step(state: TunerState, tuning: Tuning, obs: Observations, now: float,
         wait: str | None = None) -> tuple[TunerState, Action]:
    """Advance the N tuner by one window. Pure: returns a new state and the action for the controller.
    `wait`: why no round may plan now (the method tournament has a canary of its own to run first)."""
    st = state.copy()
    if not tuning.enabled:
        return st, _disabled(st, now)
    record_window(st, obs, slo=tuning.slo, by_band=tuning.mode == "schedule")
    # The planning calls are looked up now: the bench's floor (`bench tuner --floor`) swaps them.
    w = Window(st, tuning, obs, now, Planner(_plan, propose), wait)
    if st.phase == Phase.CONVERGED:
        c = Converged(w)
        settle_reference(c)
        return st, first(CONVERGED_RULES, c)
    if st.windows_in_round > tuning.max_windows_per_round and not st.canary_static:
        st.canary_n = None
        st.canary_schedule = None
        st.canary_static = False
        return st, converge(w, "window budget of the round spent", stop=True)
    unwanted = _unwanted(st, tuning)
    if unwanted:
        return st, rollback(st, now, unwanted, {})
    if st.phase == Phase.CANARY_STARTING:
        return st, _canary_starting(st, tuning, obs, now)
    if st.phase == Phase.ANALYSING:
        return st, first(ANALYSIS_RULES, Analysis(w))
    if st.phase == Phase.PROMOTING:
        s = obs.stable
        if s is None or s.n != st.stable_n or s.ready_pods < s.desired_pods or obs.canary is not None:
            return st, Action(ActionKind.HOLD, st.stable_n, "waiting for the stable track to roll")
        st.enter(Phase.OBSERVING, now)
    if st.phase == Phase.ROLLING_BACK:
        if obs.canary is not None and obs.canary.ready_pods > 0:
            return st, Action(ActionKind.HOLD, None, "waiting for the canary to go")
        st.enter(Phase.OBSERVING, now)
    return st, first(OBSERVING_RULES, Observing(w))


def _disabled(state: TunerState, now: float) -> Action:
    """Tuning disabled: drop any canary; when tuning is enabled again, it resumes by observing the stable."""
    state.canary_n = None
    state.canary_schedule = None
    state.canary_static = False
    state.analysis_from_seq = None
    state.warmup_until = None
    if state.phase not in (Phase.OBSERVING, Phase.CONVERGED):
        state.enter(Phase.OBSERVING, now)
    return Action(ActionKind.STOP, state.stable_n, "tuning disabled")


def _unwanted(state: TunerState, tuning: Tuning) -> str | None:
    """Why the running canary may no longer be promoted, the spec having been edited while it ran (it goes
    now); None when it may."""
    if state.phase not in CANARY_PHASES:
        return None
    if state.canary_n not in candidates(state, tuning):
        return f"N={state.canary_n} is no longer among the candidates (spec.tuning.candidates)"
    if state.canary_schedule is not None and tuning.mode != "schedule":
        return f"spec.tuning.mode is {tuning.mode}: the canary's batch-size schedule is no longer served"
    if state.canary_static and (tuning.table_check == "off" or not switching(state, tuning)):
        return ("the table check is no longer asked for (spec.tuning.tableCheck off, or the stable pods no longer "
                "switch: spec.tuning.measure)")
    return None


def _canary_starting(state: TunerState, tuning: Tuning, obs: Observations, now: float) -> Action:
    """Wait for the canary's pods to be Ready (rolled back past progressDeadline, or at once when the API
    server refuses to create them)."""
    c = obs.canary
    if c is not None and c.n == state.canary_n and c.refused is not None and c.ready_pods < c.desired_pods:
        # Waiting out progressDeadline would change nothing: the same template is refused every time.
        return rollback(state, now, f"canary pods refused by the API server: {c.refused}", {})
    if c is not None and c.n == state.canary_n and c.ready_pods >= c.desired_pods > 0:
        # This window straddles the restart and warm-up; analysis starts with the next one, or later while
        # the canary's step time is still settling (warmup.py).
        state.analysis_from_seq = state.seq + 1
        state.warmup_until = warmup_until(state.seq)
        state.enter(Phase.ANALYSING, now)
        return Action(ActionKind.KEEP_ANALYSING, state.canary_n, "canary ready")
    if now - state.phase_since > duration_seconds(tuning.canary.progress_deadline):
        return rollback(state, now, "canary not ready within progressDeadline", {})
    return Action(ActionKind.KEEP_ANALYSING, state.canary_n, "waiting for the canary to be ready")


def record_window(state: TunerState, obs: Observations, in_round: bool = True,
                  slo: Slo | None = None, by_band: bool = False) -> None:
    """Keep the window's records (and paired step times) in `state`. `in_round`: the window counts against
    the round's window budget (a method canary's windows do not: they tune no N). Nor do the windows a
    canary spends starting: the budget is for analysis, a restart takes from seconds (a simulated engine)
    to minutes (a large model loading, vLLM on CPU), and progressDeadline already bounds it. `slo`:
    spec.tuning.slo, what the records' latency numbers are taken against (`observations.record`). `by_band`:
    keep a switchback canary's per-band records (schedule mode judges it band by band, bands.py)."""
    state.seq += 1
    # Nor do the table check's (rules/table_check.py): it runs after the round converged.
    state.windows_in_round += in_round and state.phase != Phase.CANARY_STARTING and not state.canary_static
    recs: dict[str, WindowRecord] = {}
    if measurable(obs.stable, obs.window_s) and obs.stable.n == state.stable_n:
        recs["stable"] = record(state.seq, "stable", obs.stable, obs.window_s, state.stable_schedule is not None,
                                slo)
        beside, beside_pods = None, 0
        if measurable(obs.canary, obs.window_s):
            beside = record(state.seq, "canary", obs.canary, obs.window_s,  # any canary pods, analysed or not
                            slo=slo)
            beside_pods = obs.canary.ready_pods
        if obs.switchback:
            recs["stable"] = dataclasses.replace(recs["stable"], alone_load=recs["stable"].load)
        elif beside is not None or (obs.canary is not None and obs.stable_replicas):
            recs["stable"] = alone(recs["stable"], obs.stable.ready_pods, beside, beside_pods, obs.stable_replicas)
    analysing = state.phase == Phase.ANALYSING and state.analysis_from_seq is not None \
        and state.seq >= state.analysis_from_seq
    if analysing and measurable(obs.canary, obs.window_s) and obs.canary.n == state.canary_n:
        recs["canary"] = record(state.seq, "canary", obs.canary, obs.window_s, state.canary_schedule is not None,
                                slo)
    for r in recs.values():
        state.add_record(r)
    # A band's pairs are two K at one band in one window, whoever's arms: they count from the arm's first
    # window (the engines count each arm's own steps; no pod restarted, so no warm-up is dropped).
    if by_band and obs.switchback and "stable" in recs and measurable(obs.canary, obs.window_s) \
            and obs.canary.n == state.canary_n:
        assert obs.stable is not None
        state.add_band_records(
            band_records(state.seq, "stable", (state.stable_n, state.stable_schedule), obs.stable.bands)
            + band_records(state.seq, "canary", (obs.canary.n, state.canary_schedule), obs.canary.bands))
    if analysing and state.analysis_from_seq is not None and state.warmup_until is not None:
        recent = [r for r in state.records if r.seq >= state.analysis_from_seq]
        state.analysis_from_seq = analysis_start(state.analysis_from_seq, state.seq, state.warmup_until, recent)
    s, c = recs.get("stable"), recs.get("canary")
    if s and c and s.step_s and c.step_s:
        # A track serving a schedule drafts the K its running batch size gets: its step time is a point of
        # t(K) where that K holds over the window's spread of loads, and of no one K elsewhere.
        k_s = steady_k(state.stable_schedule, s.n, s.load)
        k_c = steady_k(state.canary_schedule, c.n, c.load)
        if k_s is not None and k_c is not None and k_s != k_c:
            state.add_pair(fitted_model(state).pair(k_c, k_s, (s.load + c.load) / 2, c.step_s, s.step_s))
