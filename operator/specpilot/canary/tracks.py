"""The canary's tracks: which N (and schedule, and contender) the stable and canary Deployments run, read
from what the tuning loop wrote to status.tuning and status.tournament. The reconciler renders exactly this
plan, so a start_canary creates the canary, a promote rolls stable and removes the canary, and a rollback
or stop removes the canary (docs/operator.md, "The seam for the tuning loop"). Pure."""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from typing import Any

from specpilot_runtime.live import Arm, LiveConfig

from specpilot.api.models import SpeculativeDeployment, duration_seconds
from specpilot.api.switchback import dwell_range, measured_live, started_n, top_candidate
from specpilot.canary import resume
from specpilot.tuning import tournament_state
from specpilot.tuning.state import same_drafter


@dataclass(frozen=True)
class TrackPlan:
    """The N each track should run. The tuning loop decides it through status.tuning (stableN, canaryN);
    without tuning, stable runs spec N and there is no canary."""

    stable_n: int | None
    canary_n: int | None
    stable_schedule: tuple[tuple[int, ...], ...] | None = None  # [lo, hi, K] rows (schedule mode)
    canary_schedule: tuple[tuple[int, ...], ...] | None = None
    # Contender each track runs (0: spec.speculative, i: spec.tuning.alternatives[i - 1]); the method tournament
    # writes them to status.tournament (None: the stable's).
    stable_contender: int = 0
    canary_contender: int | None = None
    # Switchback (spec.tuning.measure): what the `<name>-live` ConfigMap holds, the stable's arm and, while a
    # canary runs as one, the canary's; None when the stable pods follow no live.json.
    live: LiveConfig | None = None
    # The canary is the second arm of `live`, in the stable's pods: no canary Deployment.
    canary_live: bool = False
    # Static pods under switchback (no table, no live.json): the canary is the tuner's table check; the
    # stable fell back to them (status.tuning canaryStatic, stableStatic).
    stable_static: bool = False
    canary_static: bool = False

    @property
    def canary_pods_n(self) -> int | None:
        """The N a canary Deployment runs, if there is one."""
        return None if self.canary_live else self.canary_n


def _rows(value: Any) -> tuple[tuple[int, ...], ...] | None:
    return tuple(tuple(row) for row in value) if value else None


def plan_from(tuning_enabled: bool, status: dict[str, Any]) -> TrackPlan:
    """The plan status.tuning and status.tournament ask for, as written (plan_tracks checks them against the
    spec); a method canary of the tournament is the canary track."""
    tuning = status.get("tuning") or {}
    if not tuning_enabled:
        return TrackPlan(None, None)
    canary_n = tuning.get("canaryN")
    plan = TrackPlan(tuning.get("stableN"), canary_n, _rows(tuning.get("stableSchedule")),
                     _rows(tuning.get("canarySchedule")) if canary_n is not None else None,
                     stable_static=tuning.get("stableStatic") is True,
                     canary_static=canary_n is not None and tuning.get("canaryStatic") is True)
    tour = status.get("tournament")
    if not isinstance(tour, dict):
        return plan
    plan = dataclasses.replace(plan, stable_contender=tour.get("stable", 0))
    if tour.get("canary") is None:
        return plan
    return dataclasses.replace(plan, canary_n=tour.get("canaryN"), canary_schedule=None,
                               canary_contender=tour["canary"], canary_static=False)


def plan_tracks(sd: SpeculativeDeployment, status: dict[str, Any]) -> TrackPlan:
    """A status.tuning the tuner did not write renders as spec N without a canary, as the tuning loop restarts
    from it (canary/resume.py); the loop reports it. With alternatives, status.tournament (read back only
    when it is the tournament's own, for these contenders) says which contender each track runs: a method
    canary is its canary."""
    if not sd.spec.tuning.enabled:
        return TrackPlan(None, None)
    tour = tournament_state.Tournament.from_status(status.get("tournament"), tournament_state.contenders_of(sd.spec))
    stable = sd.for_contender(tour.stable)
    tuning = status.get("tuning")
    if resume.problem(tuning, stable) is not None \
            or isinstance(tuning, dict) and resume.track_problem(tuning) is not None:
        return with_arms(stable, TrackPlan(None, None))
    speculative = stable.spec.speculative
    if isinstance(tuning, dict) and tuning.get("method") is not None \
            and not same_drafter(tuning, speculative.method, speculative.block_size):
        # The tuner's state is another drafter's (the spec's method or block size was edited, or a tournament
        # restarted): its N are not this drafter's; the loop restarts from spec N.
        return with_arms(stable, TrackPlan(None, None, stable_contender=tour.stable))
    plan = plan_from(True, {"tuning": tuning})
    if tour.canary is not None:
        plan = dataclasses.replace(plan, canary_n=tour.canary_n, canary_schedule=None, canary_contender=tour.canary,
                                   canary_static=False)
    return with_arms(stable, dataclasses.replace(plan, stable_contender=tour.stable))


def with_arms(stable: SpeculativeDeployment, plan: TrackPlan) -> TrackPlan:
    """Under switchback, the arms the stable pods serve: the stable's N (or schedule) and a canary of the same
    drafter at or under the largest candidate (the tuner's `tuning.switchback.live_arm` says the same); an
    N the pods were not started for restarts them, with no live.json. Static stable pods follow none."""
    if not measured_live(stable) or plan.stable_static:
        return plan
    s = stable.spec.speculative
    stable_arm = _arm(s.num_speculative_tokens if plan.stable_n is None else plan.stable_n, plan.stable_schedule,
                      started_n(stable))
    if stable_arm is None:
        return plan
    arms = [stable_arm]
    if plan.canary_n is not None and plan.canary_contender is None and not plan.canary_static:
        canary_arm = _arm(plan.canary_n, plan.canary_schedule,
                          top_candidate(s.method, s.block_size, stable.spec.tuning.candidates))
        if canary_arm is not None and canary_arm != stable_arm:
            arms.append(canary_arm)
    name = f"{stable.metadata.get('namespace', '')}/{stable.metadata.get('name', '')}"
    dwell = dwell_range(duration_seconds(stable.spec.tuning.canary.analysis_window))
    return dataclasses.replace(plan, live=LiveConfig(tuple(arms), dwell, seed=zlib.crc32(name.encode())),
                               canary_live=len(arms) > 1)


def _arm(n: int, schedule: tuple[tuple[int, ...], ...] | None, top: int) -> Arm | None:
    """N (or its schedule) as a table the pods started at `top` serve; None above it."""
    if n > top or any(row[2] > top for row in schedule or ()):
        return None
    if not schedule:
        return Arm.uniform(n)
    return Arm(tuple((int(lo), int(hi), int(k)) for lo, hi, k in schedule))
