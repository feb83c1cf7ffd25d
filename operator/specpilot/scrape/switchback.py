"""A switchback arm's window as the tuner reads a track's (pure).

Under switchback the stable pods serve two arms (live.py) and count each one's steps: their seconds, the
sequences they stepped, the tokens they put out, drafted and accepted. The tuner judges tracks, so each
arm becomes the Snapshot a track of the same pods would have shown had it served the arm the whole window:
its counters scaled by the window's pod-seconds over the seconds the arm's steps took. Then what the tuner
derives is the arm's own: tokens per step L = output / sequences stepped, step time = seconds / steps, and
the load (Little's law on those) = sequences per step. What the engine does not count per arm, acceptance
per position, is the pods' own (both arms pooled): per position, accepted over drafted does not depend on
the draft length for a drafter whose k-th token does not depend on N (the only ones served live,
tuning/switchback.py), and the arm's own accepted total scales it.
"""

from __future__ import annotations

import dataclasses

from specpilot_runtime.live import BAND_COUNTERS
from specpilot_runtime.vllm_metrics import Snapshot


def arm_totals(snap: Snapshot, arm: str) -> tuple[float, ...]:
    """The arm's counters summed over batch-size bands (zeros when it counted nothing)."""
    rows = [v for (a, _), v in snap.switchback.items() if a == arm]
    return tuple(sum(col) for col in zip(*rows)) if rows else (0.0,) * len(BAND_COUNTERS)


def arm_bands(snap: Snapshot, arm: str) -> dict[str, tuple[float, ...]]:
    """The arm's counters per batch-size band, as the engines counted them (schedule mode compares arms band
    by band: tuning/bands.py, which leaves out any band no engine could have counted)."""
    return {band: v for (a, band), v in snap.switchback.items() if a == arm}


def arm_snapshot(pooled: Snapshot, arm: str, n: int, window_s: float, pods: int) -> Snapshot:
    """The window of the stable pods (`pooled`: their summed delta) as the arm drafting N alone would have
    counted it; an empty Snapshot when the arm ran no step."""
    steps, seconds, seq_steps, output, draft_tokens, accepted, finished = arm_totals(pooled, arm)
    if steps <= 0 or seconds <= 0 or seq_steps <= 0 or output <= 0:
        return Snapshot(scrape_time=pooled.scrape_time)
    scale = window_s * max(pods, 1) / seconds
    drafts = seq_steps if n > 0 else 0.0
    per_pos = _acceptance(pooled, n)
    expected = drafts * sum(per_pos)
    fit = accepted / expected if expected > 0 else 0.0
    step_s, tokens_per_seq_step = seconds / steps, output / seq_steps
    done = max(finished * scale, 1.0)
    return Snapshot(drafts=drafts * scale, draft_tokens=draft_tokens * scale, accepted_tokens=accepted * scale,
                    accepted_per_pos=tuple(drafts * scale * a * fit for a in per_pos),
                    drafted_per_pos=(drafts * scale,) * n, generation_tokens=output * scale,
                    tpot_sum=done * step_s / tokens_per_seq_step, tpot_count=done,
                    running=seq_steps / steps * max(pods, 1), waiting=pooled.waiting, scrape_time=pooled.scrape_time,
                    reset=pooled.reset)


def _acceptance(pooled: Snapshot, n: int) -> tuple[float, ...]:
    """Accepted over drafted at positions 0..N-1, pooled over arms (over every draft without specpilot's
    drafted-per-position counter); 0 where nothing was drafted."""
    acc = pooled.accepted_per_pos
    out = []
    for k in range(n):
        d = pooled.drafted_per_pos[k] if pooled.drafted_per_pos is not None and k < len(pooled.drafted_per_pos) \
            else pooled.drafts
        out.append(min(1.0, acc[k] / d) if k < len(acc) and d > 0 else 0.0)
    return tuple(out)


def cut(snap: Snapshot, n: int) -> Snapshot:
    """The pods' window as a track drafting N reads it: vLLM's per-position vectors have the started N's
    positions, of which an arm of N drafts the first N."""
    drafted = None if snap.drafted_per_pos is None else snap.drafted_per_pos[:n]
    return dataclasses.replace(snap, accepted_per_pos=snap.accepted_per_pos[:n], drafted_per_pos=drafted)
