"""Profiles: a deployment's true acceptance curve, step-time table and load mix. The simulated engine
runs by them and the tuner benchmark scores against them (its oracle is computed here): one schema for
one file format (docs/benchmark.md):

    {"profiles": [{"name": str, "method": str, "max_n": int,
                   "survival": [S_1, ..., S_max_n], "survival_by_n": {"N": [S_1..S_N]},   # optional
                   "step_time_ms": {"B": [t(0), ..., t(max_n)]}, "concurrency": {"B": weight},
                   "noise": float, "default_n": int, "family": str,      # default_n, family optional
                   "kv": {"blocks": int, "block_tokens": int,                 # optional: KV capacity
                          "draft_weight_blocks": int, "draft_kv_ratio": float},
                   "table_cost": float}]}                                    # optional, 0..1, default 0

`table_cost` is the share a batch-size table (vLLM's num_speculative_tokens_per_batch_size: a schedule, or
the table a switchback pod carries so its K can be set live) adds to every engine step's time, whatever K
the step drafts (K = 0 included). On GPUs a table costs: vLLM stops padding decode requests to one draft
length and its V1 model runner falls back from full CUDA graphs to piecewise ones; users measured +6.6% to
+21.6% TPOT at K = 0 (vllm-project/vllm#49548). 0 (the default) makes a table free, as every profile was before.
The simulated engine charges it to an engine that serves a table; the tuner benchmark to a track that
does; the oracles are computed without it (the best static configuration: no table, `step_time`).

Method "off" (no speculation) has max_n 0 and no survival. A load level without a row of its own steps
as `step_time` interpolates, in the simulated engine and in the oracle alike. Unknown keys are ignored so
calibration notes can travel with a profile. Pure: reading the file is the caller's job (`load_profiles`
takes text).
"""

from __future__ import annotations

import bisect
import json
from importlib import resources
from pathlib import Path

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specpilot_runtime.speculative import METHODS, OFF

# The example profiles shipped with the runtime, so `simulate` runs without the operator's files.
BUNDLED_PROFILES = "profiles.json"


MAX_NAME = 253  # a profile's or tournament's name: it labels tables, logs and JSON rows


class ProfileError(ValueError):
    """A profile file or profile that cannot drive an engine; the message names the field."""


def entry_label(raw: Any, i: int) -> str:
    """How an error names the i-th entry of a file: its name if it has one (shortened), else its index."""
    name = raw.get("name") if isinstance(raw, dict) else None
    if not isinstance(name, str):
        return f"#{i}"
    return name if len(name) <= 60 else f"{name[:60]}..."


def _check_curve(curve: list[float], where: str) -> list[float]:
    if any(not 0.0 <= s <= 1.0 for s in curve):
        raise ValueError(f"{where}: every S_k must lie in [0, 1]")
    if any(b > a for a, b in zip(curve, curve[1:])):
        raise ValueError(f"{where}: S_k must be non-increasing (S_k = P(first k drafts accepted))")
    return curve


# The most KV blocks a profile may give an engine: vLLM's num_gpu_blocks on the largest GPUs is in the
# hundreds of thousands; the engine sums blocks per request every step.
MAX_KV_BLOCKS = 10_000_000


