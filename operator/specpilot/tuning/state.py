"""The tuner's whole state as plain JSON: what `status.tuning` holds, so a restart resumes exactly.

Everything the decisions depend on is here (phase, stable and canary N, the round's budget, the window
records the survival curves are pooled from, the paired step times the step-time model is fitted to, the drift reference,
the decision history); nothing is cached outside it. Lists are bounded so the status stays small.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from . import drift
from .constants import ANALYSIS_KEPT as ANALYSIS_KEPT  # noqa: F401 - tests and the controller import it here
from .bands import BandRecord
from .constants import (LOADS_KEPT, MAX_BAND_RECORDS, MAX_CARRIED, MAX_HISTORY, MAX_N, MAX_NOTE, MAX_PAIRS,
                        MAX_RECORDS)
from .evidence import Evidence
from .kinds import Phase
from .observations import MAX_LOAD, WindowRecord, finite, whole, whole_n
from .schedule import rows_from_json
from .step_model import Pair

STATE_VERSION = 2


@dataclass
class TunerState:
    method: str
    stable_n: int
    block_size: int | None = None
    phase: Phase = Phase.OBSERVING
    canary_n: int | None = None
    round: int = 1
    canaries_in_round: int = 0
    windows_in_round: int = 0
    tried: list[int] = field(default_factory=list)  # canaries against the current stable N, in order
    probed: list[int] = field(default_factory=list)  # canaries rolled back as probes against the current stable N
    # N measured worse than the current stable N this round (the one it replaced; canaries rolled back measuring
    # below it): the planner skips every N beyond them (planner.bracketed).
    worse: list[int] = field(default_factory=list)
    seq: int = 0  # windows seen, ever
    phase_since: float = 0.0  # time the phase was entered
    analysis_from_seq: int | None = None  # first window of the running canary's analysis
    warmup_until: int | None = None  # the latest window that analysis may start at, warm-up dropped (warmup.py)
    records: list[WindowRecord] = field(default_factory=list)  # current acceptance regime only
    pairs: list[Pair] = field(default_factory=list)
    reference: dict[str, float] | None = None  # stable's numbers at convergence, for drift
    converged_at: float | None = None
    converged_seq: int | None = None
    converged_loads: list[float] | None = None  # the load mix the round converged on (sequences per pod)
    schedule: dict[str, Any] | None = None  # the latest schedule proposal (schedule mode)
    # Batch-size schedules ([lo, hi, K] rows, vLLM's num_speculative_tokens_per_batch_size) the tracks serve;
    # None: the track drafts its N at every batch size.
    stable_schedule: list[list[int]] | None = None
    canary_schedule: list[list[int]] | None = None
    schedule_tried: bool = False  # a schedule canary ran this round (one per round)
    near_tie: str | None = None  # at convergence: the better N whose gain is inside the margin, said not paid
    # Unproven canaries' paired windows, for one retry each in a later round (evidence.py).
    carried: list[Evidence] = field(default_factory=list)
    # The round's switchback arms' per-band records, both arms of every analysed window (schedule mode,
    # bands.py); a new round starts without them.
    band_records: list[BandRecord] = field(default_factory=list)
    # The table check (rules/table_check.py): the running canary is static pods (no batch-size table) at the
    # K in force; the stable fell back to static pods, a check having proven the table costs more than
    # switching gains (no live arm from then on); the stable configuration a check kept the table for.
    canary_static: bool = False
    stable_static: bool = False
    table_kept: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def new(cls, method: str, stable_n: int, block_size: int | None = None, now: float = 0.0) -> "TunerState":
        return cls(method=method, stable_n=stable_n, block_size=block_size, phase_since=now)

    @classmethod
    def from_status(cls, status: dict[str, Any] | None, *, method: str, stable_n: int,
                    block_size: int | None = None, now: float = 0.0) -> "TunerState":
        """Resume from `status.tuning`; start fresh when it is empty or another drafter's (`resumable`)."""
        if not resumable(status, method, block_size):
            return cls.new(method, stable_n, block_size, now)
        s = status
        carried = s.get("carried", [])
        if not isinstance(carried, list) or len(carried) > MAX_CARRIED:
            raise ValueError(f"carried is not a list of at most {MAX_CARRIED} pieces of evidence")
        converged_at = s.get("convergedAt")
        block_size = s.get("blockSize", block_size)
        near_tie = s.get("nearTie")
        if not (near_tie is None or isinstance(near_tie, str) and len(near_tie) <= MAX_NOTE):
            raise ValueError(f"nearTie is not a note of at most {MAX_NOTE} characters")
        return cls(
            method=s["method"], stable_n=whole(s["stableN"], "stableN"),
            block_size=None if block_size is None else whole_n(block_size, "blockSize"),
            phase=Phase(s["phase"]), canary_n=s.get("canaryN"), round=whole(s["round"], "round"),
            canaries_in_round=whole(s["canariesInRound"], "canariesInRound"),
            windows_in_round=whole(s["windowsInRound"], "windowsInRound"),
            tried=[whole_n(n, "tried N") for n in s.get("tried", [])],
            probed=[whole_n(n, "probed N") for n in s.get("probed", [])],
            worse=[whole_n(n, "worse N") for n in s.get("worse", [])[:MAX_N + 1]],
            seq=whole(s["seq"], "seq"),
            phase_since=finite(s["phaseSince"], "phaseSince"), analysis_from_seq=s.get("analysisFromSeq"),
            warmup_until=None if s.get("warmupUntil") is None else whole(s["warmupUntil"], "warmupUntil"),
            # A status written by someone else may hold more than the tuner ever keeps: what it keeps is read.
            records=[WindowRecord.from_json(r) for r in s.get("records", [])[-MAX_RECORDS:]],
            pairs=[Pair.from_json(p) for p in s.get("pairs", [])[-MAX_PAIRS:]],
            reference=drift.reference_from_json(s.get("reference")),
            converged_at=None if converged_at is None else finite(converged_at, "convergedAt"),
            converged_seq=s.get("convergedSeq"),
            converged_loads=None if s.get("convergedLoads") is None
            else [finite(b, "convergedLoads", 1.0, MAX_LOAD) for b in s["convergedLoads"][:MAX_RECORDS]],
            schedule=s.get("schedule"), stable_schedule=rows_from_json(s.get("stableSchedule")),
            canary_schedule=rows_from_json(s.get("canarySchedule")), schedule_tried=bool(s.get("scheduleTried")),
            near_tie=near_tie, carried=[Evidence.from_json(e) for e in carried],
            band_records=[BandRecord.from_json(r) for r in s.get("bandRecords", [])[-MAX_BAND_RECORDS:]],
            canary_static=s.get("canaryStatic") is True, stable_static=s.get("stableStatic") is True,
            table_kept=_table_kept(s.get("tableKept")),
            history=list(s.get("history", [])[-MAX_HISTORY:]))

    def to_status(self) -> dict[str, Any]:
        """Plain JSON for `status.tuning` (camelCase like the rest of the status)."""
        return {
            "version": STATE_VERSION, "method": self.method, "stableN": self.stable_n,
            "blockSize": self.block_size, "phase": self.phase, "canaryN": self.canary_n,
            "round": self.round, "canariesInRound": self.canaries_in_round,
            "windowsInRound": self.windows_in_round, "tried": list(self.tried), "probed": list(self.probed),
            "worse": list(self.worse),
            "seq": self.seq,
            "phaseSince": self.phase_since, "analysisFromSeq": self.analysis_from_seq,
            "warmupUntil": self.warmup_until,
            "records": [r.to_json() for r in self.records], "pairs": [p.to_json() for p in self.pairs],
            "reference": self.reference, "convergedAt": self.converged_at,
            "convergedSeq": self.converged_seq, "convergedLoads": self.converged_loads,
            "schedule": self.schedule, "stableSchedule": self.stable_schedule,
            "canarySchedule": self.canary_schedule, "scheduleTried": self.schedule_tried, "nearTie": self.near_tie,
            "carried": [e.to_json() for e in self.carried], "bandRecords": [r.to_json() for r in self.band_records],
            "canaryStatic": self.canary_static, "stableStatic": self.stable_static,
            "tableKept": copy.deepcopy(self.table_kept),
            "history": copy.deepcopy(self.history),
        }

    def copy(self) -> "TunerState":
        return copy.deepcopy(self)

    def enter(self, phase: Phase, now: float) -> None:
        self.phase = phase
        self.phase_since = now

    def add_record(self, r: WindowRecord) -> None:
        running = self.analysis_from_seq if self.canary_n is not None else None
        self.records = bounded(self.records + [r], running)

    def add_band_records(self, records: list[BandRecord]) -> None:
        self.band_records = (self.band_records + records)[-MAX_BAND_RECORDS:]

    def add_pair(self, p: Pair) -> None:
        self.pairs = (self.pairs + [p])[-MAX_PAIRS:]

    def log(self, entry: dict[str, Any]) -> None:
        self.history = (self.history + [entry])[-MAX_HISTORY:]


