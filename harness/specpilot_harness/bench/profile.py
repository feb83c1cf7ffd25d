"""Benchmark profiles: a deployment's true acceptance and step times, and the oracle computed from them.

Shape (see docs/benchmark.md); unknown keys are ignored so profiles can carry calibration notes:

    {"profiles": [{"name": str, "method": str, "max_n": int,
                   "survival": [S_1, ..., S_max_n], "survival_by_n": {"N": [S_1..S_N]},   # optional
                   "step_time_ms": {"B": [t(0), ..., t(max_n)]}, "concurrency": {"B": weight},
                   "noise": float, "default_n": int}]}                                   # default_n optional
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specpilot_runtime.speculative import METHODS


class ProfileError(ValueError):
    """A profile file that does not have the documented shape; the message names the field."""


@dataclass(frozen=True)
class Profile:
    name: str
    method: str
    max_n: int
    survival: tuple[float, ...]
    survival_by_n: dict[int, tuple[float, ...]]
    step_time_ms: dict[int, tuple[float, ...]]
    concurrency: dict[int, float]  # normalised weights
    noise: float
    default_n: int
    family: str = ""  # cost-shape family of a generated profile (results are summarised by it)

    def survival_at(self, n: int) -> tuple[float, ...]:
        """S_1..S_N when running at N."""
        if n in self.survival_by_n:
            return self.survival_by_n[n][:n]
        return self.survival[:n]

    def expected_length(self, n: int) -> float:
        return 1.0 + sum(self.survival_at(n))

    def goodput_at(self, n: int, load: int) -> float:
        """Tokens per ms per pod at load B."""
        return load * self.expected_length(n) / self.step_time_ms[load][n]

    def goodput(self, n: int) -> float:
        """G(N) = sum_B w_B * B * E[L_N] / t(N, B)."""
        return sum(w * self.goodput_at(n, b) for b, w in self.concurrency.items())

    def oracle_n(self) -> int:
        return max(range(self.max_n + 1), key=self.goodput)


def _floats(v: Any, where: str, length: int | None = None) -> tuple[float, ...]:
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) for x in v):
        raise ProfileError(f"{where}: must be a list of numbers")
    if length is not None and len(v) < length:
        raise ProfileError(f"{where}: needs at least {length} values, has {len(v)}")
    return tuple(float(x) for x in v)


def _survival(v: Any, where: str, length: int) -> tuple[float, ...]:
    s = _floats(v, where, length)
    if any(not 0.0 <= x <= 1.0 for x in s) or any(b > a + 1e-12 for a, b in zip(s, s[1:])):
        raise ProfileError(f"{where}: must be non-increasing probabilities in [0, 1]")
    return s


def parse_profile(d: Any, index: int = 0) -> Profile:
    where = f"profiles[{index}]"
    if not isinstance(d, dict):
        raise ProfileError(f"{where}: must be an object")
    for key in ("name", "method", "max_n", "survival", "step_time_ms", "concurrency", "noise"):
        if key not in d:
            raise ProfileError(f"{where}.{key}: missing")
    method = d["method"]
    if method not in METHODS:
        raise ProfileError(f"{where}.method: unknown method {method!r}, allowed: {', '.join(METHODS)}")
    max_n = d["max_n"]
    if not isinstance(max_n, int) or max_n < 1:
        raise ProfileError(f"{where}.max_n: must be an integer >= 1")
    survival = _survival(d["survival"], f"{where}.survival", max_n)
    by_n = {}
    for k, v in (d.get("survival_by_n") or {}).items():
        by_n[int(k)] = _survival(v, f"{where}.survival_by_n.{k}", int(k))
    steps = {}
    for b, row in d["step_time_ms"].items():
        steps[int(b)] = _floats(row, f"{where}.step_time_ms.{b}", max_n + 1)
        if any(t <= 0 for t in steps[int(b)]):
            raise ProfileError(f"{where}.step_time_ms.{b}: step times must be positive")
    conc = {int(b): float(w) for b, w in d["concurrency"].items()}
    if not conc or any(w < 0 for w in conc.values()) or sum(conc.values()) <= 0:
        raise ProfileError(f"{where}.concurrency: needs positive weights")
    missing = [b for b in conc if b not in steps]
    if missing:
        raise ProfileError(f"{where}.step_time_ms: no row for concurrency {missing}")
    total = sum(conc.values())
    noise = float(d["noise"])
    if not 0.0 <= noise < 1.0:
        raise ProfileError(f"{where}.noise: must be in [0, 1)")
    default_n = int(d.get("default_n", min(METHODS[method].default_n, max_n)))
    return Profile(name=str(d["name"]), method=method, max_n=max_n, survival=survival, survival_by_n=by_n,
                   step_time_ms=steps, concurrency={b: w / total for b, w in conc.items()}, noise=noise,
                   default_n=default_n, family=str(d.get("family", "")))


def parse_profiles(doc: Any) -> list[Profile]:
    """Every profile in a profile file's JSON document."""
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list) or not doc["profiles"]:
        raise ProfileError('profiles: the file needs {"profiles": [ ... ]} with at least one profile')
    return [parse_profile(p, i) for i, p in enumerate(doc["profiles"])]
