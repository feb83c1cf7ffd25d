"""Acceptance draws: how many leading draft tokens the target accepts in one verify step. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def accepted_length(survival: Sequence[float], u: float) -> int:
    """Leading draft tokens accepted for a uniform draw `u` in [0, 1).

    Acceptance is left to right up to the first rejection, so the count is at least k exactly when the
    first k tokens all survive: P(count >= k) = S_k. With S non-increasing that is the number of k
    with u < S_k, which one uniform draw per draft gives exactly.
    """
    count = 0
    for s in survival:
        if u >= s:
            break
        count += 1
    return count
