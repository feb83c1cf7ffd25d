"""The method tournament's window: `STAGE_RULES`, in order; the first to return the N tuner's new state and
the controller's action decides (the last always does). Each rule but the first acts in one stage of the
method canary (`tournament_state.Stage`); while idle, the N tuner decides unless a method canary starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

from specpilot.api.models import Tuning, duration_seconds
from specpilot_runtime.speculative import OFF

from .. import machine
from ..actions import Action
from ..constants import METHOD_CANARY_MAX_RECORDS
from ..kinds import ActionKind, Phase
from ..observations import Observations, TrackWindow, measurable, record
from ..state import TunerState
from ..tournament_state import Contender, Stage, Tournament
from ..tournament_transitions import Pick, fail, start, switched
from . import first
from .method_analysis import METHOD_ANALYSIS_RULES, MethodAnalysis
from .method_pick import next_pick, untried

Step = tuple[TunerState, Action]  # the N tuner's new state and the controller's action


@dataclass
class TournamentWindow:
    """One window of the tournament. The rules change `tour` (the new tournament state) in place; `inner`,
    the N tuner's state as it came, they leave alone and return a new one."""

    tour: Tournament
    inner: TunerState
    tuning: Tuning
    contenders: Sequence[Contender]
    obs: Observations
    now: float
    own: Tuning = field(init=False)  # the stable contender's tuning: its N tuner runs on it

    def __post_init__(self) -> None:
        self.own = self.contenders[self.tour.stable].tuning(self.tuning)

    @cached_property
    def pick(self) -> Pick | None:
        """The method canary an idle tournament starts now, if any (`method_pick.next_pick`)."""
        return next_pick(self.tour, self.inner, self.tuning, self.contenders, self.obs)

    @cached_property
    def recorded(self) -> TunerState:
        """A copy of the N tuner's state with this window recorded, outside the round's window budget (a
        method canary's windows tune no N)."""
        st = self.inner.copy()
        machine.record_window(st, self.obs, in_round=False, slo=self.tuning.slo)
        return st

    @cached_property
    def canary(self) -> Contender:
        """The contender the method canary runs."""
        assert self.tour.canary is not None
        return self.contenders[self.tour.canary]


def _ready(c: TrackWindow | None, n: int | None, method: str) -> bool:
    want = OFF if n == 0 else method  # N = 0 runs no speculation, whatever the contender's method
    return c is not None and c.n == n and c.method in (None, want) and c.ready_pods >= c.desired_pods > 0


def no_tournament(x: TournamentWindow) -> Step | None:
    """Tuning disabled, or a single contender: no tournament. Any method canary is dropped, and the N
    tuner alone decides."""
    if x.tuning.enabled and len(x.contenders) >= 2:
        return None
    t = x.tour
    if t.canary is not None:
        t.canary, t.canary_n, t.records = None, None, []
        t.enter(Stage.IDLE, x.now)
    return machine.step(x.inner, x.own, x.obs, x.now)


def method_canary_picked(x: TournamentWindow) -> Step | None:
    """Idle, and a pick rule chose a method canary (`method_pick`): start it."""
    if x.tour.stage != Stage.IDLE or x.pick is None:
        return None
    st = x.recorded
    return st, start(x.tour, st, x.pick, x.now)


def n_tuner_decides(x: TournamentWindow) -> Step | None:
    """Idle with no method canary to start: the N tuner decides for the stable's method, told to wait while
    an untried contender is still to be canaried this round; its promotion moves the tournament's scale by
    the gain the judge measured."""
    if x.tour.stage != Stage.IDLE:
        return None
    t, inner, tuning = x.tour, x.inner, x.tuning
    waiting = untried(t, tuning, x.obs) if inner.canaries_in_round < tuning.max_canaries_per_round else []
    wait = f"{x.contenders[waiting[0]].label} untried: it is canaried before N is tuned" if waiting else None
    st, action = machine.step(inner, x.own, x.obs, x.now, wait)
    if action.kind == ActionKind.PROMOTE:
        gain = (st.history[-1].get("numbers", {}).get("verdict") or {}).get("gain_pct")
        t.scale *= 1.0 + (gain or 0.0) / 100.0
    return st, action


def stable_switching(x: TournamentWindow) -> Step | None:
    """A contender was promoted: hold until the stable track runs it alone; a window of mixed pods is no
    one's (counted, not recorded)."""
    if x.tour.stage != Stage.SWITCHING:
        return None
    st, s, c = x.inner.copy(), x.obs.stable, x.contenders[x.tour.stable]
    if s is None or not _ready(s, st.stable_n, c.method) or x.obs.canary is not None:
        st.seq += 1
        return st, Action(ActionKind.HOLD, st.stable_n, f"waiting for the stable track to run {c.label}")
    return None


