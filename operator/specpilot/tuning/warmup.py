"""When a canary's warm-up ends: its first analysed window is the first whose step time (relative to the
stable's in the same window) is not above the next window's by more than a tolerance, never later than a
bound.

A restarted engine can be slow for longer than the window it became ready in: a cold prefix cache, ROCm
kernels compiled on first use (JIT), CUDA graphs captured lazily. Such a window would count as the canary's
measured goodput and make a good N look worse. Only a slower first window is warm-up (a cold engine is
never faster), and the tolerance sits above the two windows' step-time noise, so a steady canary loses no
window; the bound keeps a canary that never settles from waiting forever (the judge then sees it as it is).
"""

from __future__ import annotations

from collections.abc import Sequence

from .constants import WARMUP_MAX_WINDOWS, WARMUP_STEP_TOLERANCE
from .observations import WindowRecord


def warmup_until(ready_seq: int) -> int:
    """The last window a canary that became ready in window `ready_seq` may start its analysis at: that
    window straddles the restart and is never analysed, then at most WARMUP_MAX_WINDOWS more are dropped."""
    return ready_seq + 1 + WARMUP_MAX_WINDOWS


def relative_step(records: Sequence[WindowRecord], seq: int) -> float | None:
    """The canary's step time over the stable's in window `seq`: the stable, paired in the same window,
    cancels what the load did to both (one window at 8 sequences per pod, the next at 128); None without
    both."""
    steps = {r.track: r.step_s for r in records if r.seq == seq}
    canary, stable = steps.get("canary"), steps.get("stable")
    return None if canary is None or not stable else canary / stable


def still_warming(first: float | None, after: float | None) -> bool:
    """Whether a window whose relative step time (`relative_step`) is `first` was warm-up, judged against
    the window after it (`after`): above it by more than WARMUP_STEP_TOLERANCE. Without both there is
    nothing to tell it by, and the window is kept."""
    if first is None or after is None:
        return False
    return first > after * (1.0 + WARMUP_STEP_TOLERANCE)


def analysis_start(since: int, seq: int, until: int, records: Sequence[WindowRecord]) -> int:
    """The canary's first analysed window once window `seq` is recorded: `since` (the current first), or
    the next window when `seq` is the one after `since` and shows `since` was still warm-up, while that
    stays at most `until`. `records`: both tracks' records of those windows."""
    if seq != since + 1 or since + 1 > until:
        return since
    return since + 1 if still_warming(relative_step(records, since), relative_step(records, seq)) else since
