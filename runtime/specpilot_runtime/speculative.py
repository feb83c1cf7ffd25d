"""vLLM's speculative-decoding surface: methods, known config keys and per-method rules.

The single source of truth for what specpilot knows about speculative decoding in vLLM 0.33
(see vLLM's `vllm/config/speculative.py`). The operator's CRD, validation and rendering, the
runtime's argv builder and the tuner's drafter families all derive from this module.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal, Sequence, get_args

from pydantic import BaseModel, ConfigDict, Field


class Family(str, enum.Enum):
    """How a drafter's cost and acceptance depend on N (docs/references.md §3)."""

    SEQUENTIAL = "sequential"  # one drafter step per draft token (MTP, EAGLE, draft model)
    PARALLEL = "parallel"  # one pass drafts the whole block (DFlash, DSpark)
    NEAR_FREE = "near_free"  # lookup-based, no neural drafter (ngram, suffix)
    NONE = "none"  # speculation off


@dataclass(frozen=True)
class MethodRule:
    """What vLLM requires of one `method`, and what specpilot assumes about it."""

    name: str
    family: Family
    draft_model: str  # "required" | "optional" | "forbidden"
    default_n: int  # the common starting N (what people use before tuning)
    block_bound: int | None = None  # N <= block_size + block_bound when a block size is known
    default_block_size: int | None = None
    # True when the k-th draft token does not depend on N, so counters at N give E[L_N'] for N' <= N.
    prefix_transfers: bool = True
    note: str = ""
    # A Python package vLLM imports for this method but does not depend on: the image must ship it.
    package: str | None = None
    # False when vLLM runs the method on a model runner that ignores num_speculative_tokens_per_batch_size
    # (it would start with the table and never use it): a schedule for it is refused, never tuned.
    schedule: bool = True


OFF = "off"

METHODS: dict[str, MethodRule] = {
    r.name: r
    for r in (
        MethodRule("mtp", Family.SEQUENTIAL, "optional", default_n=3,
                   note="built-in MTP layers; a Gemma-4-style MTP assistant is given as the draft model"),
        MethodRule("eagle3", Family.SEQUENTIAL, "required", default_n=3),
        MethodRule("draft_model", Family.SEQUENTIAL, "required", default_n=4),
        MethodRule("dflash", Family.PARALLEL, "required", default_n=7, block_bound=-1,
                   default_block_size=16, prefix_transfers=False,
                   note="drafts 1 + N query tokens: a checkpoint with block size B supports N <= B-1"),
        MethodRule("dspark", Family.PARALLEL, "optional", default_n=7, block_bound=0,
                   default_block_size=16, prefix_transfers=False,
                   note="N above the block size collapses acceptance"),
        MethodRule("ngram", Family.NEAR_FREE, "forbidden", default_n=3),
        MethodRule("suffix", Family.NEAR_FREE, "forbidden", default_n=4,
                   note="needs the arctic-inference package in the image", package="arctic-inference",
                   schedule=False),
        MethodRule(OFF, Family.NONE, "forbidden", default_n=0),
    )
}

# specpilot's own n-gram drafter (proposer.py), which vLLM runs as method custom_class with this class as the
# model (engine.json's ngram_drafter "confidence"). vLLM zeroes prompt_lookup_* for custom_class: the runtime
# hands them to the drafter in these variables.
CONFIDENCE_DRAFTER = "specpilot_runtime.proposer.ConfidenceNgramProposer"
LOOKUP_MIN_ENV = "SPECPILOT_PROMPT_LOOKUP_MIN"
LOOKUP_MAX_ENV = "SPECPILOT_PROMPT_LOOKUP_MAX"
LOOKUP_KEYS = {"prompt_lookup_min": LOOKUP_MIN_ENV, "prompt_lookup_max": LOOKUP_MAX_ENV}

