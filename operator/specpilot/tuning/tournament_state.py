"""What the method tournament keeps between windows: the contenders, what is known of each, and the
stage of the running method canary, as `status.tournament` holds them (`tournament.py` decides).

Anyone who may write the status subresource can put anything there: what does not read back within the
bounds the tuner itself writes starts a new tournament.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Sequence

from specpilot.api.adaptive import contender_alternatives, wants_adaptive
from specpilot.api.models import SpeculativeDeploymentSpec, Tuning
from specpilot_runtime.speculative import DEFAULT_NGRAM_DRAFTER, OFF

from .constants import MAX_COUNTER, MAX_FAILURE, METHOD_CANARY_MAX_RECORDS, OPTION_LEN
from .observations import MAX_MAGNITUDE, MAX_N, WindowRecord
from .step_model import Pair

STATUS_VERSION = 1
MAX_OPTIONS = MAX_N + 1  # a loser's other N kept in the status (one per N it may run)


class Stage(StrEnum):
    IDLE = "idle"  # no method canary: the N tuner runs the stable track
    STARTING = "starting"
    ANALYSING = "analysing"
    ROLLING_BACK = "rolling_back"
    SWITCHING = "switching"  # the stable track rolls to the promoted contender


@dataclass(frozen=True)
class Contender:
    """One way to speculate, as the tuner needs it: the method, the N it runs first, its draft's block
    size and its own candidate N (empty: the spec's, else the method's range)."""

    method: str
    n: int
    block_size: int | None = None
    candidates: tuple[int, ...] = ()
    draft: str | None = None  # the draft checkpoint: two heads of one method are two contenders
    progress_deadline: str | None = None  # its canary's, when not spec.tuning.canary.progressDeadline
    adaptive: bool = False  # enable_adaptive_verification on: another contender than the same drafter without
    ngram_drafter: str = DEFAULT_NGRAM_DRAFTER  # speculative.ngramDrafter: specpilot's drafts otherwise than vLLM's

    @property
    def label(self) -> str:
        """How the status and messages name it: the method, marked when it verifies adaptively or runs a drafter
        of specpilot's (ngram+confidence)."""
        drafter = "" if self.ngram_drafter == DEFAULT_NGRAM_DRAFTER else f"+{self.ngram_drafter}"
        return (f"{self.method}+adaptive" if self.adaptive else self.method) + drafter

    def tuning(self, tuning: Tuning) -> Tuning:
        """The spec the N tuner sees while this contender is the stable's."""
        if self.method == OFF:
            return tuning.model_copy(update={"candidates": [0]})
        return tuning.model_copy(update={"candidates": list(self.candidates)}) if self.candidates else tuning

    def key(self) -> str:
        key = f"{self.method}:{self.n}:{self.block_size}:{','.join(map(str, self.candidates))}:{self.draft or ''}"
        key += ":adaptive" if self.adaptive else ""  # unchanged without these: running tournaments resume
        return key + ("" if self.ngram_drafter == DEFAULT_NGRAM_DRAFTER else f":{self.ngram_drafter}")


@dataclass
class Entry:
    """What is known of one contender. Goodputs are relative to the tournament's starting configuration."""

    measured_n: int | None = None  # N its last canary (or stable track) ran at; None: never measured
    gain: float | None = None  # measured goodput against the stable of the time (posterior mean)
    lower: float | None = None
    upper: float | None = None
    accepted_length: float | None = None  # mean accepted tokens per step at measured_n
    best_n: int | None = None  # the N expected to do best, from what was measured
    expected: float | None = None  # expected goodput at best_n
    sd: float | None = None  # its uncertainty (1 sd, same units)
    retried: bool = False  # had its second canary
    failure: str | None = None  # why its canary measured nothing (never Ready, unhealthy): not tried again
    # Every other N it could run: (N, expected goodput, sd), what a second canary is chosen from.
    options: list[tuple[int, float, float]] = field(default_factory=list)
    # Its windows and its step times against N = 0, for its N tuner should it be promoted later, so that
    # tuner does not canary again an N this contender already measured worse.
    records: list[WindowRecord] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def num(v: float | None) -> float | None:
            return v if v is not None and math.isfinite(v) else None  # a bound with nothing measured is infinite

        return {"measuredN": self.measured_n, "gain": num(self.gain), "lower": num(self.lower),
                "upper": num(self.upper), "acceptedLength": num(self.accepted_length), "bestN": self.best_n,
                "expected": num(self.expected), "sd": num(self.sd), "retried": self.retried, "failure": self.failure,
                "options": [list(o) for o in self.options], "records": [r.to_json() for r in self.records],
                "pairs": [p.to_json() for p in self.pairs]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Entry":
        def num(k: str) -> float | None:
            v = d.get(k)
            return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

        def whole(k: str) -> int | None:
            v = d.get(k)
            return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

        failure = d.get("failure")
        return cls(whole("measuredN"), num("gain"), num("lower"), num("upper"), num("acceptedLength"),
                   whole("bestN"), num("expected"), num("sd"), bool(d.get("retried")),
                   failure[:MAX_FAILURE] if isinstance(failure, str) else None, _options(d.get("options")),
                   [WindowRecord.from_json(r) for r in d.get("records", [])[-METHOD_CANARY_MAX_RECORDS:]],
                   [Pair.from_json(p) for p in d.get("pairs", [])[-METHOD_CANARY_MAX_RECORDS:]])


def _options(value: Any) -> list[tuple[int, float, float]]:
    """A loser's options as the status holds them; anything else (hand-written, corrupted) is dropped."""
    out = []
    for o in value[:MAX_OPTIONS] if isinstance(value, list) else []:
        if isinstance(o, list) and len(o) == OPTION_LEN and _index(o[0], MAX_OPTIONS) \
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in o[1:]) \
                and 0 < o[1] <= MAX_MAGNITUDE and 0 <= o[2] <= MAX_MAGNITUDE:
            out.append((int(o[0]), float(o[1]), float(o[2])))
    return out


