"""Draft length set live inside vLLM: the engine core follows live.json (live.py) without a restart.

vLLM's scheduler expands `num_speculative_tokens_per_batch_size` at start into a dense list,
`Scheduler.dynamic_sd_lookup` (batch size -> K), and reads it on every `schedule()` to choose the step's K.
Replacing that list changes K from the next step on: nothing else in vLLM caches it, and the workers get K
with each step's scheduler output. K lives in the scheduler, so this code runs where the scheduler does.

Hook: this module is a vLLM *general plugin* (entry-point group `vllm.general_plugins`, name
`specpilot_live`), which vLLM loads in every process it starts. `register` does nothing unless the runtime
set SPECPILOT_LIVE_FILE; then it wraps `Scheduler.__init__` (vllm.v1.core.sched.scheduler, the base of
vLLM's AsyncScheduler too) so that a scheduler, once built, gets a `LiveEngine`. Only the engine-core process
builds a scheduler, so only there does anything run. The LiveEngine wraps two methods of that one scheduler
object (not the class): `schedule`, where it installs the wanted arm's list and stamps the step with its arm
and start time, and `update_from_output`, where it counts the finished step. The list is swapped on the
scheduler's own thread between two steps, by replacing the list object (never mutating it), so every step
is attributed to the exact arm whose K it was scheduled with.

A daemon thread polls live.json (mtime, size and inode, every POLL_S; at most MAX_LIVE_BYTES + 1 bytes
read), parses it with `live.parse_live` under the started N, method and data-parallel size, and runs the
`ArmClock` that says which arm is wanted. A refused file is logged once per distinct content, naming the
field and why, counted in `live.LIVE_REJECTED`, and the engine keeps serving what it served; a missing
file leaves what is served alone (a kubelet that cannot refresh a volume), so until a live.json is
accepted the started table is served. Rewriting the same content does not restart the arm clock.

Per step (`SwitchbackCounters.record_step`):
- batch size: the requests scheduled in the step, `len(scheduler_output.num_scheduled_tokens)`, the index
  vLLM looks the step's K up with, so a step counts in the band whose K it drafted;
- seconds: wall time from the previous step's completion, when the engine still had requests then (the
  engine loop went straight on, so its overhead between steps is part of what a step costs, as it is of
  tokens per second), else from this step's `schedule()` call; to this step's `update_from_output`
  returning. Steps that overlap (async scheduling) then count their completion intervals, and the seconds
  of all steps add up to the engine's busy time, never its idle time;
- output tokens and finished requests: from the step's EngineCoreOutputs (what clients receive);
- drafted and accepted tokens: vLLM's own `SpecDecodingStats` of the step, the numbers its
  `vllm:spec_decode_*` counters add up (the runtime loads its stat-logger plugin with live on, which keeps
  vLLM's stats on).

The API server is another process (with vLLM's multiprocessing), and it serves /metrics: every STATE_S
the thread writes `live.exposition(...)` atomically (a temporary file renamed over) to SPECPILOT_LIVE_STATE,
and the runtime's stat-logger plugin (plugin.py) relays that file at scrape time. Text rather than the
counters' JSON, so the metric names and labels are written in one place (live.py) and the relay is dumb.

This module imports vLLM only inside `register`, so its logic runs (and is tested) without vLLM.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import live
from .files import FileProblem, read_bounded
from .speculative import served_method

# Under vLLM's logger, whose handler and level vLLM sets up in every process (ours has none there).
log = logging.getLogger("vllm.specpilot_live")

POLL_S = 1.0  # live.json: a ConfigMap volume refreshes in tens of seconds anyway
TICK_S = 0.05  # the arm clock, well under live.MIN_DWELL_S
STATE_S = 1.0  # the state file /metrics relays
# Steps stamped at schedule() and not yet counted; a step whose update never came (an engine error) is
# forgotten past this many, since at most a batch queue's few steps are in flight.
MAX_PENDING_STEPS = 64
# Refused contents remembered so that each is logged once; past this many they may be logged again.
MAX_REFUSALS_REMEMBERED = 256

# vLLM's build_dynamic_sd_schedule_lookup(table, vllm_max_batch_size, vllm_num_speculative_tokens).
LookupBuilder = Callable[..., list[int]]


@dataclass(frozen=True)
class Served:
    """An arm and the dense list vLLM's scheduler reads for it."""

    arm: live.Arm
    lookup: list[int]


@dataclass(frozen=True)
class StepCounts:
    """What one finished step delivered, read from update_from_output's result."""

    output_tokens: int
    draft_tokens: int
    accepted_tokens: int
    finished: int


