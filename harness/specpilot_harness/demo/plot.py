"""The demo's PNG: goodput against N (profile truth, the tuner's measurements and predictions), with the
default and the chosen N marked; for a profile with several load levels, goodput per level (profile truth)
for the default N, the best single N over the mix and the served schedule, with the totals over the mix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: the demo may run without a display

import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

from specpilot_harness.bench.tournament import TournamentProfile  # noqa: E402
from specpilot_harness.sim.profile import Profile  # noqa: E402

from . import readings  # noqa: E402
from . import tournament as tour  # noqa: E402
from .readings import MixTruth  # noqa: E402

BAR_COLORS = ("tab:red", "tab:gray", "tab:green", "white")


def goodput_plot(tuning: dict[str, Any], profile: Profile, default_n: int, path: Path,
                 time_scale: float = 1.0) -> Path:
    truth = readings.truth(profile, readings.reference_load(tuning))
    measured, predicted = readings.observed(tuning, time_scale), readings.predicted(tuning, time_scale)
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
    return _save(fig, ax, path, legend_size=8)


def _save(fig: Any, ax: Any, path: Path, legend_size: int) -> Path:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def schedule_plot(truth: MixTruth, profile: Profile, path: Path) -> Path:
    """Grouped bars: goodput per pod at each load level of the profile for the default N, the best single N
    and what the stable track serves (K per level under its schedule), and, hollow, the best K at each level
    (the most a schedule can serve); totals over the mix in the legend."""
    series = (truth.default, truth.single, truth.served, truth.oracle)
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    xs = range(len(truth.levels))
    for i, (s, color) in enumerate(zip(series, BAR_COLORS)):
        extra = "" if s is truth.default else f", {truth.gain(s, truth.default):+.1%}"
        label = f"{s.label}: {s.total:.0f} tokens/s over the mix{extra}"
        heights = [s.by_level[b] for b in truth.levels]
        hollow = s is truth.oracle
        bars = ax.bar([x + (i - (len(series) - 1) / 2) * width for x in xs], heights, width, color=color,
                      label=label, edgecolor="tab:green" if hollow else None, hatch="//" if hollow else None)
        for bar, b in zip(bars, truth.levels):
            text = f"K={s.k_by_level[b]}"
            if s is truth.served or s is truth.oracle:  # the level's own gain: small next to a heavy level's
                text += f"\n{s.by_level[b] / truth.single.by_level[b] - 1:+.1%}"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{b} sequences per pod\n{truth.weights[b]:.0%} of the time (best K {truth.best_k[b]})"
                        for b in truth.levels], fontsize=8)
    ax.set_ylabel("goodput per pod, tokens/s (profile truth)")
    ax.set_title(f"{profile.name} ({profile.method}): served {truth.gain(truth.served, truth.single):+.1%} over "
                 f"the best single N (the best K per level: {truth.gain(truth.oracle, truth.single):+.1%})",
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_ylim(0, 1.5 * max(max(s.by_level.values()) for s in series))  # room for the legend
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def tournament_plot(status: dict[str, Any], t: TournamentProfile, path: Path, mixed: bool,
                    time_scale: float = 1.0) -> Path:
    """A method tournament: goodput against N, one line per method (profile truth at the stable pods' mean
    load, or over the tournament's load mix), the stable method's measurements (one load level; engine
    clock, `time_scale` the engines'), and the start, the winner and the best (method, N) marked."""
    tuning = status.get("tuning") or {}
    truth = tour.truth(t, tuning, mixed)
    start, won, oracle = (t.start.method, t.start.n), tour.chosen(status, t), tour.best(truth)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    colors = {}
    for p in t.ordered():
        by_n = truth[p.method]
        (line,) = ax.plot(list(by_n), list(by_n.values()), "-", label=f"{p.method} (truth)")
        colors[p.method] = line.get_color()
    stable = tour.stable_profile(status, t).method
    measured = {} if mixed else readings.observed(tuning, time_scale)
    if measured:
        ax.plot(list(measured), list(measured.values()), "s", color=colors[stable], markersize=7, zorder=5,
                markeredgecolor="black", label=f"{stable}: measured by the tuner")
    marks = ((start, "o", "tab:red", f"start {start[0]} N={start[1]}", 12),
             (oracle, "*", "black", f"best {oracle[0]} N={oracle[1]}", 16),
             (won, "X", "tab:green", f"chosen {won[0]} N={won[1]}", 10))
    for (method, n), marker, color, label, size in marks:
        if method in truth and n in truth[method]:
            ax.plot([n], [truth[method][n]], marker, color=color, markersize=size, label=label,
                    markerfacecolor="none" if marker == "o" else color)
    ax.set_xlabel("num_speculative_tokens (N)")
    ax.set_ylabel(f"goodput per pod {tour.truth_label(tuning, mixed)} (tokens/s)", fontsize=8)
    ax.set_title(f"{t.name}: {start[0]} N={start[1]} -> {won[0]} N={won[1]} "
                 f"({t.goodput(won) / t.goodput(t.oracle()):.1%} of the oracle {t.oracle()[0]} N={t.oracle()[1]})",
                 fontsize=9)
    ax.set_xticks(range(max(p.max_n for p in t.entries) + 1))
    return _save(fig, ax, path, legend_size=7)


def demo_plot(status: dict[str, Any], profile: Profile, default_n: int, path: Path, mixed: bool,
              time_scale: float = 1.0) -> Path | None:
    """The demo's PNG for its profile: per load level for a mixed one, else goodput against N (which needs
    the tuner's window records, brought back to the engines' clock: `time_scale`); None when there is
    nothing to plot."""
    tuning = status.get("tuning") or {}
    if mixed:
        truth = readings.mix_truth(profile, default_n, int(tuning.get("stableN", default_n)),
                                   tuning.get("stableSchedule"))
        return schedule_plot(truth, profile, path)
    return goodput_plot(tuning, profile, default_n, path, time_scale) if tuning.get("records") else None
