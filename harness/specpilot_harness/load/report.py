"""Summaries of a load run: overall and per endpoint, as a rich table and as JSON. Pure apart from printing."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

from rich import box
from rich.console import Console
from rich.table import Table

from .runner import RequestResult


@dataclass(frozen=True)
class Row:
    target: str
    requests: int
    errors: int
    share: float  # of all requests sent
    output_tokens: int
    tokens_per_s: float
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    ttft_p50_ms: float | None


@dataclass(frozen=True)
class Summary:
    elapsed_s: float
    total: Row
    endpoints: tuple[Row, ...]
    errors: dict[str, int]

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None without samples."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000


def _row(target: str, results: list[RequestResult], elapsed: float, sent: int) -> Row:
    ok = [r for r in results if r.ok]
    tpot = [r.tpot_s for r in ok if r.tpot_s is not None]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    tokens = sum(r.completion_tokens for r in ok)
    return Row(target, len(results), len(results) - len(ok), len(results) / sent if sent else 0.0, tokens,
               tokens / elapsed if elapsed > 0 else 0.0, _ms(percentile(tpot, 50)), _ms(percentile(tpot, 99)),
               _ms(percentile(ttft, 50)))


def summarize(results: list[RequestResult], elapsed_s: float) -> Summary:
    by_endpoint: dict[str, list[RequestResult]] = {}
    for r in results:
        by_endpoint.setdefault(r.endpoint, []).append(r)
    sent = len(results)
    return Summary(
        elapsed_s=elapsed_s,
        total=_row("all", results, elapsed_s, sent),
        endpoints=tuple(_row(k, v, elapsed_s, sent) for k, v in sorted(by_endpoint.items())),
        errors=dict(Counter(r.error for r in results if r.error)),
    )


def render(summary: Summary, console: Console) -> None:
    # Fits 80 columns: short headers, no vertical rules; a long pod name gives way, numbers never do.
    table = Table(title=f"specpilot load: {summary.elapsed_s:.1f} s (latencies in ms)", box=box.SIMPLE_HEAD)
    table.add_column("target", overflow="ellipsis", no_wrap=True, max_width=20)
    for col in ("reqs", "share", "err", "tokens", "tok/s", "TPOT50", "TPOT99", "TTFT50"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = [*summary.endpoints, summary.total] if len(summary.endpoints) > 1 else [summary.total]
    for i, row in enumerate(rows):
        table.add_row(row.target if row.target != "all" else "[bold]all[/bold]", str(row.requests),
                      f"{row.share:.0%}", str(row.errors), str(row.output_tokens), f"{row.tokens_per_s:.0f}",
                      fmt(row.tpot_p50_ms), fmt(row.tpot_p99_ms), fmt(row.ttft_p50_ms),
                      end_section=i == len(rows) - 2)
    console.print(table)
    for error, count in sorted(summary.errors.items()):
        console.print(f"[red]{count} x {error}[/red]")
