"""Acceptance drift: after convergence, has tokens per step moved enough that the survival data is stale?

The reference is the stable track's tokens per step over the first REFERENCE_WINDOWS windows after
convergence (steady state at the chosen N; the windows before it may be few, or at another N). Drift is
the mean of the last ACCEPTANCE_WINDOWS windows departing from it by more than a relative threshold or
several standard errors of the reference's window spread, whichever is larger. (Load drift needs no
statistic of its own: the state machine re-plans on the recent load mix, see `machine._converged`.)
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .observations import WindowRecord

REFERENCE_WINDOWS = 6
ACCEPTANCE_WINDOWS = 6
ACCEPTANCE_REL = 0.08  # well above window-to-window swings; a shift this large moves the optimum N
ACCEPTANCE_Z = 4.0


def reference(records: Sequence[WindowRecord]) -> dict[str, float]:
    ls = np.array([r.tokens_per_step for r in records])
    return {"l": float(ls.mean()), "l_sd": float(ls.std())}


def detect(ref: dict[str, float], recent: Sequence[WindowRecord]) -> str | None:
    """A reason when the recent stable windows' tokens per step drifted from the reference, else None."""
    acc = recent[-ACCEPTANCE_WINDOWS:]
    if len(acc) < ACCEPTANCE_WINDOWS:
        return None
    l_now = float(np.mean([r.tokens_per_step for r in acc]))
    limit = max(ACCEPTANCE_REL * ref["l"], ACCEPTANCE_Z * ref["l_sd"] / math.sqrt(len(acc)))
    if abs(l_now - ref["l"]) > limit:
        return f"tokens per step moved from {ref['l']:.3f} to {l_now:.3f}"
    return None