def table_key(n: int, schedule: list[list[int]] | None) -> dict[str, Any]:
    """The stable configuration a table check is for (`TunerState.table_kept`)."""
    return {"n": n, "schedule": copy.deepcopy(schedule)}


def _table_kept(value: Any) -> dict[str, Any] | None:
    """tableKept read back: None, or an N and a schedule as the tuner writes them."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("tableKept is not an object")
    return table_key(whole_n(value.get("n"), "tableKept N"), rows_from_json(value.get("schedule")))


def same_drafter(status: dict[str, Any], method: str, block_size: int | None) -> bool:
    """Whether `status` (status.tuning) was written for this method and draft block size (one naming no
    block size is taken as the spec's). Another block size bounds N differently (a block of 16 runs N up
    to 15, of 8 up to 7) and accepts differently, so its state restarts quietly, as another method's does:
    kept, its N canaries and promotions could run past what the spec's block allows."""
    return status.get("method") == method and status.get("blockSize", block_size) == block_size


def resumable(status: Any, method: str, block_size: int | None) -> TypeGuard[dict[str, Any]]:
    """Whether `status` is this drafter's tuner state, of this version."""
    return bool(status) and isinstance(status, dict) and status.get("version") == STATE_VERSION \
        and same_drafter(status, method, block_size)


