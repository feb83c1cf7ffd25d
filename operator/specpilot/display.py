"""Text from outside the operator (a pod's /metrics, the scheduler's messages, a spec) made fit for a
status condition, an Event or a log line: printable and bounded. A pod may put megabytes into a label
value, and a condition that carried it would grow the object past what the API server takes (3 MiB per
request, 1.5 MiB per object in etcd): every window's status write would then fail, and with it the one
place that says why."""

from __future__ import annotations

from collections.abc import Sequence


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped (a newline or a terminal escape from a
    pod must not start a log line of its own or recolour one)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def bounded(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(f"... ({len(text)} more characters)"), 0)  # the count has at most these digits
    return f"{text[:keep]}... ({len(text) - keep} more characters)"


def some_of(names: Sequence[str], shown: int = 3) -> str:
    """'a, b, c and 7 more': a list that may be as long as a deployment has pods, named in a line."""
    head = ", ".join(names[:shown])
    return f"{head} and {len(names) - shown} more" if len(names) > shown else head