class KvCapacity(BaseModel):
    """The target's KV cache and what speculation takes of it, as vLLM sizes it: `blocks` of `block_tokens`
    tokens (num_gpu_blocks with no draft loaded); at N > 0 a draft model's weights take
    `draft_weight_blocks` of them and its KV `draft_kv_ratio` of the target's per token, and every sequence
    reserves N lookahead slots. A profile without it admits requests by max_num_seqs alone and never
    preempts (the engine as it was)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    blocks: int = Field(ge=1, le=MAX_KV_BLOCKS)
    block_tokens: int = Field(default=16, ge=1, le=1024)
    draft_weight_blocks: int = Field(default=0, ge=0)
    draft_kv_ratio: float = Field(default=0.0, ge=0.0, le=4.0)

    @model_validator(mode="after")
    def _room_left(self) -> KvCapacity:
        if self.draft_weight_blocks >= self.blocks:
            raise ValueError(f"draft_weight_blocks {self.draft_weight_blocks} leaves none of the {self.blocks} "
                             "blocks for requests")
        return self


class Profile(BaseModel):
    """One workload on one deployment: how often drafts survive and how long an engine step takes."""

    # Profiles come from files anyone may hand the engine or the bench: an infinite weight or a NaN step
    # time would pass every range check below and poison the draws.
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=MAX_NAME)
    method: str = Field(min_length=1)
    max_n: int = Field(ge=0)  # 0 only for method "off": no speculation, nothing to draft
    survival: list[float] = Field(default_factory=list)
    survival_by_n: dict[int, list[float]] = Field(default_factory=dict)
    step_time_ms: dict[int, list[float]]
    concurrency: dict[int, float] = Field(default_factory=dict)  # load mix, weights normalised to sum 1
    noise: float = Field(default=0.0, ge=0.0, lt=1.0)
    default_n: int = Field(default=0, ge=0)  # the N a user starts from: the method's default, capped at max_n
    family: str = ""  # cost-shape family of a generated profile (benchmark results are summarised by it)
    kv: KvCapacity | None = None  # KV capacity, admission and preemption (opt-in: None keeps them off)
    # The share a batch-size table adds to each step's time (vLLM drops decode padding to one draft length
    # and full CUDA graphs for piecewise ones: +6.6-21.6% TPOT at K = 0, vllm-project/vllm#49548); 0: free.
    table_cost: float = Field(default=0.0, ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and "default_n" not in data and data.get("method") in METHODS \
                and isinstance(data.get("max_n"), int):
            data = {**data, "default_n": min(METHODS[data["method"]].default_n, data["max_n"])}
        return data

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in METHODS:
            raise ValueError(f"unknown method {v!r}, allowed: {', '.join(METHODS)}")
        return v

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, v: dict[int, float]) -> dict[int, float]:
        if not v:
            return v
        if any(b < 1 or w < 0 for b, w in v.items()) or sum(v.values()) <= 0:
            raise ValueError("load levels must be >= 1 with non-negative weights, not all zero")
        total = sum(v.values())
        return {b: w / total for b, w in v.items()}

    @field_validator("survival")
    @classmethod
    def _survival(cls, v: list[float]) -> list[float]:
        return _check_curve(v, "survival")

    @field_validator("survival_by_n")
    @classmethod
    def _survival_by_n(cls, v: dict[int, list[float]]) -> dict[int, list[float]]:
        for n, curve in v.items():
            if len(curve) < n:
                raise ValueError(f"survival_by_n[{n}]: needs {n} values, got {len(curve)}")
            _check_curve(curve, f"survival_by_n[{n}]")
        return v

    @field_validator("step_time_ms")
    @classmethod
    def _step_times(cls, v: dict[int, list[float]]) -> dict[int, list[float]]:
        if not v:
            raise ValueError("needs at least one load level")
        for b, times in v.items():
            if b < 1:
                raise ValueError(f"load level {b}: concurrency must be >= 1")
            if not times or any(t <= 0 for t in times):
                raise ValueError(f"step_time_ms[{b}]: step times must be positive milliseconds")
        return v

    @model_validator(mode="after")
    def _covers_max_n(self) -> Profile:
        if (self.method == OFF) != (self.max_n == 0):
            raise ValueError(f"max_n is {self.max_n}: method {OFF!r} drafts nothing and needs max_n 0; "
                             f"every other method needs max_n >= 1")
        for n in range(1, self.max_n + 1):
            if n not in self.survival_by_n and len(self.survival) < n:
                raise ValueError(f"survival has {len(self.survival)} values but max_n is {self.max_n}")
        for b, times in self.step_time_ms.items():
            if len(times) < self.max_n + 1:
                raise ValueError(f"step_time_ms[{b}] has {len(times)} values; needs max_n + 1 = {self.max_n + 1}")
        if self.default_n > self.max_n:
            raise ValueError(f"default_n {self.default_n} is above max_n {self.max_n}")
        return self

    def survival_at(self, n: int) -> tuple[float, ...]:
        """S_1..S_n when the engine runs at N = n: the `survival_by_n` override if any (parallel
        drafters, whose k-th token depends on N), else the first n values of `survival`."""
        self._check_n(n)
        curve = self.survival_by_n.get(n, self.survival)
        return tuple(curve[:n])

    def step_time(self, n: int, running: float) -> float:
        """Noise-free step time in ms at N = n with `running` sequences in the batch.

        Linear in concurrency between the profile's load levels; flat below the lowest level (decode is
        memory bound there) and extended along the last segment above the highest, never below it.
        """
        self._check_n(n)
        if running in self.step_time_ms:
            return self.step_time_ms[int(running)][n]  # equal to a level's int key, so the same entry
        levels = sorted(self.step_time_ms)
        times = [self.step_time_ms[b][n] for b in levels]
        b = max(running, 1)
        if len(levels) == 1 or b <= levels[0]:
            return times[0]
        hi = min(bisect.bisect_left(levels, b), len(levels) - 1)
        lo = hi - 1
        slope = (times[hi] - times[lo]) / (levels[hi] - levels[lo])
        t = times[lo] + slope * (b - levels[lo])
        return max(t, times[-1]) if b > levels[-1] else t

    def expected_length(self, n: int) -> float:
        """E[L_N]: tokens per verify step at N."""
        return 1.0 + sum(self.survival_at(n))

    def goodput_at(self, n: int, load: float) -> float:
        """Tokens per ms per pod at N with `load` sequences running (a measured mean may be fractional:
        the step takes the time of the nearest whole batch)."""
        return load * self.expected_length(n) / self.step_time(n, max(1, round(load)))

    def goodput(self, n: int) -> float:
        """G(N) = sum_B w_B * B * E[L_N] / t(N, B) over the profile's load mix."""
        return sum(w * self.goodput_at(n, b) for b, w in self.concurrency.items())

    def oracle_n(self) -> int:
        """The best N for the load mix: what a tuner is scored against."""
        return max(range(self.max_n + 1), key=self.goodput)

    def _check_n(self, n: int) -> None:
        if not 0 <= n <= self.max_n:
            raise ProfileError(f"profile {self.name!r}: num_speculative_tokens {n} is outside 0..max_n "
                               f"({self.max_n})")


