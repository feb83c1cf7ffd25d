"""A serving pod's EngineConfig -> the simulated engine that stands in for its vLLM. Pure.

The sandbox's pod runner uses this so simulated pods serve what the operator rendered: N, method,
served model name, port, the batch-size schedule, the live file and the plugin switch come from the pod's `engine.json`
(the schedule from the same speculative config the real runtime hands vLLM); the profile is named
by the pod's `specpilot.io/sim-profile` annotation and looked up in the runner's profiles file
(docs/simulator.md, "Pods: the profile annotation contract").
"""

from __future__ import annotations

import hashlib
import json
import sys

from specpilot_runtime.engine_config import EngineConfig
from .profile import Profile
from .command import LIVE_FILE_FLAG, SCHEDULE_FLAG
from .server import SimConfig

# Annotations on a SpeculativeDeployment that the sandbox reads for its simulated pods (never copied onto
# pods; the operator does not know them): the profile the engines serve, how fast their clock runs, and
# what a batch-size table costs their steps (overriding the profile's `table_cost`).
SIM_PROFILE_ANNOTATION = "specpilot.io/sim-profile"
SIM_TIME_SCALE_ANNOTATION = "specpilot.io/sim-time-scale"
SIM_TABLE_COST_ANNOTATION = "specpilot.io/sim-table-cost"


def sim_time_scale(annotations: dict[str, str]) -> float:
    """How many times faster than wall time the engines' clock runs (1 for a value that is not a
    positive finite number)."""
    try:
        scale = float(annotations.get(SIM_TIME_SCALE_ANNOTATION, 1.0))
    except ValueError:
        return 1.0
    return scale if 0 < scale < float("inf") else 1.0


def sim_table_cost(annotations: dict[str, str]) -> float | None:
    """The share a batch-size table adds to the engines' step time, from the annotation (None without it:
    the profile's own `table_cost`). ValueError, naming the annotation, for anything but a finite number
    in [0, 1]: a cost nobody asked for must not pass silently."""
    text = annotations.get(SIM_TABLE_COST_ANNOTATION)
    if text is None:
        return None
    try:
        cost = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"annotation {SIM_TABLE_COST_ANNOTATION}: {str(text)[:60]!r} is not a number; "
                         "expected the share a batch-size table adds to each step's time, 0 to 1") from None
    if not 0.0 <= cost <= 1.0:  # NaN fails both comparisons; an infinity the upper one
        raise ValueError(f"annotation {SIM_TABLE_COST_ANNOTATION}: {str(text)[:60]!r} is outside 0 to 1 "
                         "(the share a batch-size table adds to each step's time)")
    return cost


def with_table_cost(profile: Profile, annotations: dict[str, str]) -> Profile:
    """`profile` with the annotation's table cost, if it sets one. Raises ValueError (`sim_table_cost`)."""
    cost = sim_table_cost(annotations)
    return profile if cost is None else profile.model_copy(update={"table_cost": cost})


def served_name(engine: EngineConfig) -> str:
    """vLLM serves the model path as its name unless --served-model-name is given."""
    return engine.served_model_name or engine.model


def pod_seed(pod_name: str) -> int:
    """A stable seed per pod, so replicas of one track draw differently but reproducibly."""
    return int.from_bytes(hashlib.sha256(pod_name.encode()).digest()[:4], "big")


def batch_size_schedule(engine: EngineConfig) -> tuple[tuple[int, int, int], ...] | None:
    """The speculative config's num_speculative_tokens_per_batch_size rows; None without any."""
    rows = engine.speculative.num_speculative_tokens_per_batch_size
    return tuple(rows) if rows else None


def sim_config(engine: EngineConfig, profile: Profile, host: str, *, time_scale: float = 1.0,
               seed: int | None = None) -> SimConfig:
    """In-process: the SimConfig for `SimServer` (raises ProfileError when N is outside the profile)."""
    n = engine.speculative.num_speculative_tokens
    profile.survival_at(n)
    return SimConfig(profile=profile, num_speculative_tokens=n, method=engine.speculative.method,
                     served_model_name=served_name(engine), host=host, port=engine.port,
                     time_scale=time_scale, seed=seed,
                     drafted_per_position_metric=engine.drafted_per_position_metric,
                     shutdown_timeout_s=float(engine.shutdown_timeout_s or 0),
                     num_speculative_tokens_per_batch_size=batch_size_schedule(engine),
                     live_file=engine.live_file)


def simulate_argv(engine: EngineConfig, profiles_file: str, profile_name: str, host: str, *,
                  time_scale: float = 1.0, seed: int | None = None) -> list[str]:
    """As a process: `specpilot-runtime simulate ...` for this pod (an argv list, never a shell string)."""
    out = [sys.executable, "-m", "specpilot_runtime.cli", "simulate",
           "--profile", profiles_file, "--name", profile_name,
           "--num-speculative-tokens", str(engine.speculative.num_speculative_tokens),
           "--method", engine.speculative.method, "--served-model-name", served_name(engine),
           "--host", host, "--port", str(engine.port), "--time-scale", repr(time_scale)]
    if seed is not None:
        out += ["--seed", str(seed)]
    schedule = batch_size_schedule(engine)
    if schedule:
        out += [SCHEDULE_FLAG, json.dumps([list(r) for r in schedule])]
    if not engine.drafted_per_position_metric:
        out.append("--no-drafted-per-position-metric")
    if engine.shutdown_timeout_s:
        out += ["--shutdown-timeout", str(engine.shutdown_timeout_s)]
    if engine.live_file:
        out += [LIVE_FILE_FLAG, engine.live_file]
    return out
