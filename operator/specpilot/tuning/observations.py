"""What the controller hands the tuner each window, and the per-window numbers the tuner keeps.

A window's counters are deltas of `specpilot_runtime.vllm_metrics.Snapshot` (the controller computes them,
detecting counter resets). From one track's deltas the tuner derives:

- tokens per verify step L = 1 + accepted / drafts (precise: it is a ratio of large counters);
- step time t = mean TPOT x L (a request's time per output token is the step time over tokens per step);
- load B per pod = generation rate x mean TPOT / ready pods (Little's law: each running sequence emits
  1 / TPOT tokens per second), falling back to the `running` gauge when no request finished.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpilot_runtime.vllm_metrics import Snapshot


@dataclass(frozen=True)
class TrackWindow:
    """One track (stable or canary) over one window."""

    n: int  # N the track's pods run (from the specpilot.io/num-speculative-tokens label)
    delta: Snapshot  # counter deltas over the window; gauges (running, waiting) as last scraped
    ready_pods: int
    desired_pods: int
    errors: float = 0.0  # failed requests and container restarts during the window


@dataclass(frozen=True)
class Observations:
    """Everything one `step()` call sees. `canary` is None when no canary pods exist."""

    window_s: float
    stable: TrackWindow | None
    canary: TrackWindow | None = None


@dataclass(frozen=True)
class WindowRecord:
    """The numbers the tuner keeps from one track's window (serialised into the status)."""

    seq: int  # window sequence number, shared by the stable and canary records of one window
    track: str  # "stable" | "canary"
    n: int
    drafts: float
    accepted_per_pos: tuple[float, ...]
    tokens_per_step: float
    step_s: float | None  # None when no request finished in the window
    load: float  # concurrent sequences per pod

    def to_json(self) -> dict:
        return {"seq": self.seq, "track": self.track, "n": self.n, "drafts": self.drafts,
                "acc": list(self.accepted_per_pos), "l": self.tokens_per_step, "t": self.step_s,
                "b": self.load}

    @classmethod
    def from_json(cls, d: dict) -> "WindowRecord":
        return cls(seq=int(d["seq"]), track=str(d["track"]), n=int(d["n"]), drafts=float(d["drafts"]),
                   accepted_per_pos=tuple(float(a) for a in d["acc"]), tokens_per_step=float(d["l"]),
                   step_s=None if d["t"] is None else float(d["t"]), load=float(d["b"]))


def has_traffic(w: TrackWindow | None) -> bool:
    """True when the track served tokens in the window (ready and not idle)."""
    return w is not None and w.ready_pods > 0 and w.delta.generation_tokens > 0


def record(seq: int, track: str, w: TrackWindow, window_s: float) -> WindowRecord:
    """Turn one track's counter deltas into the tuner's per-window numbers."""
    d = w.delta
    n_pos = min(w.n, len(d.accepted_per_pos))
    acc = tuple(d.accepted_per_pos[:n_pos])
    tokens = 1.0 + d.accepted_tokens / d.drafts if w.n > 0 and d.drafts > 0 else 1.0
    tpot = d.tpot_sum / d.tpot_count if d.tpot_count > 0 else None
    step = tpot * tokens if tpot is not None else None
    pods = max(w.ready_pods, 1)
    if tpot is not None and window_s > 0:
        load = d.generation_tokens / window_s * tpot / pods
    else:
        load = d.running / pods
    return WindowRecord(seq=seq, track=track, n=w.n, drafts=d.drafts if w.n > 0 else 0.0,
                        accepted_per_pos=acc, tokens_per_step=tokens, step_s=step, load=max(load, 1.0))
