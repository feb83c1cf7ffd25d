"""`status.tuning` read back: the tuner's own state, or, when it was edited (or damaged) into something the
tuner never writes, a fresh tuner at spec N and one line saying what was wrong. Pure: no I/O.

Anyone allowed to write the status subresource can put anything there; the tuner must neither crash on it
every window nor render a track from it (canary/tracks.py asks `problem` too).

It lives with the canary because both read it: the tuning loop (controller/tuning/loop.py) to resume, and
the canary's track plan, which sits below the controller, to refuse rendering a track from it."""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

from specpilot.api.models import SpeculativeDeployment
from specpilot.render.engine import engine_config
from specpilot.tuning import TunerState
from specpilot.tuning.kinds import CANARY_PHASES, ActionKind, Phase
from specpilot.tuning.machine import LOADS_KEPT, candidates
from specpilot.tuning.state import resumable

INVALID_STATE = "TuningStateInvalid"
_OPTIONAL_INTS = ("analysisFromSeq", "convergedSeq", "warmupUntil")
_OPTIONAL_OBJECTS = ("reference", "schedule")
_SCHEDULES = (("stableSchedule", "stableN"), ("canarySchedule", "canaryN"))
# As spec.speculative.schedule: vLLM's table is short, and status must stay small.
MAX_SCHEDULE_ROWS = 16


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_problem(tuning: dict[str, Any]) -> str | None:
    """What from_status would take on trust: types it does not convert and values it does not check."""
    if tuning.get("phase") not in tuple(Phase):
        return f"phase {tuning.get('phase')!r} is not one of {', '.join(Phase)}"
    for key in ("stableN", "round", "seq"):
        if not _int(tuning.get(key)) or tuning[key] < 0:
            return f"{key} {tuning.get(key)!r} is not a whole number >= 0"
    found = track_problem(tuning)
    if found:
        return found
    if tuning["phase"] in CANARY_PHASES and tuning.get("canaryN") is None:
        return f"phase {tuning['phase']} has no canaryN"
    for key in _OPTIONAL_INTS:
        if tuning.get(key) is not None and not _int(tuning[key]):
            return f"{key} {tuning[key]!r} is not a whole number"
    for key in _OPTIONAL_OBJECTS:
        if tuning.get(key) is not None and not isinstance(tuning[key], dict):
            return f"{key} is not an object"
    if tuning.get("convergedAt") is not None and not isinstance(tuning["convergedAt"], Real):
        return f"convergedAt {tuning['convergedAt']!r} is not a number"
    for key in ("tried", "probed", "records", "pairs", "carried", "history"):
        if not isinstance(tuning.get(key, []), list):
            return f"{key} is not a list"
    loads = tuning.get("convergedLoads")
    if loads is not None and not (isinstance(loads, list) and len(loads) <= LOADS_KEPT and all(
            isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) and b >= 1 for b in loads)):
        return f"convergedLoads is not a list of at most {LOADS_KEPT} loads (finite numbers >= 1)"
    for key in ("carried", "history"):
        if not all(isinstance(entry, dict) for entry in tuning.get(key, [])):
            return f"{key} holds something other than objects"
    for entry in tuning.get("carried", []):
        found = _schedule_shape("carried schedule", entry.get("schedule"))
        if found:
            return found
    return None


def track_problem(tuning: dict[str, Any]) -> str | None:
    """What makes the N and schedules `status.tuning` asks the tracks to run unreadable, whoever wrote it: the
    reconciler renders them as written (`canary.tracks.plan_tracks`, the tuning loop's seam), and a schedule of
    5 raised out of every reconcile until the loop next wrote the status."""
    for key in ("stableN", "canaryN"):
        if tuning.get(key) is not None and (not _int(tuning[key]) or tuning[key] < 0):
            return f"{key} {tuning[key]!r} is not a whole number >= 0"
    for key, _ in _SCHEDULES:
        found = _schedule_shape(key, tuning.get(key))
        if found:
            return found
    return None


def _schedule_shape(key: str, rows: Any) -> str | None:
    if rows is None:
        return None
    if not isinstance(rows, list) or len(rows) > MAX_SCHEDULE_ROWS:
        return f"{key} is not a list of at most {MAX_SCHEDULE_ROWS} rows"
    if not all(isinstance(r, list) and len(r) == 3 and all(_int(x) and x >= 0 for x in r) for r in rows):
        return f"{key} holds a row other than [minBatchSize, maxBatchSize, N] whole numbers"
    return None


