"""Drift: after convergence, has acceptance or load moved enough that the chosen N may be stale?

The reference is the stable track's tokens per step and log load over the windows that led to convergence.
Acceptance drift compares the mean of the last few windows with it (a relative threshold, or several
standard errors of the window spread, whichever is larger); load drift compares the mean log load over a
longer span, because the load mix legitimately swings between windows.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .observations import WindowRecord

ACCEPTANCE_WINDOWS = 6
LOAD_WINDOWS = 8
ACCEPTANCE_REL = 0.08  # well above window-to-window swings; a shift this large moves the optimum N
ACCEPTANCE_Z = 4.0
LOAD_LOG = math.log(2.0)  # the mean load doubling or halving moves the optimum N
LOAD_Z = 3.0


def reference(records: Sequence[WindowRecord]) -> dict[str, float]:
    """Summary of the stable's windows at convergence."""
    ls = np.array([r.tokens_per_step for r in records])
    lb = np.log([r.load for r in records])
    return {"l": float(ls.mean()), "l_sd": float(ls.std()), "log_load": float(lb.mean()),
            "log_load_sd": float(lb.std()), "windows": float(len(records))}


def detect(ref: dict[str, float], recent: Sequence[WindowRecord]) -> str | None:
    """A reason when the recent stable windows drifted from the reference, else None."""
    acc = recent[-ACCEPTANCE_WINDOWS:]
    if len(acc) == ACCEPTANCE_WINDOWS:
        l_now = float(np.mean([r.tokens_per_step for r in acc]))
        limit = max(ACCEPTANCE_REL * ref["l"], ACCEPTANCE_Z * ref["l_sd"] / math.sqrt(len(acc)))
        if abs(l_now - ref["l"]) > limit:
            return f"tokens per step moved from {ref['l']:.3f} to {l_now:.3f}"
    load = recent[-LOAD_WINDOWS:]
    if len(load) == LOAD_WINDOWS:
        lb = float(np.mean(np.log([r.load for r in load])))
        limit = max(LOAD_LOG, LOAD_Z * ref["log_load_sd"] / math.sqrt(len(load)))
        if abs(lb - ref["log_load"]) > limit:
            return f"mean load moved from {math.exp(ref['log_load']):.1f} to {math.exp(lb):.1f} per pod"
    return None
