"""Acceptance drift: after convergence, has tokens per step moved enough that the survival data is stale?

The reference is the stable track's tokens per step over the first REFERENCE_WINDOWS windows after
convergence (steady state at the chosen N; the windows before it may be few, or at another N). Drift is
the mean of the last ACCEPTANCE_WINDOWS windows departing from it by more than a relative threshold
(spec.tuning.driftThreshold) or several standard errors of the difference of the two means, whichever is
larger. (Load drift needs no statistic of its own: the state machine re-plans on the recent load mix, see
`machine._converged`.)
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .constants import ACCEPTANCE_WINDOWS, ACCEPTANCE_Z, REFERENCE_WINDOWS
from .observations import MAX_N, WindowRecord, finite


def reference(records: Sequence[WindowRecord]) -> dict[str, float]:
    ls = np.array([r.tokens_per_step for r in records])
    return {"l": float(ls.mean()), "l_sd": float(ls.std(ddof=1)) if len(ls) > 1 else 0.0, "windows": float(len(ls))}


def reference_from_json(d: Any) -> dict[str, float] | None:
    """A reference read back from status (None: none yet); ValueError names what is wrong with it."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError("reference is not an object")
    out = {"l": finite(d.get("l"), "reference l", 1.0, MAX_N + 1),
           "l_sd": finite(d.get("l_sd"), "reference l_sd", 0.0, MAX_N + 1)}
    if d.get("windows") is not None:
        out["windows"] = finite(d["windows"], "reference windows", 2.0)
    return out


def detect(ref: dict[str, float], recent: Sequence[WindowRecord], threshold: float) -> str | None:
    """A reason when the recent stable windows' tokens per step drifted from the reference by more than
    `threshold` (relative) and ACCEPTANCE_Z standard errors, else None."""
    acc = recent[-ACCEPTANCE_WINDOWS:]
    if len(acc) < ACCEPTANCE_WINDOWS:
        return None
    ls = np.array([r.tokens_per_step for r in acc])
    l_now = float(ls.mean())
    # Both means are estimates, and so is the window spread, from both sets of windows: a calm reference
    # alone would make a move of noise look like drift, and drift forgets every N measured.
    n_ref, n = max(ref.get("windows", REFERENCE_WINDOWS), 2.0), len(ls)
    pooled = math.sqrt(((n_ref - 1) * ref["l_sd"] ** 2 + (n - 1) * float(ls.var(ddof=1))) / (n_ref + n - 2))
    limit = max(threshold * ref["l"], ACCEPTANCE_Z * pooled * math.sqrt(1 / n_ref + 1 / n))
    if abs(l_now - ref["l"]) > limit:
        return f"tokens per step moved from {ref['l']:.3f} to {l_now:.3f}"
    return None