@dataclass
class Tournament:
    key: str  # the contenders it was run for: another list starts a new tournament
    entries: list[Entry]
    stable: int = 0  # contender the stable track runs
    stage: Stage = Stage.IDLE
    canary: int | None = None  # contender of the running method canary
    canary_n: int | None = None
    stage_since: float = 0.0
    analysis_from_seq: int | None = None
    scale: float = 1.0  # the stable's goodput relative to the starting configuration (measured gains)
    canaries: int = 0  # method canaries started
    records: list[WindowRecord] = field(default_factory=list)  # the running method canary's windows
    probed_off: bool = False  # N = 0 was canaried (once per tournament, whatever came of it)

    @classmethod
    def new(cls, contenders: Sequence[Contender], now: float = 0.0) -> "Tournament":
        return cls(key=_key(contenders), entries=[Entry() for _ in contenders], stage_since=now)

    @classmethod
    def from_status(cls, status: dict[str, Any] | None, contenders: Sequence[Contender],
                    now: float = 0.0) -> "Tournament":
        """Resume from `status.tournament`; start afresh when it is absent, unreadable or for other contenders."""
        s = status if isinstance(status, dict) else {}
        if s.get("version") != STATUS_VERSION or s.get("key") != _key(contenders):
            return cls.new(contenders, now)
        # Anyone who may write the status subresource can put anything here: what does not read back as
        # the tournament's own state starts a new one.
        try:
            entries = [Entry.from_json(e) for e in s["entries"]]
            stable, canary, canary_n = s["stable"], s.get("canary"), s.get("canaryN")
            if len(entries) != len(contenders) or not _index(stable, len(contenders)) \
                    or (canary is not None and not (_index(canary, len(contenders)) and _index(canary_n, MAX_N + 1))):
                return cls.new(contenders, now)
            scale, stage_since = float(s.get("scale", 1.0)), float(s.get("stageSince", now))
            since = s.get("analysisFromSeq")
            # An infinite stageSince would hold a method canary past its progressDeadline for ever.
            stage, canaries = Stage(s.get("stage", Stage.IDLE)), s.get("canaries", 0)
            if not (1.0 / MAX_MAGNITUDE <= scale <= MAX_MAGNITUDE and math.isfinite(stage_since)) \
                    or not (since is None or _index(since, MAX_COUNTER)) or not _index(canaries, MAX_COUNTER) \
                    or (stage in (Stage.STARTING, Stage.ANALYSING) and canary is None):
                return cls.new(contenders, now)
            return cls(key=s["key"], entries=entries, stable=stable, stage=stage,
                       canary=canary, canary_n=canary_n if canary is not None else None,
                       stage_since=stage_since, analysis_from_seq=since,
                       scale=scale, canaries=canaries,
                       records=[WindowRecord.from_json(r) for r in s.get("records", [])][-METHOD_CANARY_MAX_RECORDS:],
                       probed_off=bool(s.get("probedOff")))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
            return cls.new(contenders, now)

    def to_status(self) -> dict[str, Any]:
        return {"version": STATUS_VERSION, "key": self.key, "stable": self.stable, "stage": self.stage,
                "canary": self.canary, "canaryN": self.canary_n, "stageSince": self.stage_since,
                "analysisFromSeq": self.analysis_from_seq, "scale": self.scale, "canaries": self.canaries,
                "probedOff": self.probed_off,
                "entries": [e.to_json() for e in self.entries], "records": [r.to_json() for r in self.records]}

    def copy(self) -> "Tournament":
        return copy.deepcopy(self)

    def enter(self, stage: Stage, now: float) -> None:
        self.stage = stage
        self.stage_since = now


def contenders_of(spec: SpeculativeDeploymentSpec) -> list[Contender]:
    """spec.speculative (contender 0) and spec.tuning.alternatives (1, 2, ...), then the implicit
    adaptive-verification contender if any, as the tuner sees them."""
    ways = [(spec.speculative, spec.tuning.candidates, None),
            *((a, a.candidates or spec.tuning.candidates, a.progress_deadline) for a in contender_alternatives(spec))]
    return [Contender(s.method, s.num_speculative_tokens, s.block_size, tuple(sorted(set(c or ()))), s.draft_model,
                      deadline, wants_adaptive(s), s.ngram_drafter) for s, c, deadline in ways]


def _index(value: Any, size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def _key(contenders: Sequence[Contender]) -> str:
    return "|".join(c.key() for c in contenders)
