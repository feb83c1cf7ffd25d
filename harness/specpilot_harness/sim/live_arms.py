"""Draft length set live in the simulated engine: the live.json it follows and the arm each step serves.

The contract is the runtime's (`specpilot_runtime.live`): the engine reads live.json, serves one arm (a
batch-size table) or alternates between arms on an `ArmClock`, and counts every step per arm and band in a
`SwitchbackCounters`. Times here are engine-clock seconds; the arm clock and the counters' step seconds run
in wall seconds (engine seconds / time scale), as a real engine's would, so the dwell times live.json asks
for mean the same to a simulated pod as to a vLLM one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from specpilot_runtime.live import MAX_LIVE_BYTES, Arm, ArmClock, LiveConfig, SwitchbackCounters

MAX_REFUSALS_REMEMBERED = 64  # refused contents kept to log each once; bounded whatever is written


@dataclass
class LiveArms:
    """The arm in force when, what the previous step was scheduled under, and the switchback counters."""

    # What the engine started with (its batch-size table, or N at every batch size): served until a
    # live.json is accepted, as vLLM keeps its started table until the file says otherwise.
    started: Arm
    time_scale: float = 1.0
    config: LiveConfig | None = None
    counters: SwitchbackCounters = field(default_factory=SwitchbackCounters)
    rejected: int = 0  # live.json contents refused (live.LIVE_REJECTED)
    _refusals_logged: set[str] = field(default_factory=set)
    # The arm the step in flight was scheduled under; None when nothing is in flight (an idle engine).
    scheduled: Arm | None = None
    _clock: ArmClock | None = None

    @property
    def arms(self) -> tuple[Arm, ...]:
        return self.config.arms if self.config is not None else (self.started,)

    def follow(self, config: LiveConfig, now: float) -> bool:
        """Serve `config` from engine time `now` on, its arm clock started afresh; False when it is what is
        served already (a rewrite of the same file must not restart the cadence)."""
        if config == self.config:
            return False
        self.config, self._clock = config, ArmClock(config, now / self.time_scale)
        return True

    def arm_at(self, now: float) -> Arm:
        """The arm in force at engine time `now`."""
        if self.config is None or self._clock is None:
            return self.started
        return self.config.arms[self._clock.arm_at(now / self.time_scale)]

    def step_arms(self, now: float) -> tuple[Arm, Arm]:
        """(the arm a step starting at `now` counts under, the arm whose K it drafts). vLLM schedules a step
        while the previous one runs (async scheduling), so the first step after a switch was scheduled under
        the arm before it and drafts that arm's K; after an idle spell nothing was in flight."""
        arm = self.arm_at(now)
        drafts_under = self.scheduled or arm
        self.scheduled = arm
        return arm, drafts_under

    def first_refusal(self, data: bytes) -> bool:
        """Whether these refused contents are new: each is logged once, however often it is written."""
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._refusals_logged:
            return False
        if len(self._refusals_logged) >= MAX_REFUSALS_REMEMBERED:
            self._refusals_logged.clear()
        self._refusals_logged.add(digest)
        return True

    def record(self, arm: Arm, batch_size: int, engine_seconds: float, output_tokens: int, draft_tokens: int,
               accepted_tokens: int, finished: int) -> None:
        self.counters.record_step(arm.key, batch_size, engine_seconds / self.time_scale, output_tokens,
                                  draft_tokens, accepted_tokens, finished)


@dataclass
class LiveFile:
    """Polls live.json as an engine does: re-read only when its mtime or size changed, at most
    MAX_LIVE_BYTES + 1 bytes (enough for `parse_live` to refuse a larger one)."""

    path: Path
    _seen: tuple[int, int] | None = None

    def poll(self) -> bytes | None:
        """The file's bytes when it changed since the last poll; None when it did not, or is not there
        (a missing file leaves what is served alone, as a kubelet that cannot refresh a volume does)."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return None
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_LIVE_BYTES + 1)
        except OSError:
            return None
        self._seen = stamp
        return data


def started_arm(schedule: tuple[tuple[int, int, int], ...] | None, n: int) -> Arm:
    """The arm an engine started with: its batch-size table, or N at every batch size."""
    return Arm(tuple((lo, hi, k) for lo, hi, k in schedule)) if schedule else Arm.uniform(n)