# Which drafter serves method ngram (engine.json's ngram_drafter, a SpeculativeDeployment's
# speculative.ngramDrafter): vLLM's own, or one of specpilot's, which vLLM runs as method custom_class.
NgramDrafter = Literal["vllm", "confidence"]
NGRAM_DRAFTERS: tuple[str, ...] = get_args(NgramDrafter)
DEFAULT_NGRAM_DRAFTER: NgramDrafter = "vllm"
DRAFTER_METHOD = "ngram"  # the one method a drafter of specpilot's drafts for
# specpilot's drafters -> the class vLLM's custom_class imports.
CUSTOM_DRAFTERS: dict[str, str] = {"confidence": CONFIDENCE_DRAFTER}


def table_blind(drafter: str, vendor: str) -> bool:
    """Whether vLLM ignores a batch-size table with `drafter` on `vendor`: its GPU model runner (V2) refuses
    custom_class, so on GPUs the V1 runner serves it, which never reads num_speculative_tokens_per_batch_size
    (no schedule, no draft length set live); the CPU build's runner reads it."""
    return drafter in CUSTOM_DRAFTERS and vendor != "cpu"


def drafter_table_message(field: str, drafter: str, what: str, instead: str) -> str:
    """Why `what` (a schedule, or a tuning setting that needs one) is refused with `field` = `drafter` on GPUs,
    and `instead` what to do (the runtime, validate and CEL say it in these words)."""
    return (f"{what} is never served: {field} {drafter} runs as vLLM's custom_class, which on GPUs (amd, nvidia) "
            "only vLLM's V1 model runner serves, and it ignores batch-size tables (num_speculative_tokens_per_"
            f"batch_size); {instead}, or set {field} {DEFAULT_NGRAM_DRAFTER}")


# What a batch-size schedule is called where it is refused with a table-blind drafter, and the fix.
SCHEDULE_WHAT = "the schedule"
SCHEDULE_INSTEAD = "remove it"


def drafter_problems(drafter: str, method: str, table: bool, vendor: str, field: str,
                     table_field: str) -> list[Problem]:
    """`drafter` serving `method` with (`table`, at `table_field`) or without a batch-size table on `vendor`,
    as problems at `field`: a drafter of specpilot's drafts for method ngram only, and not with a table where
    vLLM would ignore it."""
    if drafter not in CUSTOM_DRAFTERS:
        return []
    if method != DRAFTER_METHOD:
        return [Problem(field, f"{drafter} drafts for method {DRAFTER_METHOD} only, not {method}: use "
                               f"{DEFAULT_NGRAM_DRAFTER} (allowed: {', '.join(NGRAM_DRAFTERS)}) or method "
                               f"{DRAFTER_METHOD}")]
    if table and table_blind(drafter, vendor):
        return [Problem(field, drafter_table_message(field, drafter, f"{SCHEDULE_WHAT} ({table_field})",
                                                     SCHEDULE_INSTEAD))]
    return []


def served_method(vllm_method: str, vllm_model: str | None) -> str:
    """The method of METHODS that a vLLM speculative config serves: custom_class naming specpilot's drafter is
    ngram (what the engine.json asked for), so ngram's rules, live.json's included, hold for it."""
    return DRAFTER_METHOD if vllm_method == "custom_class" and vllm_model in CUSTOM_DRAFTERS.values() else vllm_method


# Methods vLLM removed, with why, so users get a reason rather than "not in enum".
REMOVED_METHODS: dict[str, str] = {
    "medusa": "vLLM removed Medusa; use eagle3 or mtp",
    "mlp_speculator": "vLLM removed MLP speculators; use eagle3 or draft_model",
}

# Largest N specpilot accepts for any method: beyond this vLLM's buffers grow for no measured gain.
MAX_NUM_SPECULATIVE_TOKENS = 32

# Every user-settable key of vLLM 0.33's SpeculativeConfig (it rejects unknown keys).
VLLM_SPECULATIVE_KEYS: frozenset[str] = frozenset({
    "method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
    "draft_tensor_parallel_size", "quantization", "moe_backend", "attention_backend",
    "kv_cache_dtype", "max_model_len", "revision", "code_revision", "enforce_eager",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "disable_lookahead_block_hashes", "draft_lm_head_quantization", "use_local_argmax_reduction",
    "use_heterogeneous_vocab", "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "draft_load_config",
    "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk", "xpress_topc",
    "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
})

