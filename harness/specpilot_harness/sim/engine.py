"""The simulated engine core: continuous batching, step timing and token accounting. Pure.

No clocks, sockets or sleeps here: the engine keeps its own clock in seconds, which each step advances by
the profile's step time, and returns what happened as a `StepOutcome`. The asyncio loop in `server.py`
paces steps against wall time and turns outcomes into HTTP responses and metrics.

Model of one engine step (what vLLM's scheduler does, reduced to what speculative decoding changes):
- waiting requests are admitted FIFO while fewer than `max_num_seqs` run;
- with the profile's KV capacity (`Profile.kv`; without it the two rules below are off): a request holds
  the blocks its prompt, its tokens so far, the step's token and N lookahead slots take, times 1 plus the
  draft's KV share at N > 0, whose draft weights also take blocks; the running requests' next tokens come
  first: while they do not fit the newest is preempted (back to the head of the queue, counted as vLLM's
  num_preemptions; resumed, its next step recomputes its KV and verifies no draft), and a step that
  preempted admits nobody; otherwise the queue's head is admitted only while its blocks fit. So a draft
  leaves fewer requests room at high load, which then wait, and their time to first token with them;
- the step drafts K tokens per sequence: N, or with a batch-size schedule (vLLM 0.33's
  `num_speculative_tokens_per_batch_size`) `schedule_k(schedule, N, B)` at B running sequences, or,
  following a live.json (`live`), the K of the arm the step was scheduled under (live_arms.py);
- the step takes `profile.step_time(K, B)`, times a noise factor, and, while the engine serves a batch-size
  table (a schedule, or live arms: a switchback pod's engine.json carries table rows and a live file; a
  static pod's carries neither), times 1 + `profile.table_cost`: vLLM then stops padding decode requests to
  one draft length and runs piecewise CUDA graphs rather than full ones (vllm-project/vllm#49548), at every K;
- a newly admitted request is prefilled and gets its first token (no draft is verified for it);
- every other running request verifies one draft of K tokens and gets 1 + accepted tokens, accepted
  drawn from the profile's survival curve at N cut to its first K positions (vLLM drafts N and truncates
  centrally to K), cut at its max_tokens; K = 0 drafts nothing;
- vLLM counts every verified draft and its accepted tokens, even when max_tokens cuts the output, and
  counts N draft tokens per draft whatever K is (the truncated positions are never accepted); only
  specpilot's drafted-per-position counter sees K.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from specpilot_runtime.speculative import schedule_k

from .acceptance import accepted_length
from .live_arms import LiveArms
from .profile import Profile

# A step never runs faster than this share of the profile's time, whatever the noise draw.
MIN_NOISE_FACTOR = 0.05


@dataclass
class SimRequest:
    """One generation request as the engine tracks it (times on the engine clock, seconds)."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival: float
    generated: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    resumed: bool = False  # preempted and readmitted: its next step recomputes its KV, verifying no draft


@dataclass(frozen=True)
class Emission:
    """Tokens one request got from one step."""

    request_id: str
    tokens: int
    finished: bool


@dataclass(frozen=True)
class FinishedRequest:
    request_id: str
    prompt_tokens: int
    generation_tokens: int
    e2e_latency: float
    # Mean time per output token after the first (vLLM's request_time_per_output_token); None for
    # one-token requests, which have no decode phase.
    time_per_output_token: float | None


@dataclass(frozen=True)
class StepOutcome:
    """Everything one engine step changed, for responses and metrics."""

    end: float
    duration: float
    batch_size: int
    prompt_tokens: int
    generation_tokens: int
    emissions: tuple[Emission, ...]
    finished: tuple[FinishedRequest, ...]
    time_to_first_token: tuple[float, ...]
    inter_token_latency: tuple[float, ...]
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    drafted_per_pos: tuple[int, ...]  # drafts that reached each of the N positions (K < N stops short)
    kv_cache_usage: float
    preemptions: int = 0  # requests preempted to make room for the running ones' next tokens


