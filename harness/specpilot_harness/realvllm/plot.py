"""The real-engine run's PNG: swept goodput per N, with the default and the tuner's final N marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: runs without a display

import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

from .run import RealRunResult  # noqa: E402


def sweep_plot(result: RealRunResult, path: Path) -> Path:
    swept = dict(sorted(result.swept_tokens_per_s.items()))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ax.plot(list(swept), list(swept.values()), "o-", color="tab:blue", label="measured sweep (load generator)")
    ax.axvline(result.default_n, color="tab:red", linestyle=":", label=f"default N={result.default_n}")
    if result.final_n is not None:
        ax.axvline(result.final_n, color="tab:green", linestyle="-", alpha=0.6,
                   label=f"tuner's choice N={result.final_n} ({len(result.canaries)} canaries)")
    for n in result.canaries:
        if n in swept:
            ax.plot([n], [swept[n]], "s", color="tab:orange", markersize=9, alpha=0.6)
    ax.set_xlabel("num_speculative_tokens (N)")
    ax.set_ylabel("completed tokens per second per pod")
    ax.set_title(f"real vLLM (CPU build), {result.method}: canaries marked as squares")
    ax.set_xticks(list(swept) or [result.default_n])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
