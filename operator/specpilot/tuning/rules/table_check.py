"""The table check: is switching worth what the batch-size table costs?

Under switchback the serving pods carry a batch-size table so that their K can be set live. On GPUs a
table has a cost of its own: vLLM stops padding decode requests to one draft length and its V1 runner
falls back from full CUDA graphs to piecewise ones (users report 6.6-21.6% longer TPOT at K = 0 on
vLLM's issue tracker). Arms measured against each other inside the same pods both pay it, so no switchback verdict
sees it. Once a round converges, one canary of static pods (no table, no live.json) at the K in force is
judged against the switching pods, at a canary's margin (the round's whole load mix has been seen by
then): proven better, it is promoted and the deployment
falls back to that static N (its later canaries are static pods too); otherwise the table is kept for
this stable configuration (`TunerState.table_kept`) and not checked again until it changes.

`table_check_due` is a converged rule (first, before the cooldown); `table_check_ruled` an analysis rule.
"""

from __future__ import annotations

from statistics import median
from typing import TYPE_CHECKING

from specpilot_runtime.speculative import schedule_k

from ..actions import Action
from ..context import candidates, load_mix
from ..kinds import ActionKind, Ruling
from ..schedule import schedule_text
from ..state import TunerState, table_key
from ..switchback import switching
from ..transitions import promote, rollback, start_canary

if TYPE_CHECKING:  # the rule lists of analysing.py and converged.py hold these rules
    from .analysing import Analysis
    from .converged import Converged


def static_n(state: TunerState) -> int:
    """The static N to check: the stable's N, or under a schedule the K it drafts at the median load."""
    if state.stable_schedule is None:
        return state.stable_n
    loads = load_mix(state)
    return schedule_k(state.stable_schedule, state.stable_n, max(1, round(median(loads)))) if loads \
        else state.stable_n


def table_check_due(c: Converged) -> Action | None:
    """Start the table check once per stable configuration, where spec.tuning.tableCheck asks for it (the
    controller resolves auto: off where the pods capture no CUDA graphs)."""
    s, w = c.w.state, c.w
    if w.tuning.table_check == "off" or not switching(s, w.tuning) or s.table_kept == table_key(s.stable_n,
                                                                                               s.stable_schedule):
        return None
    n = static_n(s)
    if n not in candidates(s, w.tuning):
        return None
    serving = f"schedule {schedule_text(s.stable_schedule)}" if s.stable_schedule else f"K={s.stable_n}"
    return start_canary(s, w.now, n, f"table check: static pods at N={n} (no batch-size table) against the "
                                     f"switching pods serving {serving}", {}, static=True)


def table_check_ruled(a: Analysis) -> Action | None:
    """The table check's ruling: static pods proven better are promoted (the fall-back), otherwise the table
    stays; nothing else of the analysis rules applies (no probes, no rivals: it measures no new N)."""
    s, now = a.state, a.w.now
    if not s.canary_static:
        return None
    v = a.verdict
    if v.decision == Ruling.CONTINUE:
        return Action(ActionKind.KEEP_ANALYSING, s.canary_n, f"table check: {v.reason}")
    if v.decision == Ruling.PROMOTE:
        reason = (f"table check: static pods at N={s.canary_n} beat the switching pods, so the batch-size table "
                  f"costs more than switching gains; falling back to static N={s.canary_n} ({v.reason})")
        return promote(s, now, Action(ActionKind.PROMOTE, s.canary_n, reason, static=True),
                       {"verdict": v.to_json()})
    return rollback(s, now, f"table check: the table stays, static pods at N={s.canary_n} not proven better "
                            f"({v.reason})", {"verdict": v.to_json()})
