"""The demo's PNG: goodput against N (profile truth, the tuner's measurements and predictions), with the
default and the chosen N marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: the demo may run without a display

import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

from specpilot_harness.sim.profile import Profile  # noqa: E402

from . import readings  # noqa: E402


def goodput_plot(tuning: dict[str, Any], profile: Profile, default_n: int, path: Path) -> Path:
    truth = readings.truth(profile, readings.reference_load(tuning))
    measured, predicted = readings.observed(tuning), readings.predicted(tuning)
    chosen = int(tuning.get("stableN", default_n))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ax.plot(list(truth), list(truth.values()), "-", color="0.6", label="profile (truth)")
    if predicted:
        ax.plot(list(predicted), list(predicted.values()), "o--", color="tab:blue", alpha=0.7,
                label="tuner's prediction (last plan)")
    if measured:
        ax.plot(list(measured), list(measured.values()), "s", color="tab:green", markersize=8,
                label="measured by the tuner")
    ax.axvline(default_n, color="tab:red", linestyle=":", label=f"default N={default_n}")
    ax.axvline(chosen, color="tab:green", linestyle="-", alpha=0.5, label=f"chosen N={chosen}")
    ax.set_xlabel("num_speculative_tokens (N)")
    ax.set_ylabel(f"goodput per pod at {readings.reference_load(tuning):.1f} sequences (tokens/s)")
    ax.set_title(f"{profile.name} ({profile.method})")
    ax.set_xticks(range(profile.max_n + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