def stable_switched(x: TournamentWindow) -> Step | None:
    """The stable track runs the promoted contender: its window is the new N tuner's first, and the
    tournament is idle."""
    if x.tour.stage != Stage.SWITCHING:
        return None
    st, c = x.inner.copy(), x.contenders[x.tour.stable]
    x.tour.enter(Stage.IDLE, x.now)
    machine.record_window(st, x.obs, slo=x.tuning.slo)
    return st, Action(ActionKind.HOLD, st.stable_n, f"stable track runs {c.label} N={st.stable_n}")


def method_canary_going(x: TournamentWindow) -> Step | None:
    """Rolled back: hold while the method canary's pods are still Ready."""
    if x.tour.stage == Stage.ROLLING_BACK and x.obs.canary is not None and x.obs.canary.ready_pods > 0:
        return x.recorded, Action(ActionKind.HOLD, None, "waiting for the method canary to go")
    return None


def method_canary_gone(x: TournamentWindow) -> Step | None:
    """Rolled back and the method canary's pods are gone: the tournament is idle."""
    if x.tour.stage != Stage.ROLLING_BACK:
        return None
    x.tour.enter(Stage.IDLE, x.now)
    return x.recorded, Action(ActionKind.HOLD, x.recorded.stable_n, "method canary gone")


def method_canary_ready(x: TournamentWindow) -> Step | None:
    """Starting, and the method canary is Ready at its N and method: analysis starts with the next window
    (this one straddles the restart and warm-up)."""
    t = x.tour
    if t.stage != Stage.STARTING or not _ready(x.obs.canary, t.canary_n, x.canary.method):
        return None
    st = x.recorded
    t.analysis_from_seq = st.seq + 1
    t.enter(Stage.ANALYSING, x.now)
    return st, Action(ActionKind.KEEP_ANALYSING, t.canary_n, f"{x.canary.label} canary ready", contender=t.canary)


def method_canary_refused(x: TournamentWindow) -> Step | None:
    """Starting, and the API server refuses to create the method canary's pods (Pod Security admission, a
    quota, a webhook): the canary failed (`fail`) now, not at progressDeadline (the same template would be
    refused every time)."""
    t, c = x.tour, x.obs.canary
    if t.stage != Stage.STARTING or c is None or c.n != t.canary_n or c.refused is None \
            or c.ready_pods >= c.desired_pods:
        return None
    st = x.recorded
    return st, fail(t, st, f"{x.canary.method} canary pods refused by the API server: {c.refused}", x.now)


def method_canary_late(x: TournamentWindow) -> Step | None:
    """Starting past progressDeadline (the contender's own, else the spec's): the canary failed (`fail`)."""
    t = x.tour
    if t.stage != Stage.STARTING:
        return None
    c = x.canary
    if x.now - t.stage_since > duration_seconds(c.progress_deadline or x.tuning.canary.progress_deadline):
        st = x.recorded
        return st, fail(t, st, f"{c.label} canary not ready within progressDeadline", x.now)
    return None


def method_canary_starting(x: TournamentWindow) -> Step | None:
    """Starting: wait for the method canary to be Ready."""
    t = x.tour
    if t.stage != Stage.STARTING:
        return None
    return x.recorded, Action(ActionKind.KEEP_ANALYSING, t.canary_n, f"waiting for the {x.canary.label} canary",
                              contender=t.canary)


def method_canary_analysed(x: TournamentWindow) -> Step:
    """Analysing: the canary's window joins its records (measurable, at its N, from the analysis's first
    window), then `METHOD_ANALYSIS_RULES` rule; a promoted contender's N tuner starts from all it measured."""
    t, st, w = x.tour, x.recorded, x.obs.canary
    assert t.canary is not None
    if w is not None and measurable(w, x.obs.window_s) and w.n == t.canary_n \
            and st.seq >= (t.analysis_from_seq or st.seq):
        r = record(st.seq, "canary", w, x.obs.window_s, slo=x.tuning.slo)
        t.records = (t.records + [r])[-METHOD_CANARY_MAX_RECORDS:]
    promoted = list(t.records)
    action = first(METHOD_ANALYSIS_RULES, MethodAnalysis(t, st, x.tuning, x.contenders, x.obs, x.now))
    if action.kind == ActionKind.PROMOTE and action.contender is not None:
        st = switched(t, st, x.contenders, promoted, x.now)
        st.enter(Phase.OBSERVING, x.now)
    return st, action


STAGE_RULES = (no_tournament, method_canary_picked, n_tuner_decides, stable_switching, stable_switched,
               method_canary_going, method_canary_gone, method_canary_ready, method_canary_refused, method_canary_late,
               method_canary_starting, method_canary_analysed)