def load_profiles(text: str, source: str = "profiles") -> dict[str, Profile]:
    """Parse a profiles file; every error names the profile and the field."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"{source}: not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
        raise ProfileError(f"{source}: expected an object with a 'profiles' list")
    out: dict[str, Profile] = {}
    for i, raw in enumerate(doc["profiles"]):
        label = entry_label(raw, i)
        try:
            profile = Profile.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "profile"
            raise ProfileError(f"{source}: profiles[{i}] ({label}): {field}: {first['msg']}") from e
        if profile.name in out:
            raise ProfileError(f"{source}: profile name {profile.name!r} appears twice")
        out[profile.name] = profile
    if not out:
        raise ProfileError(f"{source}: no profiles")
    return out


def read_profile(path: str | Path | None, name: str | None) -> Profile:
    """The named profile from a file (the bundled examples when path is None).

    `name` may be omitted only when the file holds exactly one profile.
    """
    if path is None:
        text = resources.files(__package__).joinpath(BUNDLED_PROFILES).read_text(encoding="utf-8")
        source = f"bundled {BUNDLED_PROFILES}"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ProfileError(f"cannot read profiles file {path}: {e.strerror}") from e
        source = str(path)
    profiles = load_profiles(text, source)
    if name is None:
        if len(profiles) != 1:
            raise ProfileError(f"{source} holds {len(profiles)} profiles; pick one with --name: "
                               f"{', '.join(sorted(profiles))}")
        return next(iter(profiles.values()))
    if name not in profiles:
        raise ProfileError(f"{source} has no profile {name!r}; it has: {', '.join(sorted(profiles))}")
    return profiles[name]
