"""EngineConfig: what one serving pod runs. The operator writes it as `engine.json`; the runtime reads it.

The contract between control plane and pod (docs/architecture.md, "Data flow"). It holds vLLM's own speculative
keys, so what the operator renders is exactly what vLLM receives.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .speculative import (DEFAULT_NGRAM_DRAFTER, MODEL_PATTERN, SPECULATIVE_FLAGS, NgramDrafter, Problem,
                          SpeculativeConfig, drafter_problems, path_problem)

# GPUs a SpeculativeDeployment can ask for; the engine also runs on "cpu" (vLLM's CPU build, for tests).
GpuVendor = Literal["amd", "nvidia"]
Vendor = Literal[GpuVendor, "cpu"]
MAX_ACCELERATORS = 16

DEFAULT_PORT = 8000

# Flags the runtime derives from EngineConfig itself, with what sets them; user args may not repeat them.
FLAG_SOURCES: dict[str, str] = {
    "--model": "model", "--served-model-name": "servedModelName", "--tensor-parallel-size": "accelerator.count",
    "-tp": "accelerator.count", "--host": "the pod's network setup", "--port": "the pod's network setup",
    "--shutdown-timeout": "engine.drainSeconds",
}
OWNED_FLAGS: frozenset[str] = frozenset(FLAG_SOURCES) | SPECULATIVE_FLAGS

# vLLM's `--config FILE` reads more flags from a YAML file, which no check here can see.
CONFIG_FILE_FLAG = "--config"
# Every flag a user arg may not name, however it is spelled.
RESERVED_FLAGS: frozenset[str] = OWNED_FLAGS | {CONFIG_FILE_FLAG}

# The longest drain a pod may take (spec.engine.drainSeconds' bound).
MAX_SHUTDOWN_TIMEOUT_S = 3600
# What vLLM needs after the drain to stop its engine processes and free the GPU, so the runtime's grace
# period is the drain plus this.
TEARDOWN_S = 10

# Turns off every vllm: metric, which tuning reads.
DISABLE_LOG_STATS = "--disable-log-stats"

# An argv item or environment value: anything but NUL, which execve cannot pass.
NO_NUL_PATTERN = r"^[^\x00]*$"
# An environment variable's name as execve can pass it: not empty, no '=' (it would end the name), no NUL.
ENV_NAME_PATTERN = r"^[^=\x00]+$"


class Accelerator(BaseModel):
    """What the engine runs on; the SpeculativeDeployment's `spec.accelerator` extends it for the pod."""

    model_config = ConfigDict(extra="forbid")

    vendor: Vendor = "amd"
    count: int = Field(default=1, ge=1, le=MAX_ACCELERATORS)