def problem(tuning: Any, sd: SpeculativeDeployment) -> str | None:
    """Why `status.tuning` cannot be resumed; None when it is absent, the tuner's own, or for another
    method or state version (those restart quietly, as a method change does)."""
    if tuning is None:
        return None
    if not isinstance(tuning, dict):
        return f"status.tuning is a {type(tuning).__name__}, not an object"
    spec = sd.spec.speculative
    if not resumable(tuning, spec.method, spec.block_size):
        # Another drafter's state restarts quietly; a seam write naming no method is rendered as written
        # (canary.tracks.plan_tracks), so its N too must be ones the spec allows.
        return candidate_problem(tuning, sd) if tuning.get("method") is None else None
    found = _shape_problem(tuning)
    if found:
        return found
    try:
        TunerState.from_status(tuning, method=spec.method, stable_n=spec.num_speculative_tokens,
                               block_size=spec.block_size)
    except KeyError as exc:  # top level or inside a record: the message names the key either way
        return f"cannot be read: no {exc.args[0]!r}"
    except (TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        return f"cannot be read: {exc}"
    for schedule_key, key in _SCHEDULES:
        if tuning.get(key) is not None:
            try:
                engine_config(sd, tuning[key], tuning.get(schedule_key))
            except ValueError as exc:
                return f"{key} {tuning[key]} cannot run: {exc}"
    for entry in tuning.get("carried", []):  # a retry would render it
        try:
            engine_config(sd, entry["n"], entry.get("schedule"))
        except ValueError as exc:
            return f"carried N={entry['n']} cannot run: {exc}"
    return candidate_problem(tuning, sd)


def allowed_n(sd: SpeculativeDeployment) -> list[int]:
    """The N the tuner may give a track of `sd` (the contender's deployment, `for_contender`): its candidates
    within the method's limit, else the method's range (`machine.candidates`, what the tuner picks from)."""
    spec = sd.spec.speculative
    return candidates(TunerState.new(spec.method, spec.num_speculative_tokens, spec.block_size), sd.spec.tuning)


def _listed(ns: list[int]) -> str:
    if len(ns) > 2 and ns == list(range(ns[0], ns[-1] + 1)):
        return f"{ns[0]}..{ns[-1]}"
    return ", ".join(map(str, ns))


def candidate_problem(tuning: dict[str, Any], sd: SpeculativeDeployment) -> str | None:
    """An N or a schedule's K in `status.tuning` that the tuner never serves: it runs spec N (where it starts,
    and where a hand-set spec N restarts it) or an N of `allowed_n`, and schedules of candidate K. A status
    patched to `stableN: 11, phase: converged` moved the pods to N=11 and was held as converged. Values that
    are not whole numbers are left to `track_problem`."""
    allowed = allowed_n(sd)
    stable = sorted({*allowed, sd.spec.speculative.num_speculative_tokens})
    for key, ns in (("stableN", stable), ("canaryN", allowed)):
        n = tuning.get(key)
        if _int(n) and n not in ns:
            return f"{key} {n} is not among the N the spec allows ({_listed(ns)})"
    for key, ns in (("stableSchedule", stable), ("canarySchedule", allowed)):
        rows = tuning.get(key)
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, list) and len(row) == 3 and _int(row[2]) and row[2] not in ns:
                return f"{key} K={row[2]} is not among the N the spec allows ({_listed(ns)})"
    return None


def resume(tuning: Any, sd: SpeculativeDeployment, now: float) -> tuple[TunerState, str | None]:
    """The tuner's state to step from, and what was wrong with `status.tuning` when it had to start over
    (a fresh tuner at spec N whose history says so)."""
    spec = sd.spec.speculative
    found = problem(tuning, sd)
    if found is None:
        return TunerState.from_status(tuning, method=spec.method, stable_n=spec.num_speculative_tokens,
                                      block_size=spec.block_size, now=now), None
    fresh = TunerState.new(spec.method, spec.num_speculative_tokens, spec.block_size, now)
    fresh.log({"time": now, "seq": 0, "round": fresh.round, "phase": fresh.phase, "action": ActionKind.RESET,
               "n": fresh.stable_n, "reason": f"status.tuning was not the tuner's ({found}): restarted from "
                                              f"spec N={fresh.stable_n}", "numbers": {}})
    return fresh, found