@dataclass
class Engine:
    """Continuous-batching engine at a fixed N (and optional batch-size schedule), driven step by step."""

    profile: Profile
    num_speculative_tokens: int
    rng: random.Random
    max_num_seqs: int = 256
    kv_cache_tokens: int = 131072
    # vLLM's num_speculative_tokens_per_batch_size rows (lo, hi, K); None drafts N at every batch size.
    schedule: Sequence[Sequence[int]] | None = None
    # Draft length set live: the arms a live.json has the engine serve, and their counters; None: fixed.
    live: LiveArms | None = None
    clock: float = 0.0
    _waiting: deque[SimRequest] = field(default_factory=deque)
    _running: dict[str, SimRequest] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Validates N against the profile once, so a bad N fails at start rather than mid-request.
        self._survival = self.profile.survival_at(self.num_speculative_tokens)

    @property
    def has_table(self) -> bool:
        """The engine serves a batch-size table (a schedule, or live arms), and pays `profile.table_cost`."""
        return bool(self.schedule) or self.live is not None

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def catch_up(self, now: float) -> None:
        """Move an idle engine's clock to `now`: time passes while nothing runs."""
        if not self.busy:
            self.clock = max(self.clock, now)
            if self.live is not None:
                self.live.scheduled = None  # no step in flight: the next is scheduled under the arm in force

    def submit(self, request_id: str, prompt_tokens: int, max_tokens: int) -> SimRequest:
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        req = SimRequest(request_id, prompt_tokens, max_tokens, arrival=self.clock)
        self._waiting.append(req)
        return req

    def abort(self, request_id: str) -> None:
        """Drop a request whose client went away; its tokens so far stay counted."""
        self._running.pop(request_id, None)
        self._waiting = deque(r for r in self._waiting if r.request_id != request_id)

    def _kv_capacity(self) -> int | None:
        """Blocks requests may hold: the profile's, less the draft's weights at N > 0; None without a KV model."""
        kv = self.profile.kv
        if kv is None:
            return None
        return kv.blocks - (kv.draft_weight_blocks if self.num_speculative_tokens > 0 else 0)

    def _blocks(self, req: SimRequest) -> int:
        """Blocks `req` needs for its next step: prompt, tokens so far, the step's token and N lookahead slots,
        and at N > 0 its draft's KV beside the target's."""
        kv = self.profile.kv
        assert kv is not None
        n = self.num_speculative_tokens
        tokens = (req.prompt_tokens + req.generated + 1 + n) * (1.0 + (kv.draft_kv_ratio if n > 0 else 0.0))
        return math.ceil(tokens / kv.block_tokens)

    def _schedule(self) -> int:
        """Admit (and, with a KV model, preempt) as vLLM's scheduler does; the requests preempted."""
        capacity = self._kv_capacity()
        if capacity is None:
            while self._waiting and len(self._running) < self.max_num_seqs:
                req = self._waiting.popleft()
                self._running[req.request_id] = req
            return 0
        used = sum(self._blocks(r) for r in self._running.values())
        preempted = 0
        # One request always runs, however large: the engine would otherwise never step again.
        while used > capacity and len(self._running) > 1:
            victim = self._running.pop(next(reversed(self._running)))
            used -= self._blocks(victim)
            victim.resumed = True
            self._waiting.appendleft(victim)
            preempted += 1
        if preempted:
            return preempted
        while self._waiting and len(self._running) < self.max_num_seqs:
            need = self._blocks(self._waiting[0])
            if self._running and used + need > capacity:
                break
            req = self._waiting.popleft()
            self._running[req.request_id] = req
            used += need
        return 0

    def step(self) -> StepOutcome:
        """Run one engine step: admit, time it, give every running request its tokens."""
        preempted = self._schedule()
        batch = len(self._running)
        n = self.num_speculative_tokens
        if self.live is None:
            k = schedule_k(self.schedule, n, batch)  # draft tokens this step: N without a schedule
        else:
            arm, drafts_under = self.live.step_arms(self.clock)
            k = drafts_under.k_at(batch, n)
        # vLLM drafts N and truncates to K centrally, so acceptance follows the N curve's first K positions.
        survival = self._survival[:k]
        noise = max(MIN_NOISE_FACTOR, self.rng.gauss(1.0, self.profile.noise)) if self.profile.noise else 1.0
        table = 1.0 + self.profile.table_cost if self.has_table else 1.0
        duration = self.profile.step_time(k, batch) / 1000.0 * noise * table
        end = self.clock + duration

        emissions: list[Emission] = []
        finished: list[FinishedRequest] = []
        ttft: list[float] = []
        itl: list[float] = []
        per_pos = [0] * n
        drafts = accepted_total = prompt_tokens = generation_tokens = 0
        for req in list(self._running.values()):
            if req.generated == 0:
                prompt_tokens += req.prompt_tokens
                tokens = 1
                req.first_token_at = end
                ttft.append(end - req.arrival)
            elif req.resumed:
                tokens = 1
                req.resumed = False
                assert req.last_token_at is not None
                itl.append(end - req.last_token_at)
            else:
                tokens = 1
                if k:
                    accepted = accepted_length(survival, self.rng.random())
                    drafts += 1
                    accepted_total += accepted
                    for pos in range(accepted):
                        per_pos[pos] += 1
                    tokens += accepted
                assert req.last_token_at is not None
                itl.append(end - req.last_token_at)
            tokens = min(tokens, req.max_tokens - req.generated)
            req.generated += tokens
            req.last_token_at = end
            generation_tokens += tokens
            done = req.generated >= req.max_tokens
            emissions.append(Emission(req.request_id, tokens, done))
            if done:
                del self._running[req.request_id]
                finished.append(_finish(req, end))

        self.clock = end
        if self.live is not None:
            # Drafted as vLLM's stats count them (N per draft), which is what a real engine's switchback counts.
            self.live.record(arm, batch, duration, generation_tokens, drafts * n, accepted_total, len(finished))
        capacity = self._kv_capacity()
        if capacity is None:
            kv_usage = sum(r.prompt_tokens + r.generated for r in self._running.values()) / self.kv_cache_tokens
        else:
            kv_usage = sum(self._blocks(r) for r in self._running.values()) / capacity
        return StepOutcome(
            end=end, duration=duration, batch_size=batch,
            prompt_tokens=prompt_tokens, generation_tokens=generation_tokens,
            emissions=tuple(emissions), finished=tuple(finished),
            time_to_first_token=tuple(ttft), inter_token_latency=tuple(itl),
            # vLLM counts N draft tokens per draft even when K < N (the truncated ones are never accepted).
            drafts=drafts, draft_tokens=drafts * n, accepted_tokens=accepted_total,
            accepted_per_pos=tuple(per_pos),
            drafted_per_pos=tuple(drafts if pos < k else 0 for pos in range(n)),
            kv_cache_usage=min(1.0, kv_usage), preemptions=preempted,
        )


def _finish(req: SimRequest, end: float) -> FinishedRequest:
    assert req.first_token_at is not None
    tpot = (end - req.first_token_at) / (req.generated - 1) if req.generated > 1 else None
    return FinishedRequest(req.request_id, req.prompt_tokens, req.generated, end - req.arrival, tpot)
