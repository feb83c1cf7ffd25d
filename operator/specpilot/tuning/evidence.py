"""An unproven canary's paired windows, carried into one second canary of the same N in a later round.

A canary (an N, or in schedule mode a started N and its batch-size schedule) measured better than the
stable by the margin, yet not proven in its EXTEND x windows, is rolled
back as inconclusive; the round's budget rarely lets it run again, and the next rounds' planner sees the
same numbers and the same budget. In a long-running deployment the tuner would leave that gain unproven
for good (docs/benchmark.md, "Why the tuner's rules and constants are what they are").

So its paired windows (canary and stable records of the same windows) stay in the status. After the
cooldown a new round canaries that N again, first, and the judge pools both canaries' windows against the
same stable N with a stricter promotion boundary (`judge.judge`'s `carried`): the retry's looks are more
chances for noise to cross it. Once per (stable N, canary): the retry's verdict ends the evidence, whatever
it is. Promotion (another stable N) and acceptance drift (stale numbers) drop all of it.

A canary the judge proved and the tuner rolled back as a probe (for a neighbour, or a schedule, expected
better still: machine._probe) leaves its windows the same way, marked proven: when what it pointed to is
not promoted in that round, the next round starts with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .constants import MAX_CARRIED, MAX_CARRIED_PAIRS
from .observations import WindowRecord, finite, whole_n
from .schedule import rows_from_json, schedule_text


@dataclass(frozen=True)
class Evidence:
    n: int  # the canary's N
    stable_n: int  # the stable N it was measured against
    round: int  # the round that measured it: it is retried in a later one
    gain: float  # its measured gain over the stable at the rollback (relative)
    records: tuple[WindowRecord, ...]  # its paired windows: the stable's and the canary's records
    retried: bool = False  # its second canary has started
    schedule: list[list[int]] | None = None  # the canary's batch-size schedule under N (None: N throughout)
    proven: bool = False  # the judge had proven it, and it was rolled back as a probe (machine._probe)

    @property
    def pairs(self) -> int:
        return sum(r.track == "canary" for r in self.records)

    def describe(self) -> str:
        what = f"N={self.n} schedule {schedule_text(self.schedule)}" if self.schedule else f"N={self.n}"
        how = "proven, then rolled back as a probe" if self.proven else "unproven"
        return f"{what} measured {self.gain:+.1%} over N={self.stable_n} in {self.pairs} windows, {how}"

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "stableN": self.stable_n, "round": self.round, "gain": round(self.gain, 6),
                "retried": self.retried, "schedule": self.schedule, "proven": self.proven,
                "records": [r.to_json() for r in self.records]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Evidence":
        """Evidence read back from a status: ValueError (naming the field) for what the tuner never writes."""
        records = d["records"]
        if not isinstance(records, list) or len(records) > 2 * MAX_CARRIED_PAIRS:
            raise ValueError(f"carried records is not a list of at most {2 * MAX_CARRIED_PAIRS} records")
        round_ = d["round"]
        if not isinstance(round_, int) or isinstance(round_, bool) or round_ < 1:
            raise ValueError(f"carried round {round_!r} is not a whole number >= 1")
        return cls(n=whole_n(d["n"], "carried n"), stable_n=whole_n(d["stableN"], "carried stableN"),
                   round=round_, gain=finite(d["gain"], "carried gain", -1.0), retried=d["retried"] is True,
                   records=tuple(WindowRecord.from_json(r) for r in records), schedule=rows_from_json(d.get("schedule")),
                   proven=d.get("proven") is True)


def measured(n: int, schedule: list[list[int]] | None, stable_n: int, round_: int, gain: float,
             pairs: Sequence[tuple[WindowRecord, WindowRecord]], proven: bool = False) -> Evidence:
    """Evidence from a canary's paired windows (stable record, canary record), the latest kept."""
    kept = list(pairs)[-MAX_CARRIED_PAIRS:]
    return Evidence(n, stable_n, round_, gain, tuple(r for pair in kept for r in pair), schedule=schedule,
                    proven=proven)


def keep(carried: Sequence[Evidence], new: Evidence) -> list[Evidence]:
    """`carried` with `new` in place of any evidence for the same stable N and canary; the best MAX_CARRIED."""
    rest = [e for e in carried if (e.stable_n, e.n, e.schedule) != (new.stable_n, new.n, new.schedule)]
    return sorted(rest + [new], key=lambda e: -e.gain)[:MAX_CARRIED]


def pending(carried: Sequence[Evidence], stable_n: int, before_round: int) -> Evidence | None:
    """The best evidence against `stable_n` not retried yet, measured before round `before_round`."""
    due = [e for e in carried if e.stable_n == stable_n and not e.retried and e.round < before_round]
    return max(due, key=lambda e: e.gain, default=None)


def running(carried: Sequence[Evidence], stable_n: int, canary_n: int | None,
            canary_schedule: list[list[int]] | None) -> Evidence | None:
    """The evidence the running canary (`canary_n` serving `canary_schedule`) pools, if it is a retry."""
    return next((e for e in carried if e.retried and e.stable_n == stable_n and e.n == canary_n
                 and e.schedule == canary_schedule), None)