def step_counts(engine_core_outputs: dict[int, Any]) -> StepCounts:
    tokens = drafted = accepted = finished = 0
    for eco in engine_core_outputs.values():
        for out in eco.outputs:
            tokens += len(out.new_token_ids)
            finished += out.finish_reason is not None
        stats = eco.scheduler_stats
        if stats is not None and stats.spec_decoding_stats is not None:
            drafted += stats.spec_decoding_stats.num_draft_tokens
            accepted += stats.spec_decoding_stats.num_accepted_tokens
    return StepCounts(tokens, drafted, accepted, finished)


def _started_table(spec: Any) -> live.Table | None:
    rows = getattr(spec, "num_speculative_tokens_per_batch_size", None) if spec is not None else None
    if not rows:
        return None
    return tuple(sorted((int(lo), int(hi), int(k)) for lo, hi, k in rows))


class LiveEngine:
    """Follows live.json for one vLLM scheduler: which arm it serves, and what each arm's steps did."""

    def __init__(self, scheduler: Any, live_file: Path, state_file: Path | None, build_lookup: LookupBuilder,
                 clock: Callable[[], float] = time.monotonic):
        config = scheduler.vllm_config
        spec = config.speculative_config
        table = _started_table(spec)
        if table is None:
            raise ValueError("the engine started without num_speculative_tokens_per_batch_size: vLLM keeps no "
                             "batch size -> K list to rewrite")
        self.scheduler = scheduler
        self.live_file = live_file
        self.state_file = state_file
        self.started_n: int = spec.num_speculative_tokens
        # vLLM's custom_class naming specpilot's n-gram drafter follows ngram's rules.
        self.method: str = served_method(spec.method, getattr(spec, "model", None))
        self.data_parallel: int = config.parallel_config.data_parallel_size
        self.max_batch: int = scheduler.scheduler_config.max_num_seqs
        self.bands = live.bands_up_to(self.max_batch)
        self._build_lookup = build_lookup
        self._clock = clock
        started = live.Arm(table)
        # What the scheduler built at start is the started arm's list: serving it again swaps nothing.
        self._installed = Served(started, scheduler.dynamic_sd_lookup)
        self._wanted = self._installed
        self._served: dict[live.Arm, Served] = {started: self._installed}
        self.config: live.LiveConfig | None = None
        self._arm_clock: live.ArmClock | None = None
        self.counters = live.SwitchbackCounters()
        self.rejected = 0
        self._refusals_logged: set[str] = set()
        self._seen: tuple[int, int, int] | None = None
        self._lock = threading.Lock()  # the counters: the scheduler's thread writes, ours reads
        self._pending: dict[int, tuple[float, str]] = {}
        self._last_done: float | None = None  # the previous step's completion, when work was left then
        self._counting = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def arms(self) -> tuple[live.Arm, ...]:
        return self.config.arms if self.config is not None else (self._installed.arm,)

    @property
    def in_force(self) -> live.Arm:
        """The arm the next step is scheduled with."""
        return self._wanted.arm

    # --- the scheduler's thread -------------------------------------------------------------------------

    def wrap(self) -> None:
        """Route this scheduler's schedule() and update_from_output() through the engine."""
        schedule, update = self.scheduler.schedule, self.scheduler.update_from_output

        @functools.wraps(schedule)
        def live_schedule(*args: Any, **kwargs: Any) -> Any:
            return self.on_schedule(schedule, *args, **kwargs)

        @functools.wraps(update)
        def live_update(scheduler_output: Any, model_runner_output: Any) -> Any:
            return self.on_update(update, scheduler_output, model_runner_output)

        self.scheduler.schedule = live_schedule
        self.scheduler.update_from_output = live_update

    def on_schedule(self, schedule: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        wanted = self._wanted
        if wanted is not self._installed:
            self.scheduler.dynamic_sd_lookup = wanted.lookup
            self._installed = wanted
        started = self._clock()
        out = schedule(*args, **kwargs)
        if out.num_scheduled_tokens:
            if len(self._pending) >= MAX_PENDING_STEPS:
                self._pending.clear()
            # The output object lives until its update, so its id names this step until then.
            self._pending[id(out)] = (started, wanted.arm.key)
        return out

    def on_update(self, update: Callable[[Any, Any], Any], scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = update(scheduler_output, model_runner_output)
        stamp = self._pending.pop(id(scheduler_output), None)
        if stamp is None or not self._counting or not scheduler_output.num_scheduled_tokens:
            return outputs
        try:
            self._count(stamp, len(scheduler_output.num_scheduled_tokens), step_counts(outputs))
        except Exception:  # a bookkeeping bug must not take the engine down: stop counting, keep serving
            log.exception("specpilot live: counting a step failed; switchback counters stop here")
            self._counting = False
        return outputs

    def _count(self, stamp: tuple[float, str], batch_size: int, counts: StepCounts) -> None:
        scheduled_at, arm_key = stamp
        now = self._clock()
        start = self._last_done if self._last_done is not None else scheduled_at
        self._last_done = now if self.scheduler.has_unfinished_requests() else None
        with self._lock:
            self.counters.record_step(arm_key, batch_size, max(0.0, now - start), counts.output_tokens,
                                      counts.draft_tokens, counts.accepted_tokens, counts.finished)

    # --- the control thread -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="specpilot-live", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        next_poll = next_state = self._clock()
        while True:
            now = self._clock()
            try:
                if now >= next_poll:
                    self.poll()
                    next_poll = now + POLL_S
                self.tick(now)
                if self.state_file is not None and now >= next_state:
                    self.write_state()
                    next_state = now + STATE_S
            except Exception:  # keep following live.json whatever one round hit
                log.exception("specpilot live: following %s failed this round", self.live_file)
            if self._stop.wait(TICK_S):
                return

    def poll(self) -> None:
        """Read live.json when it changed; apply it or refuse it."""
        try:
            st = os.stat(self.live_file)
        except OSError:
            return
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            data = read_bounded(self.live_file, live.MAX_LIVE_BYTES)
        except FileProblem as e:
            self._refuse(str(e).encode(), "live.json", str(e))
            return
        except OSError:
            self._seen = None  # replaced between stat and open (a ConfigMap update): read it next round
            return
        self.apply(data)

    def apply(self, data: bytes) -> None:
        try:
            config = live.parse_live(data, self.started_n, self.method, self.data_parallel)
            served = {a: self._served.get(a) or Served(a, self._lookup(a)) for a in config.arms}
        except live.LiveConfigError as e:
            self._refuse(data, e.field, str(e))
            return
        if config == self.config:
            return
        self.config, self._served = config, served
        self._arm_clock = live.ArmClock(config, self._clock())
        log.info("specpilot live: %s: serving %s%s", self.live_file, " / ".join(a.key for a in config.arms),
                 f" alternately, dwell {config.dwell_s[0]:g}-{config.dwell_s[1]:g} s" if config.switchback else "")
        self.tick(self._clock())

    def _lookup(self, arm: live.Arm) -> list[int]:
        try:
            return self._build_lookup([list(r) for r in arm.table], vllm_max_batch_size=self.max_batch,
                                      vllm_num_speculative_tokens=self.started_n)
        except ValueError as e:  # vLLM's own rules, should a later vLLM add one parse_live lacks
            raise live.LiveConfigError("arms", f"vLLM refuses {arm.key}: {e}") from None

    def _refuse(self, data: bytes, field: str, why: str) -> None:
        self.rejected += 1
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self._refusals_logged:
            if len(self._refusals_logged) >= MAX_REFUSALS_REMEMBERED:
                self._refusals_logged.clear()
            self._refusals_logged.add(digest)
            log.warning("specpilot live: %s refused at %s (%s); serving %s as before", self.live_file, field, why,
                        self._wanted.arm.key)

    def tick(self, now: float) -> None:
        """Set the arm the arm clock wants at `now`; the scheduler installs it at its next step."""
        if self.config is None or self._arm_clock is None:
            return
        arm = self.config.arms[self._arm_clock.arm_at(now)]
        if arm != self._wanted.arm:
            self._wanted = self._served[arm]

    def exposition(self) -> str:
        with self._lock:
            return live.exposition(self.counters, self.in_force, self.arms, self.started_n, self.bands,
                                   rejected=self.rejected)

    def write_state(self) -> None:
        assert self.state_file is not None
        tmp = self.state_file.with_name(f".{self.state_file.name}.tmp")
        tmp.write_text(self.exposition(), encoding="utf-8")
        os.replace(tmp, self.state_file)


def register() -> None:
    """vLLM's general-plugin entry point: called once in every vLLM process."""
    live_file = os.environ.get(live.LIVE_FILE_ENV)
    if not live_file:
        return
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    original = Scheduler.__init__
    if getattr(original, "_specpilot_live", False):
        return
    state = os.environ.get(live.LIVE_STATE_ENV)

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            engine = LiveEngine(self, Path(live_file), Path(state) if state else None,
                                build_dynamic_sd_schedule_lookup)
        except ValueError as e:
            log.error("specpilot live: %s is not followed: %s", live_file, e)
            return
        engine.wrap()
        engine.start()
        log.info("specpilot live: following %s (started N %d, table %s)", live_file, engine.started_n,
                 engine.in_force.key)

    init._specpilot_live = True  # type: ignore[attr-defined]
    Scheduler.__init__ = init
