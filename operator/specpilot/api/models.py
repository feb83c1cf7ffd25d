"""The SpeculativeDeployment API (specpilot.io/v1alpha1) as pydantic models.

The source of truth for the CRD: `api/crd.py` generates the openAPIV3Schema from these models, so every
field's description here is what `kubectl explain` shows. Field names (camelCase aliases) are a contract.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from specpilot_runtime.engine_config import MAX_SHUTDOWN_TIMEOUT_S, NO_NUL_PATTERN
from specpilot_runtime import engine_config
from specpilot_runtime.speculative import (DEFAULT_NGRAM_DRAFTER, DRAFTER_METHOD, MAX_NUM_SPECULATIVE_TOKENS, METHODS,
                                          MODEL_PATTERN, REMOVED_METHODS, NgramDrafter, live_method)

from .drain import (DEFAULT_DRAIN_SECONDS, DRAIN_MARGIN_S, DRAIN_P99_FACTOR, MAX_AUTO_DRAIN_S, MIN_AUTO_DRAIN_S)

GROUP = "specpilot.io"
VERSION = "v1alpha1"
KIND: Final = "SpeculativeDeployment"
PLURAL = "speculativedeployments"
SINGULAR = "speculativedeployment"
SHORT_NAMES = ["sd", "specdeploy"]
API_VERSION = f"{GROUP}/{VERSION}"

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# A Literal of the methods the runtime knows (the CRD's enum); a checker cannot evaluate it, so it sees str.
if TYPE_CHECKING:
    MethodName = str
else:
    MethodName = Literal[tuple(METHODS)]

# The extended resource each vendor's device plugin advertises (render requests it; validate keeps user
# resources from naming it twice).
GPU_RESOURCES: dict[str, str] = {"amd": "amd.com/gpu", "nvidia": "nvidia.com/gpu"}
# An extended resource name: a DNS subdomain prefix, '/', a name (Kubernetes' qualified-name rules).
EXTENDED_RESOURCE_PATTERN = (r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                             r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# The user the restricted security profile runs as (restricted needs runAsNonRoot; vLLM images run as root).
NON_ROOT_UID = 1000
# A pip distribution name, as spec.imagePackages lists them.
PACKAGE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"

# Kubernetes object names that can also name a Service and a label value: a DNS-1035 label.
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# 63 (a DNS label) minus the longest suffix a child adds ("-canary-engine", api/names.py), so every
# child name is a DNS label too; tests/unit/test_validate_limits.py checks each name function against it.
NAME_MAX_LENGTH = 49
# Names a child of another SpeculativeDeployment takes (api/names.py: `<name>-canary` Deployment and
# Service, `<name>-stable` Service, `<name>-canary-engine` ConfigMap): a SpeculativeDeployment named so would
# fight that one over them, so these endings are refused and no two objects' children can share a name.
RESERVED_NAME_SUFFIXES = ("-canary", "-stable")
# The floor that keeps the tuning loop from spinning (0s meant ~30 status writes/s). Not higher: the demo
# and the cluster tests run 2s windows against simulated engines whose clock is scaled up; real engines
# need minutes per window anyway (docs/api.md).
MIN_ANALYSIS_WINDOW = "2s"


# Bounds on lists and strings that CEL rules read: the API server estimates a rule's cost from them.
MAX_ENGINE_ARGS = 128
MAX_ARG_LENGTH = 1024
EngineArg = Annotated[str, Field(max_length=MAX_ARG_LENGTH, pattern=NO_NUL_PATTERN)]
# A hub id is short; a local path stays well under PATH_MAX.
MAX_MODEL_LENGTH = 1024
MAX_PATH_LENGTH = 1024
MAX_ENV_VALUE_LENGTH = 4096
MAX_EXTRA_KEYS = 64
MAX_IMAGE_LENGTH = 512
# Kubernetes' limit on object names (DNS subdomains).
MAX_OBJECT_NAME_LENGTH = 253
# An absolute path without empty segments or a trailing '/', printable; rules.py refuses '.' and '..'.
ABSOLUTE_PATH_PATTERN = r"^(/[^/\x00-\x1f\x7f]+)+$"
# Where specpilot mounts its own volumes in every serving pod (render/pod.py; a test keeps them equal):
# a model cache mounted over, under or above them would hide engine.json or the shared memory.
RESERVED_MOUNT_PATHS = ("/etc/specpilot", "/dev/shm", "/opt/specpilot")
# A Secret's name: a lower-case DNS subdomain (RFC 1123).
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# An image reference as container runtimes parse it (the distribution project's reference grammar): an
# optional registry host[:port], lower-case path components, an optional tag and an optional digest, all
# ASCII. Anything else is a pod stuck in InvalidImageName, so it is refused before a pod exists.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
# The first component names a registry only with a '.' or a port, or as localhost (otherwise docker.io's
# path, where upper case is refused).
_REGISTRY = (rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+(?::[0-9]+)?|{_DOMAIN_COMPONENT}:[0-9]+"
             r"|localhost|\[[0-9a-fA-F:]+\](?::[0-9]+)?)")
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_PATTERN = rf"^(?:{_REGISTRY}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
Candidate = Annotated[int, Field(ge=0, le=MAX_NUM_SPECULATIVE_TOKENS)]
# The largest spec.speculative.blockSize (a dflash/dspark draft's block): bounds a block method's N limit.
MAX_BLOCK_SIZE = 64
# The N a switchback pod starts at when spec.tuning.candidates does not say (capped by the method's limit):
# every method's usual N (speculative.METHODS' default_n, at most 7) fits below it, and so does the best N
# measured for sequential drafters at any batch size (5 at batch size <= 4 on an H200, docs/references.md
# §5); a parallel drafter's larger optimum at small batches stays a canary's to find. Each unit of N
# widens every decode step's CUDA graphs by max_num_seqs tokens (api/switchback.py), so not higher.
SWITCHBACK_DEFAULT_N = 8
# spec.tuning.promotionMargin when the spec leaves it out: a canary's promotion rolls every stable pod, so it
# must pay for that; a switchback arm's is a file the engines read within seconds.
CANARY_MARGIN = 0.02
SWITCHBACK_MARGIN = 0.005
# Alternatives a tournament may hold: each costs a canary (and a checkpoint load) to measure.
MAX_ALTERNATIVES = 8


def _methods(draft_model: str) -> list[str]:
    """Methods whose draft model is "required", "optional" or "forbidden" (speculative.py's rule)."""
    return [m for m, rule in METHODS.items() if rule.draft_model == draft_model]


def gpu_resource(accelerator: Accelerator) -> str:
    """The extended resource each replica's GPUs are requested as."""
    return accelerator.resource_name or GPU_RESOURCES[accelerator.vendor]


def duration_seconds(text: str) -> float:
    """Parse a Go-style duration ("90s", "5m", "1h30m") into seconds."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration like 30s, 5m or 1h")
    return sum(float(v) * _UNIT_SECONDS[u] for v, u in _DURATION_PART.findall(text))


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Accelerator(_Model, engine_config.Accelerator):
    """GPUs for each replica: the engine's accelerator (vendor, count) plus how pods ask for them."""

    model_config = _Model.model_config
    vendor: engine_config.GpuVendor = Field(  # GPUs only; "cpu" is for tests
        "amd", description="GPU vendor: amd (ROCm, amd.com/gpu) or nvidia (CUDA, nvidia.com/gpu).")
    count: int = Field(1, ge=1, le=engine_config.MAX_ACCELERATORS,
                       description="GPUs per replica; vLLM runs with this tensor-parallel size.")
    resource_name: str | None = Field(
        None, max_length=MAX_OBJECT_NAME_LENGTH, pattern=EXTENDED_RESOURCE_PATTERN,
        description="Extended resource the GPUs are requested as, overriding the vendor's default "
                    f"({', '.join(GPU_RESOURCES.values())}): partitioned GPUs or another device plugin, "
                    "e.g. amd.com/gpu-cpx or nvidia.com/mig-1g.10gb.")
    security_profile: Literal["recommended", "baseline", "restricted"] = Field(
        "baseline",
        description="Pod security settings. recommended: AMD's guidance for ROCm (SYS_PTRACE, seccomp "
                    "Unconfined; on NVIDIA the same as baseline), which Pod Security baseline refuses and the "
                    "operator grants only with --allow-unconfined; baseline (default): without them, admitted where "
                    "pod-security.kubernetes.io/enforce is baseline; restricted: also non-root (UID "
                    f"{NON_ROOT_UID}), no privilege escalation, all capabilities dropped, seccomp RuntimeDefault.")


# single: one N; schedule: the tuner also learns, canaries and serves an N per batch-size range.
TuningMode = Literal["single", "schedule"]
# How a canary's pods are found: surge adds them, replace takes them from the stable track, auto replaces
# wherever a stable pod would be left serving.
CanaryMode = Literal["auto", "surge", "replace"]
CanaryPods = Literal["surge", "replace"]
# How a draft length is measured: canary pods started at it, or inside the serving pods, alternated live.
TuningMeasure = Literal["canary", "switchback"]
# Whether a tuned dspark deployment also tries its own config with adaptive verification on (api/adaptive.py).
AdaptiveVerification = Literal["auto", "off"]
TableCheck = Literal["auto", "on", "off"]


def canary_pods(mode: CanaryMode, replicas: int, canary_replicas: int) -> CanaryPods:
    """What `mode` does for a deployment of `replicas` pods and a canary of `canary_replicas`: auto is
    replace when a stable pod keeps serving beside the canary, else surge (one pod cannot give itself up)."""
    if mode == "auto":
        return "replace" if replicas >= canary_replicas + 1 else "surge"
    return mode


class ScheduleEntry(_Model):
    """One row of vLLM's num_speculative_tokens_per_batch_size."""

    min_batch_size: int = Field(ge=1, description="Smallest running batch size this row covers.")
    max_batch_size: int = Field(ge=1, description="Largest running batch size this row covers.")
    num_speculative_tokens: int = Field(
        ge=0, le=MAX_NUM_SPECULATIVE_TOKENS,
        description="N for this batch-size range; 0 turns drafting off; at most the started N.")


class Speculative(_Model):
    """The speculative-decoding method and its draft."""

    method: MethodName = Field(
        description=f"Proposer: {', '.join(METHODS)} (no speculation). Removed from vLLM: "
                    f"{', '.join(REMOVED_METHODS)}.")
    draft_model: str | None = Field(
        None, max_length=MAX_MODEL_LENGTH, pattern=MODEL_PATTERN, description=f"Draft checkpoint (hub id or path). Required for {', '.join(_methods('required'))}; "
                          f"optional for {', '.join(_methods('optional'))} (mtp: Gemma-4-style assistants); "
                          f"not allowed for {', '.join(_methods('forbidden'))}.")
    num_speculative_tokens: int = Field(
        0, ge=0, le=MAX_NUM_SPECULATIVE_TOKENS,
        description="N, draft tokens verified per step (vLLM's num_speculative_tokens). >= 1 unless "
                    "method is off. The tuner changes it when tuning is enabled.")
    block_size: int | None = Field(
        None, ge=2, le=MAX_BLOCK_SIZE,
        description="Block size the dflash/dspark draft was trained with: dflash needs N <= blockSize-1, "
                    "dspark N <= blockSize. Read from the checkpoint when omitted (default 16).")
    schedule: list[ScheduleEntry] | None = Field(
        None, max_length=16,
        description="Optional N per batch-size range (vLLM's num_speculative_tokens_per_batch_size).")
    extra: dict[str, Any] = Field(
        default_factory=dict, max_length=MAX_EXTRA_KEYS,
        description="Other vLLM speculative-config keys, passed through (validated against vLLM 0.33's keys).")
    ngram_drafter: NgramDrafter = Field(
        DEFAULT_NGRAM_DRAFTER,
        description=f"Which drafter serves method {DRAFTER_METHOD}: vllm (vLLM's own) or confidence (specpilot's: "
                    "the same lookup, each draft cut to what its match length earns, run as vLLM's custom_class). "
                    f"confidence only with method {DRAFTER_METHOD}; on GPUs vLLM serves custom_class on its V1 model "
                    "runner, which ignores batch-size tables, so not with a schedule, tuning mode schedule or "
                    "tuning measure switchback.")


class Alternative(Speculative):
    """Another way to speculate for the same target, which the tuner may choose instead (spec.tuning.alternatives)."""

    candidates: list[Candidate] | None = Field(
        None, min_length=1, max_length=MAX_NUM_SPECULATIVE_TOKENS + 1,
        description="N values the tuner may try with this alternative (0 = speculation off); default: "
                    "spec.tuning.candidates, else 0..the method's limit.")
    progress_deadline: str | None = Field(
        None, pattern=DURATION_PATTERN,
        description="A canary of this alternative not Ready by then is rolled back (its draft checkpoint may "
                    "take longer to load than N changes do); default spec.tuning.canary.progressDeadline.")


class EnvVar(_Model):
    """One environment variable for the vLLM process."""

    name: str = Field(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
                      description="Environment variable name.")
    value: str = Field("", max_length=MAX_ENV_VALUE_LENGTH, pattern=NO_NUL_PATTERN, description="Value.")


class ModelCache(_Model):
    """Where model weights are cached across pod restarts."""

    claim_name: str | None = Field(None, max_length=MAX_OBJECT_NAME_LENGTH,
                                   description="PersistentVolumeClaim holding the Hugging Face cache (the default "
                                               "choice).")
    host_path: str | None = Field(
        None, max_length=MAX_PATH_LENGTH, pattern=ABSOLUTE_PATH_PATTERN,
        description="Host directory holding the cache. Refused unless the operator runs with "
                    "--allow-host-path naming a directory that holds it (chart value operator.allowedHostPaths).")
    mount_path: str = Field("/root/.cache/huggingface", max_length=MAX_PATH_LENGTH, pattern=ABSOLUTE_PATH_PATTERN,
                            description=f"Where the cache is mounted in the pod; not over, under or above "
                                        f"{' or '.join(RESERVED_MOUNT_PATHS)}.")


class SecretKeyRef(_Model):
    """A key in a Secret of the deployment's namespace."""

    name: str = Field(min_length=1, max_length=MAX_OBJECT_NAME_LENGTH, pattern=SECRET_NAME_PATTERN,
                      description="Secret name in the deployment's namespace; unless the operator allows any "
                                  "Secret, it must be labelled specpilot.io/allow-reference=true.")
    key: str = Field("token", min_length=1, max_length=MAX_OBJECT_NAME_LENGTH, pattern=r"^[-._a-zA-Z0-9]+$",
                     description="Key within the Secret.")


class LocalObjectReference(_Model):
    """A Secret of the deployment's namespace, by name."""

    name: str = Field(min_length=1, max_length=MAX_OBJECT_NAME_LENGTH, pattern=SECRET_NAME_PATTERN,
                      description="Secret name (type kubernetes.io/dockerconfigjson).")


class Engine(_Model):
    """How each vLLM server runs, beyond the speculative config."""

    args: list[EngineArg] = Field(
        default_factory=list, max_length=MAX_ENGINE_ARGS,
        description="Extra `vllm serve` arguments, one per item (`--flag=value` or `--flag`, `value`). "
                    "Speculative, model, port and tensor-parallel flags are reserved.")
    env: list[EnvVar] = Field(default_factory=list, max_length=128,
                              description="Extra environment variables for the vLLM process.")
    resources: dict[str, Any] = Field(
        default_factory=dict, description="Container resources; the GPU limit is set from accelerator.")
    node_selector: dict[str, Annotated[str, Field(max_length=MAX_OBJECT_NAME_LENGTH)]] = Field(
        default_factory=dict, max_length=64, description="Pod nodeSelector.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=64, description="Pod tolerations.")
    model_cache: ModelCache | None = Field(None, description="Model weight cache volume.")
    hf_token_secret_ref: SecretKeyRef | None = Field(
        None, description="Secret key holding a Hugging Face token (exposed as HF_TOKEN).")
    drain_seconds: int | None = Field(
        None, ge=0, le=MAX_SHUTDOWN_TIMEOUT_S,
        description="How long a pod being replaced (promotion, rollback, N edit, canary teardown) may finish "
                    "its in-flight requests after it has left the Service. Set: fixed, vLLM's "
                    "--shutdown-timeout, and the pod's terminationGracePeriodSeconds is derived from it; 0 aborts "
                    f"them at once. Left out: automatic, {DEFAULT_DRAIN_SECONDS} s until measured, then "
                    f"{DRAIN_P99_FACTOR:g} x the serving pods' measured p99 request latency + {DRAIN_MARGIN_S} s, "
                    f"within {MIN_AUTO_DRAIN_S}..{MAX_AUTO_DRAIN_S} s, changed without restarting a pod "
                    "(status.drain says the value in force).")


class Canary(_Model):
    """How a candidate N is proven before promotion."""

    replicas: int = Field(1, ge=1, le=64, description="Replicas of the canary Deployment.")
    analysis_window: str = Field("5m", pattern=DURATION_PATTERN,
                                 description=f"Length of one analysis window (e.g. 30s, 5m); at least "
                                             f"{MIN_ANALYSIS_WINDOW}.")
    windows: int = Field(6, ge=1, le=100, description="Most analysis windows before a verdict.")
    progress_deadline: str = Field("20m", pattern=DURATION_PATTERN,
                                   description="A canary not Ready by then is rolled back.")
    traffic_routing: Literal["replicas", "gateway"] = Field(
        "replicas", description="replicas: traffic splits by replica ratio behind the Service; "
                                "gateway: by backend weights of the HTTPRoute named in httpRoute.")
    http_route: str | None = Field(None, max_length=253, description="HTTPRoute to weight when trafficRouting is gateway.")
    mode: CanaryMode = Field(
        "auto", description="auto: replace when replicas >= canary.replicas + 1, else surge; surge: the "
                            "canary's pods come on top of the stable ones (spare GPUs needed), and every pod "
                            "runs lighter while it serves; replace: the stable track gives up canary.replicas "
                            "pods while the canary runs and rolls without a surge, so the GPU count never grows "
                            "and a canary is measured at the load a promotion will serve (needs replicas >= "
                            "canary.replicas + 1).")


# The bounds of spec.tuning.slo's durations: above zero (an SLO no request can meet judges nothing), and at
# most what a time to first token or a time per output token could sensibly promise (a longer one is a typo).
MAX_SLO_TTFT = "1h"
MAX_SLO_TPOT = "10s"
# An SLO duration's text: "1500ms" or "1.5s" is short; a long one is a typo or an attack (a 400-digit number
# reads as infinity).
MAX_SLO_DURATION_LENGTH = 16
# spec.tuning.slo.percentile when left out: the share of requests an SLO is held for.
DEFAULT_SLO_PERCENTILE = 0.9


def _slo_duration(field: str, most: str) -> Any:
    return Field(None, max_length=MAX_SLO_DURATION_LENGTH, pattern=DURATION_PATTERN,
                 description=f"The {field} the percentile of requests must meet (e.g. 1500ms, 2s), above 0 and at "
                             f"most {most}; left out: not an SLO.")


class Slo(_Model):
    """Latency SLOs a canary must not break where the stable meets them (docs/tuner.md, "SLO and queueing gates")."""

    ttft: str | None = _slo_duration("time to first token", MAX_SLO_TTFT)
    tpot: str | None = _slo_duration("time per output token", MAX_SLO_TPOT)
    percentile: float = Field(DEFAULT_SLO_PERCENTILE, gt=0.0, lt=1.0,
                              description="Share of requests the SLOs hold for, in (0, 1) (0.9: p90).")

    @field_validator("percentile", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        """NaN passes every bound the schema has (each comparison is false): refused here, said as the range."""
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be a finite number in (0, 1), got {value}")
        return value

    @field_validator("ttft", "tpot")
    @classmethod
    def _within_bounds(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The API server's CEL rule (rules.py) checks the same bounds; this holds them for every reader."""
        if value is None:
            return value
        most = MAX_SLO_TTFT if info.field_name == "ttft" else MAX_SLO_TPOT
        if not 0.0 < duration_seconds(value) <= duration_seconds(most):
            raise ValueError(f"must be above 0s and at most {most}, got {value!r}")
        return value

    @property
    def ttft_s(self) -> float | None:
        return None if self.ttft is None else duration_seconds(self.ttft)

    @property
    def tpot_s(self) -> float | None:
        return None if self.tpot is None else duration_seconds(self.tpot)


class Tuning(_Model):
    """Automatic tuning of N through canaries."""

    enabled: bool = Field(False, description="Let the operator tune numSpeculativeTokens.")
    candidates: list[Candidate] | None = Field(
        None, min_length=1, max_length=MAX_NUM_SPECULATIVE_TOKENS + 1,
        description="N values the tuner may try (0 = speculation off); default: 0..the method's limit.")
    objective: Literal["throughput", "latency"] = Field(
        "throughput", description="throughput: output tokens/s at the observed load; latency: time per output token.")
    canary: Canary = Field(default_factory=Canary, description="Canary rollout settings.")
    promotion_margin: float | None = Field(
        None, ge=0.0, le=1.0,
        description=f"Smallest relative gain that justifies a promotion (default {CANARY_MARGIN} with canaries, "
                    f"{SWITCHBACK_MARGIN} with switchback, where a promotion restarts nothing and is undone in "
                    f"seconds).")
    confidence: float = Field(0.95, ge=0.5, lt=1.0, description="Confidence the gain is real before promoting.")
    cooldown: str = Field("1h", pattern=DURATION_PATTERN, description="Wait between tuning rounds.")
    mode: TuningMode = Field(
        "single", description="single: one N; schedule: the tuner also learns, canaries and serves an N per "
                  "batch-size range (vLLM's num_speculative_tokens_per_batch_size).")
    max_canaries_per_round: int = Field(
        8, ge=1, le=64, description="Canaries a tuning round may start; a round that spends them without "
                                    "converging stops at the best N so far.")
    max_windows_per_round: int = Field(
        48, ge=1, le=10000, description="Analysis windows a tuning round may take (not those a canary "
                                        "spends starting: progressDeadline bounds them); a round that spends "
                                        "them without converging stops at the best N so far.")
    error_gate: float = Field(
        2.0, ge=0.0, le=100.0,
        description="A canary whose container restarts per pod in a window exceed errorGate times the stable "
                    "track's, plus one, is rolled back at once, whatever its goodput.")
    alternatives: list[Alternative] | None = Field(
        None, max_length=MAX_ALTERNATIVES,
        description="Other methods (and drafts) for the same target, each with its own N: the tuner canaries "
                    "each, and promotes one only when measured better, so the stable track may change method "
                    "as well as N (method off: no speculation). Validated as spec.speculative is.")
    adaptive_verification: AdaptiveVerification = Field(
        "auto",
        description="auto: with method dspark, the tuner also tries spec.speculative with vLLM's adaptive "
                    "verification (enable_adaptive_verification: true; same draft and candidates) as one more "
                    "alternative, the last, where vLLM can run it (GPUs with full CUDA graphs, no LoRA, no "
                    "pipeline parallelism) and neither spec.speculative nor an alternative already sets it; "
                    "off: it does not.")
    measure: TuningMeasure = Field(
        "canary",
        description="canary: every N is measured by canary pods started at it; switchback: draft lengths up to "
                    f"the started N (the largest tuning candidate, else min(the method's limit, {SWITCHBACK_DEFAULT_N})) are "
                    "measured inside the serving pods by alternating them, with no restart; canaries remain for "
                    "a method, a checkpoint or a higher N. Needs a method whose vLLM model runner serves a "
                    "batch-size table (not suffix) and no data parallelism.")
    table_check: TableCheck = Field(
        "auto",
        description="Under switchback, once a round converges: on: one canary of static pods (no batch-size "
                    "table) at the K in force is judged against the switching pods, and where it is proven "
                    "better, the table costs more than switching gains (vLLM stops padding decode batches to "
                    "one draft length and its V1 runner drops full CUDA graphs) and the deployment falls back "
                    "to that static N, tuned by canaries from then on; auto: on unless the engine runs without "
                    "CUDA graphs (--enforce-eager, cudagraph_mode NONE), where a table costs nothing; off: never.")
    drift_threshold: float = Field(
        0.08, gt=0.0, le=1.0,
        description="After convergence, a relative change of the stable track's accepted tokens per step this "
                    "large (or several standard errors of its window spread, if larger) starts a new round.")
    slo: Slo | None = Field(
        None,
        description="Latency SLOs (ttft, tpot, percentile): a canary whose TTFT or TPOT percentile breaks one "
                    "that the stable meets is rolled back, however much faster it decodes. With or without "
                    "them, a canary that queues or preempts clearly more than the stable is rolled back.")

    @property
    def canary_margin(self) -> float:
        """The promotion margin a canary (pods of its own: a method, a checkpoint) is held to."""
        return CANARY_MARGIN if self.promotion_margin is None else self.promotion_margin

    def margin_for(self, method: str) -> float:
        """The promotion margin in force for the N of `method`: the spec's, else the measure's default where
        switchback measures that method's N live, else a canary's."""
        if self.promotion_margin is None and self.measure == "switchback" and live_method(method):
            return SWITCHBACK_MARGIN
        return self.canary_margin


class SpeculativeDeploymentSpec(_Model):
    """A vLLM deployment with speculative decoding whose N specpilot can tune."""

    model: str = Field(min_length=1, max_length=MAX_MODEL_LENGTH, pattern=MODEL_PATTERN,
                       description="Target model: Hugging Face id or local path (not starting with '-').")
    served_model_name: str | None = Field(
        None, max_length=MAX_MODEL_LENGTH, pattern=MODEL_PATTERN,
        description="Model name clients use (default: model; not starting with '-').")
    replicas: int = Field(1, ge=0, le=1000, description="Stable replicas.")
    accelerator: Accelerator = Field(default_factory=Accelerator, description="GPUs per replica.")
    image: str | None = Field(None, max_length=MAX_IMAGE_LENGTH, pattern=IMAGE_PATTERN,
                              description="Serving image; default per vendor at the supported vLLM version.")
    image_packages: list[Annotated[str, Field(max_length=128, pattern=PACKAGE_PATTERN)]] = Field(
        default_factory=list, max_length=16,
        description="Python packages the custom image adds to vLLM that a method needs (suffix: "
                    "arctic-inference); specpilot cannot look inside an image, so you declare them.")
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        None, max_length=16,
        description="Pull secrets of the serving pods (their serving image and the operator image the runtime "
                    "is copied from); default: the operator's cluster-wide list. Given, even empty, it replaces "
                    "that list.")
    runtime_from: Literal["operatorImage", "servingImage"] = Field(
        "operatorImage",
        description="operatorImage: an init container copies the specpilot runtime from the operator image "
                    "into the pod, so vLLM's published images work as they are; servingImage: the serving image "
                    "already has specpilot installed (images/Dockerfile's runtime target), no init container.")
    speculative: Speculative = Field(description="Speculative-decoding method, draft and N.")
    engine: Engine = Field(default_factory=Engine, description="vLLM server settings.")
    tuning: Tuning = Field(default_factory=Tuning, description="Automatic tuning of N.")


class Condition(_Model):
    """A standard Kubernetes condition."""

    type: str = Field(description="Ready, Progressing, SpecValid, Tuning or Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field("", description="CamelCase reason.")
    message: str = Field("", description="Human-readable detail.")
    last_transition_time: str | None = Field(None, description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(None, description="Generation this condition reflects.")


class DrainStatus(_Model):
    """status.drain: how long a replaced pod may drain now, and why."""

    seconds: int | None = Field(None, description="Seconds a replaced pod may finish its in-flight requests.")
    source: Literal["spec", "default", "measured"] | None = Field(
        None, description="spec: spec.engine.drainSeconds; default: automatic, not measured yet; measured: "
                          "automatic, from the p99 below.")
    p99_seconds: float | None = Field(
        None, description="Automatic: p99 end-to-end request latency of the serving pods, last measured.")
    requests: int | None = Field(None, description="Automatic: finished requests that p99 was measured over.")


class SpeculativeDeploymentStatus(_Model):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(None, description="Generation last reconciled.")
    phase: str | None = Field(None, description="Pending, Running, Tuning, Degraded, Invalid or Paused.")
    conditions: list[Condition] = Field(default_factory=list, max_length=32, description="Standard conditions.")
    method: str | None = Field(None, description="Method the stable pods run.")
    num_speculative_tokens: int | None = Field(None, description="N the stable pods run (under switchback: serve "
                                                                 "live, at most the started N).")
    canary_num_speculative_tokens: int | None = Field(None, description="N of the running canary, if any (under "
                                                                        "switchback, possibly an arm of the stable "
                                                                        "pods).")
    started_num_speculative_tokens: int | None = Field(
        None, description="Switchback: the N the stable pods were started at; every N up to it is set live.")
    live_arms: str | None = Field(
        None, max_length=512, description="Switchback: the draft-length tables the stable pods serve now, as "
                                          "live.json lists them (minBatchSize-maxBatchSize:N ranges, arms apart "
                                          "by ' | '): one arm, or the stable's and the canary's alternated.")
    replicas: int | None = Field(None, description="Stable pods.")
    ready_replicas: int | None = Field(None, description="Stable pods Ready.")
    accepted_length: float | None = Field(None, description="Mean accepted length (1 + accepted/drafts), last window.")
    served_schedule: str | None = Field(
        None, max_length=512, description="Batch-size schedule the stable pods serve (tuning mode schedule), as "
                                          "minBatchSize-maxBatchSize:N ranges; empty when they run N at every "
                                          "batch size.")
    tuning: dict[str, Any] | None = Field(
        None, description="Tuner state machine (resumable after an operator restart) and decision history.")
    drain: DrainStatus | None = Field(
        None, description="The drain budget in force (spec.engine.drainSeconds, or measured when it is left out).")
    tournament: dict[str, Any] | None = Field(
        None, description="Method tournament (with spec.tuning.alternatives): the contender the stable track runs, "
                          "the method canary, and per contender its measured goodput, mean accepted length, best N "
                          "and expected goodput (standings).")


class SpeculativeDeployment(_Model):
    api_version: Literal["specpilot.io/v1alpha1"] = Field(API_VERSION, alias="apiVersion")  # type: ignore[arg-type]  # GROUP/VERSION
    kind: Literal["SpeculativeDeployment"] = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpeculativeDeploymentSpec
    status: SpeculativeDeploymentStatus | None = None

    def for_contender(self, contender: int) -> "SpeculativeDeployment":
        """The same deployment running contender `contender`: 0 is spec.speculative, i >= 1 is
        spec.tuning.alternatives[i - 1], or past them the implicit adaptive-verification contender (its
        candidates become the tuning candidates)."""
        if contender == 0:
            return self
        from .adaptive import contender_alternatives  # it builds on these models: imported here, not above
        alt = contender_alternatives(self.spec)[contender - 1]
        speculative = Speculative.model_validate(alt.model_dump(exclude={"candidates", "progress_deadline"}))
        tuning = self.spec.tuning.model_copy(update={"candidates": alt.candidates or self.spec.tuning.candidates})
        spec = self.spec.model_copy(update={"speculative": speculative, "tuning": tuning})
        return self.model_copy(update={"spec": spec})