class EngineConfig(BaseModel):
    """One vLLM server: target model, accelerator, speculative config, extra args and env."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, pattern=MODEL_PATTERN)
    served_model_name: str | None = Field(default=None, pattern=MODEL_PATTERN)
    accelerator: Accelerator = Field(default_factory=Accelerator)
    speculative: SpeculativeConfig = Field(default_factory=lambda: SpeculativeConfig(method="off"))
    args: list[Annotated[str, Field(pattern=NO_NUL_PATTERN)]] = Field(default_factory=list)
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], Annotated[str, Field(pattern=NO_NUL_PATTERN)]] = \
        Field(default_factory=dict)
    host: str = Field(default="0.0.0.0", pattern=NO_NUL_PATTERN)
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    # Export drafted tokens per position through specpilot's vLLM stat-logger plugin.
    drafted_per_position_metric: bool = True
    # vLLM's --shutdown-timeout: after SIGTERM, refuse new requests and let those in flight finish for this
    # many seconds (vLLM's default 0 aborts them). None leaves the flag out (vLLM's default).
    shutdown_timeout_s: int | None = Field(default=None, ge=0, le=MAX_SHUTDOWN_TIMEOUT_S)
    # Draft length set live (live.py): the live.json the engine follows, under the started N and the table the
    # speculative section starts with (a table it must have, or vLLM keeps no batch size -> K list to rewrite).
    # None: K is the started N's table, fixed.
    live_file: str | None = Field(default=None, max_length=4095, pattern=r"^/[^\x00]*$")
    # Drain set without a restart (drain.py): the drain.json whose seconds, read when SIGTERM arrives, cut the drain
    # to at most shutdown_timeout_s. None: the drain is shutdown_timeout_s, fixed.
    drain_file: str | None = Field(default=None, max_length=4095, pattern=r"^/[^\x00]*$")
    # Which drafter serves method ngram: vLLM's own, or "confidence", specpilot's (proposer.py: each draft cut to
    # what its match length earns), which vLLM runs as method custom_class (spec.speculative.ngramDrafter).
    ngram_drafter: NgramDrafter = DEFAULT_NGRAM_DRAFTER

    def problems(self) -> list[Problem]:
        return (model_problems(self.model, "model")
                + self.speculative.problems("speculative", self.accelerator.count)
                + arg_problems(self.args, "args") + self._drafter_problems())

    def _drafter_problems(self) -> list[Problem]:
        s = self.speculative
        return drafter_problems(self.ngram_drafter, s.method, bool(s.num_speculative_tokens_per_batch_size),
                                self.accelerator.vendor, "ngram_drafter", "speculative.num_speculative_tokens_per_batch_size")


def model_problems(model: str, path: str) -> list[Problem]:
    """The target model as a path the pod can open (speculative.path_problem; the draft's is checked with
    the speculative config). `specpilot validate` runs it on spec.model."""
    found = path_problem(model)
    return [Problem(path, found)] if found else []


def option_name(arg: str) -> str | None:
    """The option an argv item names, normalised the way vLLM 0.33's FlexibleArgumentParser does before
    argparse sees it; None for a value.

    `--tensor_parallel_size=4` -> `--tensor-parallel-size` (underscores read as dashes up to the first '.');
    `--speculative-config.method=ngram` -> `--speculative-config` (a dotted sub-key replaces the whole JSON
    value); `-tp=4` -> `-tp`. `-` and `--` are not options.
    """
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = arg.split("=", 1)[0].split(".", 1)[0]
    if name.startswith("--"):
        name = name.replace("_", "-")
    return name if name not in ("-", "--") else None


def reserved_flags_named(arg: str, flags: frozenset[str] = RESERVED_FLAGS) -> list[str]:
    """The flags of `flags` that `arg` may select in vLLM: its own normalised name, or any flag that name
    abbreviates. argparse (allow_abbrev) takes an unambiguous prefix of a long option, and of a short one
    like `-tp`; refusing every prefix of a reserved flag needs no list of vLLM's other flags, and an
    ambiguous prefix would only make vLLM exit."""
    name = option_name(arg)
    return sorted(f for f in flags if f.startswith(name)) if name else []


def _spelled(arg: str, flags: list[str]) -> str:
    """How a problem names the argument: the flag itself, or the spelling and what vLLM reads it as."""
    literal = arg.split("=", 1)[0]
    if flags == [literal]:
        return literal
    if len(flags) == 1:
        return f"{literal} (vLLM reads it as {flags[0]})"
    more = ", ..." if len(flags) > 3 else ""
    return f"{literal} (vLLM may read it as {', '.join(flags[:3])}{more})"


# vLLM 0.33 serves no batch-size schedule under data parallelism > 1 (docs/references.md §6).
DATA_PARALLEL_FLAGS = frozenset({"--data-parallel-size", "-dp"})


def data_parallel_size(args: list[str]) -> int:
    """The data-parallel size `args` ask vLLM for, in any spelling it accepts (`--data-parallel-size 2`,
    `--data_parallel_size=2`, `-dp 2`, an abbreviation); 1 when none, or when the value is no whole number
    (vLLM refuses that itself). The last one given wins, as in argparse."""
    size = 1
    for i, arg in enumerate(args):
        if not reserved_flags_named(arg, DATA_PARALLEL_FLAGS):
            continue
        value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
        try:
            size = int(value)  # as argparse's type=int reads it: " 2", "1_0" and "٢" are whole numbers too
        except ValueError:
            continue
    return size


def arg_problems(args: list[str], path: str, tuning: bool = False) -> list[Problem]:
    """Engine args that would fight what specpilot renders (or hide the metrics tuning needs), in every
    spelling vLLM accepts."""
    p: list[Problem] = []
    for i, arg in enumerate(args):
        where = f"{path}[{i}]"
        reserved = reserved_flags_named(arg)
        if any(f in SPECULATIVE_FLAGS for f in reserved):
            p.append(Problem(where, f"{_spelled(arg, reserved)} is reserved: set spec.speculative instead"))
        elif CONFIG_FILE_FLAG in reserved:
            p.append(Problem(where, f"{_spelled(arg, reserved)} reads more vLLM flags from a file that "
                                    "specpilot cannot check: put them in spec.engine.args instead"))
        elif reserved:
            sources = sorted({FLAG_SOURCES[f] for f in reserved})
            p.append(Problem(where, f"{_spelled(arg, reserved)} is set by specpilot from "
                                    f"{' and '.join(sources)}; remove it"))
        elif tuning and reserved_flags_named(arg, frozenset({DISABLE_LOG_STATS})):
            p.append(Problem(where, f"{_spelled(arg, [DISABLE_LOG_STATS])} turns off the vllm: metrics that "
                                    "tuning reads; remove it or set spec.tuning.enabled=false"))
    return p
