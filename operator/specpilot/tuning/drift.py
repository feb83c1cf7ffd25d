"""Acceptance drift: after convergence, has tokens per step moved enough that the survival data is stale?

The reference is the stable track's tokens per step over the first REFERENCE_WINDOWS windows after
convergence (steady state at the chosen N; the windows before it may be few, or at another N). Drift is
the mean of the last ACCEPTANCE_WINDOWS windows departing from it by more than a relative threshold
(spec.tuning.driftThreshold) or several standard errors of the reference's window spread, whichever is
larger. (Load drift needs no statistic of its own: the state machine re-plans on the recent load mix, see
`machine._converged`.)
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .observations import WindowRecord

# Window counts and the z bound are statistics, not policy: they set how sure a drift must be, while the
# user's knob is how large it must be (spec.tuning.driftThreshold).
REFERENCE_WINDOWS = 6
ACCEPTANCE_WINDOWS = 6
ACCEPTANCE_Z = 4.0


def reference(records: Sequence[WindowRecord]) -> dict[str, float]:
    ls = np.array([r.tokens_per_step for r in records])
    return {"l": float(ls.mean()), "l_sd": float(ls.std())}


def detect(ref: dict[str, float], recent: Sequence[WindowRecord], threshold: float) -> str | None:
    """A reason when the recent stable windows' tokens per step drifted from the reference by more than
    `threshold` (relative) and ACCEPTANCE_Z standard errors, else None."""
    acc = recent[-ACCEPTANCE_WINDOWS:]
    if len(acc) < ACCEPTANCE_WINDOWS:
        return None
    l_now = float(np.mean([r.tokens_per_step for r in acc]))
    limit = max(threshold * ref["l"], ACCEPTANCE_Z * ref["l_sd"] / math.sqrt(len(acc)))
    if abs(l_now - ref["l"]) > limit:
        return f"tokens per step moved from {ref['l']:.3f} to {l_now:.3f}"
    return None