# Keys specpilot sets itself from the spec; `extra` may not override them.
OWNED_KEYS: frozenset[str] = frozenset({"method", "model", "num_speculative_tokens"})

# Keys that look plausible (docs mention them) but vLLM 0.33 refuses, with the fix.
MISLEADING_KEYS: dict[str, str] = {
    "enable_adaptive_k": "vLLM 0.33 has no enable_adaptive_k; see num_speculative_tokens_per_batch_size",
    "adaptive_verification": "the key is enable_adaptive_verification",
    "tensor_parallel_size": "use draft_tensor_parallel_size for the drafter",
    "speculative_model": "set spec.speculative.draftModel",
}

# Command-line flags that would fight the speculative config specpilot renders (engine_config.py also
# refuses their underscore, dotted and abbreviated spellings).
SPECULATIVE_FLAGS: frozenset[str] = frozenset({
    "--speculative-config", "-sc", "--speculative-model",
    "--num-speculative-tokens", "--speculative-draft-tensor-parallel-size",
    "--ngram-prompt-lookup-max", "--ngram-prompt-lookup-min", "--speculative-max-model-len",
    "--speculative-disable-by-batch-size", "--spec-decoding-acceptance-method",
    "--spec-method", "--spec-model", "--spec-tokens",  # vLLM 0.32's shorthands for the config keys
})

# vLLM 0.33's scheduler raises at engine start unless the batch-size schedule's first range starts at 1
# (docs/references.md §6); CEL (api/rules.py) and check() say it in these words.
SCHEDULE_START_MESSAGE = ("the first batch-size range must start at minBatchSize 1 (vLLM 0.33 refuses to "
                          "start otherwise); later ranges follow without overlap")
# Methods whose model runner serves a batch-size schedule; the others (suffix here, and vLLM's custom_class,
# which ngram runs as with a drafter of specpilot's: table_blind) force vLLM's V1 model runner, which never
# reads the table.
SCHEDULE_METHODS: tuple[str, ...] = tuple(m for m, r in METHODS.items() if r.schedule and r.family is not Family.NONE)


def live_method(method: str) -> bool:
    """A method whose draft length a running engine can serve live, as what a pod started at it drafts: its
    vLLM model runner serves a batch-size table (an alternative with method off runs none), and its k-th
    draft token does not depend on N. A parallel drafter's block is drafted for the started N, so a K under it
    is not what N = K drafts: its N stay canaries."""
    rule = METHODS.get(method)
    return method in SCHEDULE_METHODS and rule is not None and rule.prefix_transfers


def schedule_ignored(method: str) -> str:
    return f"method {method} runs on vLLM's V1 model runner, which ignores num_speculative_tokens_per_batch_size"


def schedule_method_message(method: str) -> str:
    """Why a batch-size schedule with `method` is refused, and which methods take one (CEL, validate and the
    runtime say it in these words)."""
    return (f"{schedule_ignored(method)} (the schedule would never be served): remove the schedule, or use one "
            f"of {', '.join(SCHEDULE_METHODS)}")


# Keys vLLM reads only with rejection_sample_method synthetic, and the method-only switch.
SYNTHETIC_KEYS = ("synthetic_acceptance_rates", "synthetic_acceptance_length")
ADAPTIVE_VERIFICATION_METHODS = ("dspark",)
# The key that turns on DSpark's confidence head (a shorter prefix verified when the draft is unsure).
ADAPTIVE_VERIFICATION_KEY = "enable_adaptive_verification"

