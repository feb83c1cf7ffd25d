"""The operator's garbage-collector settings (the sandbox, a long-lived server too, uses them as well).

A controller's heap is mostly long-lived state (Kopf's per-object memories and tasks, the child cache,
metric children) and its garbage mostly acyclic (parsed JSON, freed by reference counting at once).
With CPython's defaults (700, 10, 10) the young generation is scanned every 700 allocations, and while the
heap grows (a thousand objects applied at once) the whole heap is scanned each time it has grown by a
quarter: at 1000 SpeculativeDeployments on 2 cores, 15 such pauses of 100-550 ms, each stalling every
reconcile in flight (measured with `gc.callbacks`; docs/operator.md "Scale"). With the young generation
scanned every 10,000 allocations no full scan falls inside such a burst, and objects from the imports
(modules, classes, functions: about 90,000) are frozen, since they are never garbage. Cycles made later
are still collected.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def configure() -> None:
    """Call once, after the imports and before the work starts."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
