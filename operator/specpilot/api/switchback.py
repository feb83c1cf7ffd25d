"""Draft lengths measured live (spec.tuning.measure switchback): the N a serving pod starts at, and the
CUDA-graph settings that keep every draft length K <= that N inside a captured graph. Pure; validate and
render share it (docs/api.md, "Draft lengths measured live").

Why capture settings at all: vLLM captures CUDA graphs for batches of up to `max_cudagraph_capture_size`
tokens and runs larger ones eagerly (vLLM 0.32/0.33 `config/vllm.py`, `_set_cudagraph_sizes`). Left to its
default it caps that at min(max_num_seqs x (N + 1) x 2, 512), then at `max_num_batched_tokens`; a decode
step of every sequence at K drafts is max_num_seqs x (K + 1) tokens, so a pod that may be set to any K <= N
needs max_num_seqs x (N + 1) captured. The default token grid it captures is 1, 2, 4, multiples of 8 below
256, multiples of 16 from 256 up to the cap, plus `max_num_batched_tokens` when it is within the cap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from specpilot_runtime.engine_config import GpuVendor, Vendor, option_name, reserved_flags_named
from specpilot_runtime.live import MIN_DWELL_S
from specpilot_runtime.speculative import OFF, Problem, live_method, max_n

from .models import SWITCHBACK_DEFAULT_N, SpeculativeDeployment, SpeculativeDeploymentSpec, Tuning

# Arm visits per analysis window (4-second dwells in a 5-minute window), and the longest mean dwell.
DWELLS_PER_WINDOW = 75
MAX_MEAN_DWELL_S = 10.0

# vLLM's API-server defaults when the args set none (`engine/arg_utils.py`, `get_batch_defaults`): 1024
# sequences on every GPU of 70 GiB or more but the A100 (H100, H200, MI300X and later; 256 on smaller ones,
# so 1024 is never too few), and 8192 batched tokens on those up to 160 GiB (H100, H200), 16384 above
# (MI300X and later Instincts, B200). `--performance-mode throughput` doubles both.
DEFAULT_MAX_NUM_SEQS = 1024
DEFAULT_MAX_NUM_BATCHED_TOKENS: dict[GpuVendor, int] = {"amd": 16384, "nvidia": 8192}
THROUGHPUT_FACTOR = 2

MAX_NUM_SEQS_FLAG = "--max-num-seqs"
MAX_NUM_BATCHED_TOKENS_FLAG = "--max-num-batched-tokens"
MAX_CAPTURE_FLAG = "--max-cudagraph-capture-size"
CAPTURE_SIZES_FLAG = "--cudagraph-capture-sizes"
COMPILATION_FLAGS = frozenset({"--compilation-config", "-cc"})
EAGER_FLAGS = frozenset({"--enforce-eager", "--no-enforce-eager"})
PERFORMANCE_MODE_FLAG = "--performance-mode"
LORA_FLAGS = frozenset({"--enable-lora", "--no-enable-lora"})
PIPELINE_PARALLEL_FLAGS = frozenset({"--pipeline-parallel-size", "-pp"})
# Keys of vLLM's compilation config that size the capture (as --compilation-config JSON or -cc.KEY=VALUE).
MAX_CAPTURE_KEY = "max_cudagraph_capture_size"
CAPTURE_SIZES_KEY = "cudagraph_capture_sizes"
CUDAGRAPH_MODE_KEY = "cudagraph_mode"


def measured_live(sd: SpeculativeDeployment) -> bool:
    """Whether this deployment's (contender's) stable pods follow live.json: switchback on, and a method
    `live_method` serves live."""
    tuning = sd.spec.tuning
    return tuning.enabled and tuning.measure == "switchback" and live_method(sd.spec.speculative.method)


def tuner_tuning(spec: SpeculativeDeploymentSpec) -> Tuning:
    """spec.tuning as the tuner reads it: tableCheck auto resolved, on where the pods capture CUDA graphs
    (a batch-size table costs them their full graphs), off where they run eagerly (--enforce-eager,
    cudagraph_mode NONE: vLLM's CPU build, say), where a table costs nothing to check for."""
    tuning = spec.tuning
    if tuning.table_check != "auto":
        return tuning
    eager = spec.accelerator.vendor == "cpu" or user_capture(spec.engine.args).eager
    return tuning.model_copy(update={"table_check": "off" if eager else "on"})


def dwell_range(window_s: float) -> tuple[float, float]:
    """How long an arm stays in force per visit (seconds, drawn uniformly in this range): short next to the
    analysis window, so each window holds dozens of visits of each arm and what moves within it (load,
    request mix) falls on both alike; not below MIN_DWELL_S, where a switch's discounted steps would be a
    large share of the visit."""
    mean = min(max(window_s / DWELLS_PER_WINDOW, MIN_DWELL_S), MAX_MEAN_DWELL_S)
    return max(mean / 2, MIN_DWELL_S), max(mean * 1.5, MIN_DWELL_S)


def top_candidate(method: str, block_size: int | None, candidates: list[int] | None) -> int:
    """The largest N the tuner may set without a restart: the largest tuning candidate (within the method's
    limit: an alternative inherits candidates it cannot run), else the method's limit capped at
    SWITCHBACK_DEFAULT_N."""
    if method == OFF:
        return 0
    top = max(candidates) if candidates else SWITCHBACK_DEFAULT_N
    return min(top, max_n(method, block_size))


def started_n(sd: SpeculativeDeployment) -> int:
    """The N a switchback pod starts at: `top_candidate`, never below spec.speculative's own N."""
    s = sd.spec.speculative
    return 0 if s.method == OFF else max(s.num_speculative_tokens,
                                         top_candidate(s.method, s.block_size, sd.spec.tuning.candidates))


def capture_grid_ceil(tokens: int) -> int:
    """The smallest size of vLLM's capture grid holding `tokens`: as the cap, it is itself the largest size
    captured (vLLM truncates a cap off the grid down to the size below)."""
    if tokens <= 4:
        return 1 if tokens <= 1 else 2 if tokens == 2 else 4
    stride = 8 if tokens < 256 else 16
    return max(-(-tokens // stride) * stride, 8)


def captured_max(max_capture: int, max_batched_tokens: int) -> int:
    """The largest batch vLLM captures given both settings (`_set_cudagraph_sizes`): the cap is cut to
    max_num_batched_tokens, which is captured itself when within the cap."""
    if max_batched_tokens <= max_capture:
        return max_batched_tokens
    if max_capture < 8:
        return max(s for s in (1, 2, 4) if s <= max(max_capture, 1))
    return max_capture // 8 * 8 if max_capture < 256 else max_capture // 16 * 16


@dataclass(frozen=True)
class _Setting:
    index: int  # where in the args the user set it (the last one wins, as in argparse)
    value: int | None  # None: not a whole number (vLLM refuses it itself)


@dataclass
class UserCapture:
    """What the user's engine args already say about graphs and batch sizes."""

    eager: bool = False  # --enforce-eager, or a compilation config with cudagraph_mode NONE
    eager_index: int | None = None  # the arg that made it eager (validate names it)
    graph_mode: tuple[int, str] | None = None  # the arg setting cudagraph_mode, and the mode as given
    lora: int | None = None  # the arg enabling LoRA (--enable-lora), when the last such flag does
    pipeline_parallel: _Setting | None = None  # --pipeline-parallel-size / -pp, the last one given
    throughput: bool = False
    max_num_seqs: _Setting | None = None
    max_batched_tokens: _Setting | None = None
    max_capture: _Setting | None = None
    sizes_listed: bool = False  # an explicit capture list: the user sized it


def _value(args: list[str], i: int) -> str:
    arg = args[i]
    return arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")


def _whole(text: str, human: bool = False) -> int | None:
    """An int as vLLM's argparse reads it; with `human`, also its 1k / 1K suffixes (human_readable_int)."""
    text = text.strip()
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    try:
        if human and text[-1:] in units:
            return int(float(text[:-1]) * units[text[-1]]) if text[-1].islower() else \
                int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        return None


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _compilation(found: UserCapture, i: int, arg: str, value: str) -> None:
    """A --compilation-config / -cc item: JSON, or a dotted sub-key (`-cc.max_cudagraph_capture_size=8`)."""
    option = arg.split("=", 1)[0]
    if "." in option:
        doc: object = {option.split(".", 1)[1]: value}
    else:
        try:
            doc = json.loads(value)
        except ValueError:
            return
    if not isinstance(doc, dict):
        return
    if MAX_CAPTURE_KEY in doc:
        raw = doc[MAX_CAPTURE_KEY]
        found.max_capture = _Setting(i, _whole(raw) if isinstance(raw, str) else _as_int(raw))
    if CAPTURE_SIZES_KEY in doc:
        found.sizes_listed = True
    if CUDAGRAPH_MODE_KEY in doc:
        mode = str(doc[CUDAGRAPH_MODE_KEY])
        found.graph_mode = (i, mode)
        if mode.strip().upper() in ("NONE", "0"):
            found.eager, found.eager_index = True, i


def user_capture(args: list[str]) -> UserCapture:
    """Read the user's args in every spelling vLLM accepts (engine_config.reserved_flags_named)."""
    found = UserCapture()
    for i, arg in enumerate(args):
        if option_name(arg) is None:
            continue
        if named := reserved_flags_named(arg, EAGER_FLAGS):
            found.eager = named == ["--enforce-eager"]
            found.eager_index = i if found.eager else None
        elif named := reserved_flags_named(arg, LORA_FLAGS):
            found.lora = i if named == ["--enable-lora"] else None
        elif reserved_flags_named(arg, PIPELINE_PARALLEL_FLAGS):
            found.pipeline_parallel = _Setting(i, _whole(_value(args, i)))
        elif reserved_flags_named(arg, frozenset({PERFORMANCE_MODE_FLAG})):
            found.throughput = _value(args, i) == "throughput"
        elif reserved_flags_named(arg, frozenset({MAX_NUM_SEQS_FLAG})):
            found.max_num_seqs = _Setting(i, _whole(_value(args, i)))
        elif reserved_flags_named(arg, frozenset({MAX_NUM_BATCHED_TOKENS_FLAG})):
            found.max_batched_tokens = _Setting(i, _whole(_value(args, i), human=True))
        elif reserved_flags_named(arg, frozenset({MAX_CAPTURE_FLAG})):
            found.max_capture = _Setting(i, _whole(_value(args, i)))
        elif reserved_flags_named(arg, frozenset({CAPTURE_SIZES_FLAG})):
            found.sizes_listed = True
        elif reserved_flags_named(arg, COMPILATION_FLAGS):
            _compilation(found, i, arg, _value(args, i))
    return found


@dataclass(frozen=True)
class CapturePlan:
    """The capture settings for a pod that may run any K <= n: the argv to append, and what is wrong with
    the user's own settings (paths under `path`)."""

    need: int  # max_num_seqs x (n + 1): the widest decode step
    args: list[str]
    problems: list[Problem]


def capture_plan(args: list[str], vendor: Vendor, n: int, path: str = "spec.engine.args") -> CapturePlan | None:
    """None where no graph is captured: the CPU build, --enforce-eager, cudagraph_mode NONE. Otherwise the
    flags the user left unset, chosen so that vLLM captures max_num_seqs x (n + 1) tokens: the cap on its
    grid, and max_num_batched_tokens at least the widest decode step (never below vLLM's GPU default, so a
    prefill chunk is not cut smaller than it would be)."""
    user = user_capture(args)
    if vendor == "cpu" or user.eager:
        return None
    factor = THROUGHPUT_FACTOR if user.throughput else 1
    seqs = user.max_num_seqs.value if user.max_num_seqs and user.max_num_seqs.value else DEFAULT_MAX_NUM_SEQS * factor
    need = seqs * (n + 1)
    out: list[str] = []
    problems: list[Problem] = []
    why = (f"under spec.tuning.measure switchback every draft length up to the started N ({n}) must run in a "
           f"captured CUDA graph: max_num_seqs ({seqs}) x (N + 1) = {need} tokens")
    tokens = user.max_batched_tokens
    if tokens is None:
        batched = max(need, DEFAULT_MAX_NUM_BATCHED_TOKENS[vendor] * factor)
        out.append(f"{MAX_NUM_BATCHED_TOKENS_FLAG}={batched}")
    else:
        batched = tokens.value or need
        if batched < need:
            problems.append(Problem(f"{path}[{tokens.index}]", f"{MAX_NUM_BATCHED_TOKENS_FLAG} {batched} is too small: "
                                    f"{why}; raise it to at least {need}, lower max_num_seqs or the candidates, "
                                    "or set spec.tuning.measure canary"))
    cap = user.max_capture
    # An explicit list of sizes is the user's to size: nothing added, nothing judged.
    if cap is None and not user.sizes_listed:
        out.append(f"{MAX_CAPTURE_FLAG}={capture_grid_ceil(need)}")
    elif cap is not None and cap.value is not None and batched >= need and captured_max(cap.value, batched) < need:
        problems.append(Problem(f"{path}[{cap.index}]", f"max_cudagraph_capture_size {cap.value} captures batches "
                                f"of at most {captured_max(cap.value, batched)} tokens: {why}; raise it to at "
                                f"least {capture_grid_ceil(need)}, or set spec.tuning.measure canary"))
    return CapturePlan(need, out, problems)
