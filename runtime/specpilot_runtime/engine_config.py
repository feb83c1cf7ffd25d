"""EngineConfig: what one serving pod runs. The operator writes it as `engine.json`; the runtime reads it.

The contract between control plane and pod (ARCHITECTURE "Contracts"). It holds vLLM's own speculative
keys, so what the operator renders is exactly what vLLM receives.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .speculative import SPECULATIVE_FLAGS, Problem, SpeculativeConfig

Vendor = Literal["amd", "nvidia", "cpu"]

DEFAULT_PORT = 8000

# Flags the runtime derives from EngineConfig itself; user args may not repeat them.
OWNED_FLAGS: frozenset[str] = frozenset({
    "--model", "--port", "--host", "--served-model-name", "--tensor-parallel-size", "-tp",
}) | SPECULATIVE_FLAGS

# Turns off every vllm: metric, which tuning reads.
DISABLE_LOG_STATS = "--disable-log-stats"


class Accelerator(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vendor: Vendor = "amd"
    count: int = Field(default=1, ge=1, le=16)


class EngineConfig(BaseModel):
    """One vLLM server: target model, accelerator, speculative config, extra args and env."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    served_model_name: str | None = None
    accelerator: Accelerator = Field(default_factory=Accelerator)
    speculative: SpeculativeConfig = Field(default_factory=lambda: SpeculativeConfig(method="off"))
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    host: str = "0.0.0.0"
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    # Export drafted tokens per position through specpilot's vLLM stat-logger plugin.
    drafted_per_position_metric: bool = True

    def problems(self) -> list[Problem]:
        return self.speculative.problems("speculative") + arg_problems(self.args, "args")


def flag_name(arg: str) -> str:
    """`--foo=bar` -> `--foo`."""
    return arg.split("=", 1)[0]


def arg_problems(args: list[str], path: str, tuning: bool = False) -> list[Problem]:
    """Engine args that would fight what specpilot renders (or hide the metrics tuning needs)."""
    p: list[Problem] = []
    for i, arg in enumerate(args):
        name = flag_name(arg)
        if name in SPECULATIVE_FLAGS:
            p.append(Problem(f"{path}[{i}]", f"{name} is reserved: set spec.speculative instead"))
        elif name in OWNED_FLAGS:
            p.append(Problem(f"{path}[{i}]", f"{name} is set by specpilot from the spec; remove it"))
        elif tuning and name == DISABLE_LOG_STATS:
            p.append(Problem(f"{path}[{i}]", f"{DISABLE_LOG_STATS} turns off the vllm: metrics that "
                                             "tuning reads; remove it or set spec.tuning.enabled=false"))
    return p