ALLOWED_ENUMS: dict[str, tuple[str, ...]] = {
    "rejection_sample_method": ("standard", "synthetic", "block", "fly"),
    "draft_sample_method": ("greedy", "probabilistic"),
    "draft_lm_head_quantization": ("fp8", "nvfp4"),
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: where (dotted path) and what, with what is allowed."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def max_n(method: str, block_size: int | None) -> int:
    """Largest N vLLM can usefully run for this method and draft block size."""
    rule = METHODS[method]
    if rule.family is Family.NONE:
        return 0
    if rule.block_bound is not None:
        return (block_size or rule.default_block_size or 0) + rule.block_bound
    return MAX_NUM_SPECULATIVE_TOKENS


def schedule_k(schedule: Sequence[Sequence[int]] | None, n: int, batch_size: int) -> int:
    """Draft tokens per sequence at a running batch size, as vLLM 0.33's dense schedule lookup gives them
    (`v1/spec_decode/dynamic/utils.py`): the range holding the batch size, a gap or the tail past the
    last range carries the previous range's K forward, and K is clamped to the started N. No schedule: N."""
    if not schedule or n <= 0:
        return max(n, 0)
    k = None
    for lo, hi, entry_k in sorted(schedule, key=lambda e: e[0]):
        if batch_size < lo:
            break
        k = entry_k
        if batch_size <= hi:
            break
    return min(n, k if k is not None else n)


# Characters no checkpoint name needs: C0 and C1 controls (a NUL cannot even be passed in argv), and the
# Unicode bidirectional overrides and isolates, which make a name display other than it reads in `kubectl`,
# Events and logs ("Trojan Source"). Regex escapes for the controls, the bidi characters themselves: Python's
# re and the API server's Go regexp read both alike, where Go has no \u escape and Python no \x{...}.
_HIDDEN = "\\x00-\\x1f\\x7f-\\x9f" + "\u202a-\u202e\u2066-\u2069"
# A target or draft checkpoint (hub id or path) as vLLM takes it without reading it as a flag: no leading
# '-', none of the characters above. Also the CRD's pattern.
MODEL_PATTERN = f"^[^-{_HIDDEN}][^{_HIDDEN}]*$"

# What Linux opens: a path of at most PATH_MAX - 1 bytes (the kernel's 4096 counts the NUL), each component
# at most NAME_MAX bytes. A local checkpoint past either cannot be opened (ENAMETOOLONG), by the runtime's
# checks or by vLLM; a hub id is far shorter (the Hub allows 96 characters per name).
NAME_MAX = 255
PATH_MAX = 4095


def path_problem(value: str) -> str | None:
    """Why the kernel would refuse `value` as a path (a checkpoint given as a local directory); None when it
    would not. The one rule for the runtime's engine.json and the operator's `specpilot validate`: a
    target or draft model the pod cannot open is refused before any pod starts."""
    if "\x00" in value:
        return "holds a NUL byte, which no path can hold"
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX:
        return f"is {size} bytes as UTF-8; a path holds at most {PATH_MAX} bytes (PATH_MAX)"
    longest = max(value.split("/"), key=lambda c: len(c.encode("utf-8", "surrogatepass")))
    size = len(longest.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        return (f"has a path component of {size} bytes ({longest[:24]!r}...); each name between slashes holds "
                f"at most {NAME_MAX} bytes (NAME_MAX)")
    return None


class SpeculativeConfig(BaseModel):
    """specpilot's view of a speculative config; `to_vllm()` gives vLLM's own JSON."""

    model_config = ConfigDict(extra="forbid")

    method: str
    model: str | None = Field(default=None, pattern=MODEL_PATTERN)
    num_speculative_tokens: int = Field(default=0, ge=0)
    block_size: int | None = Field(default=None, ge=2)
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    def problems(self, path: str = "speculative", tensor_parallel_size: int | None = None) -> list[Problem]:
        """Every rule violation, named by field (paths use the CRD's camelCase names); with the target's
        tensor-parallel size, also draft_tensor_parallel_size against it."""
        return check(self, path, tensor_parallel_size)

    def to_vllm(self) -> dict[str, Any] | None:
        """vLLM's `--speculative-config` JSON; None when speculation is off."""
        if self.method == OFF:
            return None
        out: dict[str, Any] = {"method": self.method}
        if self.model:
            out["model"] = self.model
        out["num_speculative_tokens"] = self.num_speculative_tokens
        if self.num_speculative_tokens_per_batch_size:
            out["num_speculative_tokens_per_batch_size"] = [
                list(e) for e in self.num_speculative_tokens_per_batch_size
            ]
        out.update(self.extra)
        return out


def check(cfg: SpeculativeConfig, path: str = "speculative", tensor_parallel_size: int | None = None) -> list[Problem]:
    """The per-method rules, as problems with CRD field paths."""
    p: list[Problem] = []
    m = cfg.method
    if m in REMOVED_METHODS:
        return [Problem(f"{path}.method", f"{m!r} is not supported: {REMOVED_METHODS[m]}")]
    if m not in METHODS:
        allowed = ", ".join(METHODS)
        return [Problem(f"{path}.method", f"unknown method {m!r}, allowed: {allowed}")]
    rule = METHODS[m]
    n = cfg.num_speculative_tokens
    unopenable = path_problem(cfg.model) if cfg.model else None
    if unopenable:
        p.append(Problem(f"{path}.draftModel", unopenable))
    if rule.draft_model == "required" and not cfg.model:
        p.append(Problem(f"{path}.draftModel", f"method {m} needs a draft model (hub id or path)"))
    if rule.draft_model == "forbidden" and cfg.model:
        p.append(Problem(f"{path}.draftModel", f"method {m} takes no draft model; remove it"))
    if m == OFF:
        if n:
            p.append(Problem(f"{path}.numSpeculativeTokens",
                             "must be 0 or omitted when method is off"))
        if cfg.extra:
            p.append(Problem(f"{path}.extra", "must be empty when method is off"))
        return p
    if n < 1:
        p.append(Problem(f"{path}.numSpeculativeTokens", f"must be >= 1 for method {m}"))
    limit = max_n(m, cfg.block_size)
    if n > limit:
        why = rule.note or f"at most {MAX_NUM_SPECULATIVE_TOKENS}"
        p.append(Problem(f"{path}.numSpeculativeTokens",
                         f"{n} is too large for {m} (block size {cfg.block_size or rule.default_block_size}): "
                         f"allowed 1..{limit}; {why}"))
    if cfg.block_size is not None and rule.block_bound is None:
        p.append(Problem(f"{path}.blockSize", f"only dflash and dspark take a block size, not {m}"))
    p += _check_extra(cfg, f"{path}.extra")
    p += _check_cross_keys(cfg, f"{path}.extra", tensor_parallel_size)
    p += _check_schedule(cfg, path)
    return p


def _check_extra(cfg: SpeculativeConfig, path: str) -> list[Problem]:
    p: list[Problem] = []
    for key, value in cfg.extra.items():
        where = f"{path}.{key}"
        if key in OWNED_KEYS:
            p.append(Problem(where, "is set by specpilot from method, draftModel and "
                                    "numSpeculativeTokens; set those fields instead"))
        elif key in MISLEADING_KEYS:
            p.append(Problem(where, f"not a vLLM 0.33 speculative-config key: {MISLEADING_KEYS[key]}"))
        elif key not in VLLM_SPECULATIVE_KEYS:
            p.append(Problem(where, "not a vLLM 0.33 speculative-config key (vLLM rejects unknown "
                                    "keys); see docs/speculative-keys.md for the allowed keys"))
        elif key in ALLOWED_ENUMS and value not in ALLOWED_ENUMS[key]:
            p.append(Problem(where, f"{value!r} is not allowed, use one of {', '.join(ALLOWED_ENUMS[key])}"))
    lo, hi = cfg.extra.get("prompt_lookup_min"), cfg.extra.get("prompt_lookup_max")
    if cfg.method != "ngram" and (lo is not None or hi is not None):
        p.append(Problem(f"{path}.prompt_lookup_min", "prompt_lookup_* apply only to method ngram"))
    for key, v in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            p.append(Problem(f"{path}.{key}", f"must be an integer >= 1, got {v!r}"))
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        p.append(Problem(f"{path}.prompt_lookup_min",
                         f"prompt_lookup_min ({lo}) must be <= prompt_lookup_max ({hi})"))
    rates = cfg.extra.get("synthetic_acceptance_rates")
    if rates is not None:
        ok = isinstance(rates, list) and all(isinstance(r, (int, float)) and 0 <= r <= 1 for r in rates)
        if not ok or len(rates) != cfg.num_speculative_tokens or rates != sorted(rates, reverse=True):
            p.append(Problem(f"{path}.synthetic_acceptance_rates",
                             f"must be {cfg.num_speculative_tokens} non-increasing numbers in [0, 1]"))
    dtp = cfg.extra.get("draft_tensor_parallel_size")
    if dtp is not None and (not isinstance(dtp, int) or dtp < 1):
        p.append(Problem(f"{path}.draft_tensor_parallel_size", "must be 1 or the target's tensor-parallel size"))
    return p


def _check_cross_keys(cfg: SpeculativeConfig, path: str, tensor_parallel_size: int | None) -> list[Problem]:
    """What vLLM 0.33 checks only at engine start, between extra keys and the rest of the config
    (docs/references.md §6)."""
    p: list[Problem] = []
    extra = cfg.extra
    dtp = extra.get("draft_tensor_parallel_size")
    if tensor_parallel_size is not None and isinstance(dtp, int) and dtp not in (1, tensor_parallel_size):
        p.append(Problem(f"{path}.draft_tensor_parallel_size",
                         f"{dtp} is neither 1 nor the target's tensor-parallel size ({tensor_parallel_size}, "
                         "spec.accelerator.count): vLLM refuses to start; use 1 or "
                         f"{tensor_parallel_size}"))
    if extra.get(ADAPTIVE_VERIFICATION_KEY) and cfg.method not in ADAPTIVE_VERIFICATION_METHODS:
        p.append(Problem(f"{path}.{ADAPTIVE_VERIFICATION_KEY}",
                         f"applies only to method {', '.join(ADAPTIVE_VERIFICATION_METHODS)}, not {cfg.method}: "
                         "vLLM refuses to start; remove it"))
    if extra.get("rejection_sample_method") != "synthetic":
        p += [Problem(f"{path}.{key}", "needs rejection_sample_method: synthetic (vLLM refuses to start "
                                       "otherwise); set it or remove this key")
              for key in SYNTHETIC_KEYS if key in extra]
    length = extra.get("synthetic_acceptance_length")
    top = cfg.num_speculative_tokens + 1
    if length is not None and (isinstance(length, bool) or not isinstance(length, (int, float))
                               or not 1 <= length <= top):
        p.append(Problem(f"{path}.synthetic_acceptance_length",
                         f"must be a number in [1, numSpeculativeTokens + 1] = [1, {top}], got {length!r}"))
    return p


def _check_schedule(cfg: SpeculativeConfig, path: str) -> list[Problem]:
    sched = cfg.num_speculative_tokens_per_batch_size
    if not sched:
        return []
    where = f"{path}.schedule"
    if cfg.method not in SCHEDULE_METHODS:
        return [Problem(where, schedule_method_message(cfg.method))]
    p: list[Problem] = []
    if sched[0][0] != 1:
        p.append(Problem(f"{where}[0]", SCHEDULE_START_MESSAGE))
    prev_hi = 0
    for i, (lo, hi, k) in enumerate(sched):
        if lo < 1 or hi < lo:
            p.append(Problem(f"{where}[{i}]", f"batch-size range [{lo}, {hi}] must have 1 <= lo <= hi"))
        if lo <= prev_hi:
            p.append(Problem(f"{where}[{i}]", "batch-size ranges must be increasing and not overlap"))
        if not 0 <= k <= cfg.num_speculative_tokens:
            p.append(Problem(f"{where}[{i}]", f"N={k} must lie in 0..numSpeculativeTokens "
                                              f"({cfg.num_speculative_tokens}): it cannot exceed the started N"))
        prev_hi = hi
    return p