def bounded(records: list[WindowRecord], running_from: int | None = None) -> list[WindowRecord]:
    """At most MAX_RECORDS records, dropping the oldest of the track and N with the most: the stable adds one
    every window, so dropping the oldest overall would forget what each canary measured within hours, and an
    N measured worse could be canaried again as unknown. The stable's latest LOADS_KEPT windows are the load
    mix and are never dropped. Drift resets the records.

    Nor is the running canary's analysis (both tracks' records from window `running_from`): it is the judge's
    evidence: dropped with the rest in a long-running deployment, it would never reach a verdict. Only an
    analysis longer than ANALYSIS_KEPT windows loses its oldest records (the judge then ends it:
    `judge.out_of_room`)."""
    records = list(records)
    while len(records) > MAX_RECORDS:
        stable = [i for i, r in enumerate(records) if r.track == "stable"]
        keep = set(stable[-LOADS_KEPT:])
        if running_from is not None:
            keep |= {i for i, r in enumerate(records) if r.seq >= running_from}
        groups = Counter((r.track, r.n) for i, r in enumerate(records) if i not in keep)
        if not groups:
            del records[0]
            continue
        largest = max(groups, key=lambda g: groups[g])
        del records[next(i for i, r in enumerate(records) if i not in keep and (r.track, r.n) == largest)]
    return records
