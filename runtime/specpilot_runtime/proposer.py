"""A confidence-truncated n-gram drafter, served through vLLM's `custom_class` speculative method.

vLLM's n-gram drafter finds the longest earlier occurrence of the context's suffix (between
prompt_lookup_min and prompt_lookup_max tokens long) and drafts the K tokens that followed it, however short
the match was. A short match is weak evidence: its later draft tokens are mostly rejected, and each one still
costs a verified position. This drafter finds the same match (same lengths, same tie-break: the earliest
occurrence) and drafts

    draft length = min(K, match length - prompt_lookup_min + 1)

tokens: one draft token for a match of the shortest length allowed, one more per longer matched token, up to
the K in force. The tokens drafted are always a prefix of what vLLM's drafter drafts at the same K.

The K in force: vLLM hands its own n-gram drafter the step's K (`num_spec_tokens_to_schedule`, which the
scheduler looks up by batch size in the table that live.json rewrites, live_engine.py), but calls a
`custom_class` drafter without it. So the drafter wraps the model runner's `propose_draft_token_ids`, the one
caller of `propose`, to hand it that same K from the step's scheduler output; K is the started N when the
runner gives none.

vLLM zeroes prompt_lookup_min/max for `custom_class`, so the runtime passes them in LOOKUP_MIN_ENV and
LOOKUP_MAX_ENV (speculative.py, engine.py). This module imports vLLM only inside the drafter, so it is tested without vLLM.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .speculative import LOOKUP_MAX_ENV, LOOKUP_MIN_ENV

# Without prompt_lookup_*: a 2-token match drafts one token and a match of N + 1 tokens the whole N, so the
# draft length spans 1..N (vLLM's own default, 5 and 5, would draft one token after every match).
DEFAULT_LOOKUP_MIN = 2

log = logging.getLogger("vllm.specpilot_proposer")

# The K the scheduler chose for the step being drafted from, set around the model runner's call.
_step_k: contextvars.ContextVar[int | None] = contextvars.ContextVar("specpilot_step_k", default=None)
_WRAPPED = "_specpilot_passes_step_k"


def lookup_bounds(env: Mapping[str, str], n: int) -> tuple[int, int]:
    """(prompt_lookup_min, prompt_lookup_max) from the environment: vLLM's rule that one given copies to the
    other; neither given: DEFAULT_LOOKUP_MIN and N + 1."""
    lo, hi = env.get(LOOKUP_MIN_ENV), env.get(LOOKUP_MAX_ENV)
    if lo is None and hi is None:
        return DEFAULT_LOOKUP_MIN, max(DEFAULT_LOOKUP_MIN, n + 1)
    low, high = int(lo if lo is not None else hi), int(hi if hi is not None else lo)  # type: ignore[arg-type]
    if not 1 <= low <= high:
        raise ValueError(f"{LOOKUP_MIN_ENV}={low} and {LOOKUP_MAX_ENV}={high}: need 1 <= min <= max")
    return low, high


def draft_length(match: int, lookup_min: int, cap: int) -> int:
    """The confidence rule: one draft token per matched token from lookup_min on, at most `cap` (K)."""
    return max(0, min(cap, match - lookup_min + 1))


def longest_match(tokens: np.ndarray, lookup_min: int, lookup_max: int) -> tuple[int, int]:
    """(length, end index) of the longest earlier occurrence of the context's suffix, its length capped at
    lookup_max; on ties the earliest occurrence, as vLLM's drafter picks it. (0, -1) below lookup_min."""
    size = len(tokens)
    if size < max(lookup_min, 2):
        return 0, -1
    # alive[j]: the occurrence ending at j (before the last token) still matches the suffix; one numpy pass
    # per suffix length, so a step costs O(lookup_max * context) without a compiled loop.
    alive = tokens[:-1] == tokens[-1]
    length = alive.astype(np.int32)
    for v in range(2, lookup_max + 1):
        if v > size - 1 or not alive[v - 1:].any():
            break
        alive[:v - 1] = False
        alive[v - 1:] &= tokens[:size - v] == tokens[size - v]
        length[alive] = v
    best = int(length.max())
    if best < lookup_min:
        return 0, -1
    return best, int(np.argmax(length == best))


def propose_one(tokens: np.ndarray, lookup_min: int, lookup_max: int, cap: int, max_model_len: int) -> list[int]:
    """One request's draft: the tokens after the longest match, as many as its length earns."""
    room = min(cap, max_model_len - len(tokens))
    if room <= 0:
        return []
    match, end = longest_match(tokens, lookup_min, lookup_max)
    k = draft_length(match, lookup_min, room)
    return tokens[end + 1:end + 1 + k].tolist() if k else []


def pass_step_k(runner_cls: type) -> None:
    """Wrap `runner_cls.propose_draft_token_ids(self, scheduler_output, ...)` so that a `propose` it calls
    reads the step's K (`step_k`). Idempotent."""
    original: Callable[..., Any] = getattr(runner_cls, "propose_draft_token_ids")
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def propose_draft_token_ids(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        token = _step_k.set(getattr(scheduler_output, "num_spec_tokens_to_schedule", None))
        try:
            return original(self, scheduler_output, *args, **kwargs)
        finally:
            _step_k.reset(token)

    setattr(propose_draft_token_ids, _WRAPPED, True)
    setattr(runner_cls, "propose_draft_token_ids", propose_draft_token_ids)


def step_k(started_n: int) -> int:
    """The K in force for the step being drafted: the scheduler's, never above the started N."""
    k = _step_k.get()
    return started_n if k is None else max(0, min(int(k), started_n))


class ConfidenceNgramProposer:
    """vLLM `custom_class` drafter: n-gram lookup, each draft cut to what its match length earns."""

    def __init__(self, vllm_config: Any):
        spec = vllm_config.speculative_config
        self.n: int = spec.num_speculative_tokens
        self.max_model_len: int = vllm_config.model_config.max_model_len
        self.lookup_min, self.lookup_max = lookup_bounds(os.environ, self.n)
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # the base of vLLM's CPU runner too

        pass_step_k(GPUModelRunner)
        log.info("confidence n-gram drafter: N=%d, prompt_lookup %d..%d, draft length min(K, match - %d)",
                 self.n, self.lookup_min, self.lookup_max, self.lookup_min - 1)

    def propose(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings: Any = None) -> list[list[int]]:
        """One draft per request of the batch; empty for a request that sampled nothing this step (a
        partial prefill) or reached the model's length, as vLLM's n-gram drafter does."""
        cap = step_k(self.n)
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            size = int(num_tokens_no_spec[i])
            if not sampled or cap == 0 or size >= self.max_model_len:
                drafts.append([])
                continue
            drafts.append(propose_one(token_ids_cpu[i, :size], self.lookup_min, self.lookup_max, cap,
                                      self.max_model_len))
        return drafts

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No weights: the model runner calls this on every drafter."""
