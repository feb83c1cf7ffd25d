"""Validate a SpeculativeDeployment: what the API server checks (schema + CEL) and what CEL cannot express.

`validate_object` is the one entry point: `specpilot validate` and the controller both call it, so an
object the CLI accepts is an object the operator accepts. The rules CEL cannot express come from the
runtime's tables (speculative.py, engine_config.py): vLLM's speculative-config keys, removed methods,
ngram lookup bounds, schedule ordering, reserved engine flags.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from specpilot_runtime.engine import CUDA_VISIBLE, visible_devices_problem
from specpilot_runtime.engine_config import arg_problems, data_parallel_size, model_problems
from specpilot_runtime.report import MAX_PATH_CHARS, one_line, summarised
from specpilot_runtime.speculative import (METHODS, OFF, REMOVED_METHODS, SCHEDULE_METHODS, Problem,
                                          SpeculativeConfig, drafter_problems, max_n, table_blind)

from . import adaptive, admission, author_policy, documents
from .crd import open_api_schema
from .models import (ABSOLUTE_PATH_PATTERN, API_VERSION, GPU_RESOURCES, KIND, Speculative, SpeculativeDeployment,
                     SpeculativeDeploymentSpec, gpu_resource)
from .rules import (DOT_SEGMENT, DRAFTER_FIELD, EXTRA_KEY_MESSAGE, MAX_EXTRA_KEY_LENGTH, drafter_setting_message,
                    schedule_mode_message, switchback_message)
from .switchback import capture_plan, started_n

SPECULATIVE_PATH = "spec.speculative"
CANDIDATES_PATH = "spec.tuning.candidates"
MEASURE_PATH = "spec.tuning.measure"

# Fields whose CEL rules spec_problems re-checks with a more precise message (item index, value):
# there the semantic problems replace the CEL ones. An alternative's fields count as spec.speculative's.
RECHECKED_PATHS = ("spec.speculative.draftModel", "spec.speculative.numSpeculativeTokens",
                   "spec.speculative.blockSize", "spec.speculative.schedule", f"spec.speculative.{DRAFTER_FIELD}",
                   "spec.engine.args",
                   "spec.tuning.mode", MEASURE_PATH, CANDIDATES_PATH)

# spec.speculative.method or spec.tuning.alternatives[i].method (group 1: i).
METHOD_PATH = re.compile(r"spec\.(?:speculative|tuning\.alternatives\[(\d+)\])\.method")
ALTERNATIVE_PATH = re.compile(r"spec\.tuning\.alternatives\[\d+\]")

# vLLM's batch-size schedule key: spec.speculative.schedule renders it.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

# Free-form values (speculative.extra, resources, tolerations) have no length the CRD can bound: the
# spec as a whole, and each extra value, get a size limit here instead. A real spec is a few KiB.
MAX_SPEC_BYTES = 256 * 1024
MAX_EXTRA_VALUE_BYTES = 4096

# A document's name as problem lines quote it (metadata.name is checked, but quoted before it is).
MAX_NAME_CHARS = 100

# Resource names specpilot sets from spec.accelerator; a user value would fight it.
RESOURCE_KEYS = ("limits", "requests", "claims")


@dataclass(frozen=True)
class Policy:
    """What the operator's administrator allows beyond the CRD (`specpilot run` flags): a hostPath model
    cache gives whoever may create SpeculativeDeployments a host directory on GPU nodes, so it is off
    unless the operator names the directories it may use."""

    host_path_prefixes: tuple[str, ...] = ()  # empty: hostPath off
    author: author_policy.AuthorPolicy = author_policy.AuthorPolicy()  # Secrets, env, registries, security


DEFAULT_POLICY = Policy()


def host_path_prefix(text: str) -> str:
    """argparse type of --allow-host-path: an absolute directory without '.' or '..' segments."""
    if not re.fullmatch(ABSOLUTE_PATH_PATTERN, text) or re.search(DOT_SEGMENT, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an absolute directory like /data/hf-cache")
    return text


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The Policy flags, shared by `specpilot run`, `validate` and `render` so all three judge alike."""
    parser.add_argument("--allow-host-path", action="append", dest="host_path_prefixes", default=[],
                        type=host_path_prefix, metavar="DIR",
                        help="allow spec.engine.modelCache.hostPath at DIR or below (repeatable); default: "
                             "hostPath is refused")
    author_policy.add_arguments(parser)


def policy_from(args: argparse.Namespace) -> Policy:
    return Policy(host_path_prefixes=tuple(args.host_path_prefixes), author=author_policy.from_args(args))


class InvalidSpeculativeDeployment(ValueError):
    """Raised by `load` with every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


@lru_cache(maxsize=1)
def crd_schema() -> dict[str, Any]:
    """The generated openAPIV3Schema (built once; it depends only on the code)."""
    return open_api_schema()


def speculative_config(spec: SpeculativeDeploymentSpec, n: int | None = None,
                       schedule_rows: list[list[int]] | None = None) -> SpeculativeConfig:
    """The runtime's SpeculativeConfig for a spec, at N = `n` (default: the spec's N), serving
    `schedule_rows` ([lo, hi, K] rows the tuner chose) instead of the spec's schedule when given."""
    s = spec.speculative
    started = s.num_speculative_tokens if n is None else n
    schedule = None
    if schedule_rows:
        schedule = [(lo, hi, k) for lo, hi, k in schedule_rows]
    elif s.schedule:
        # A track the tuner started at another N cannot draft more than its own N in any batch range.
        cap = started if n is not None else None
        schedule = [(e.min_batch_size, e.max_batch_size,
                     e.num_speculative_tokens if cap is None else min(e.num_speculative_tokens, cap))
                    for e in s.schedule]
    return SpeculativeConfig(method=s.method, model=s.draft_model, num_speculative_tokens=started,
                             block_size=s.block_size, num_speculative_tokens_per_batch_size=schedule,
                             extra=dict(s.extra))


def _no_schedule_reason(spec: SpeculativeDeploymentSpec) -> str:
    """Why vLLM 0.33 would silently not serve a batch-size schedule (data parallelism > 1); "" when it would."""
    dp = data_parallel_size(spec.engine.args)
    if dp <= 1:
        return ""
    return f"vLLM 0.33 serves no batch-size schedule under data parallelism > 1 (spec.engine.args asks for {dp})"


def spec_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """The rules CEL cannot express, on an already schema-valid spec."""
    found = _contender_problems(spec)
    found += _alternative_problems(spec)
    found += adaptive.problems(spec)
    found += arg_problems(spec.engine.args, "spec.engine.args", tuning=spec.tuning.enabled)
    found += _resource_problems(spec.engine.resources, gpu_resource(spec.accelerator))
    why = _no_schedule_reason(spec)
    if why and spec.tuning.enabled and spec.tuning.mode == "schedule":
        found.append(Problem("spec.tuning.mode", f"{why}: use mode single, or remove the data parallelism"))
    found += _schedule_mode_problems(spec)
    found += _switchback_problems(spec)
    for name, count in Counter(e.name for e in spec.engine.env).items():
        if count > 1:
            found.append(Problem("spec.engine.env", f"{name} is set {count} times; set each variable once"))
    found += _env_problems(spec)
    found += _runtime_limit_problems(spec)
    return found


def _schedule_mode_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Tuning mode schedule with a contender whose vLLM model runner ignores the schedule, each named (CEL
    refuses the same, naming the methods only)."""
    if not (spec.tuning.enabled and spec.tuning.mode == "schedule"):
        return []
    contenders = [(f"{SPECULATIVE_PATH}.method", spec.speculative.method)]
    contenders += [(f"spec.tuning.alternatives[{i}].method", a.method)
                   for i, a in enumerate(spec.tuning.alternatives or ())]
    return [Problem("spec.tuning.mode", schedule_mode_message(f"{method} ({where})"))
            for where, method in contenders if method in METHODS and method not in (*SCHEDULE_METHODS, OFF)] \
        + _blind_drafter_problems(spec, "mode", "schedule")


def _blind_drafter_problems(spec: SpeculativeDeploymentSpec, field: str, value: str) -> list[Problem]:
    """spec.tuning.`field` = `value`, which needs a batch-size table, with a contender whose drafter makes vLLM
    ignore one on this vendor (speculative.table_blind), each named at the tuning field (CEL refuses the same)."""
    contenders = [(SPECULATIVE_PATH, spec.speculative)]
    contenders += [(f"spec.tuning.alternatives[{i}]", a) for i, a in enumerate(spec.tuning.alternatives or ())]
    return [Problem(f"spec.tuning.{field}",
                    drafter_setting_message(field, value, f"{where}.{DRAFTER_FIELD}", s.ngram_drafter))
            for where, s in contenders if table_blind(s.ngram_drafter, spec.accelerator.vendor)]


def _switchback_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """spec.tuning.measure switchback where vLLM would not serve the live table (a contender's method whose
    model runner drops it, data parallelism), and user capture settings too small for the started N."""
    if not (spec.tuning.enabled and spec.tuning.measure == "switchback"):
        return []
    contenders = [(f"{SPECULATIVE_PATH}.method", spec.speculative.method)]
    contenders += [(f"spec.tuning.alternatives[{i}].method", a.method)
                   for i, a in enumerate(spec.tuning.alternatives or ())]
    found = [Problem(MEASURE_PATH, switchback_message(f"{method} ({where})"))
             for where, method in contenders if method in METHODS and method not in (*SCHEDULE_METHODS, OFF)]
    found += _blind_drafter_problems(spec, "measure", "switchback")
    why = _no_schedule_reason(spec)
    if why:
        found.append(Problem(MEASURE_PATH, f"switchback serves draft lengths through a batch-size table, but {why}: "
                                           "use measure canary, or remove the data parallelism"))
    if found:
        return found
    # The widest pod any contender's stable track may start (a tournament may promote an alternative).
    deployment = SpeculativeDeployment(spec=spec)
    n = max(started_n(deployment.for_contender(i)) for i in range(len(adaptive.contender_alternatives(spec)) + 1))
    plan = capture_plan(spec.engine.args, spec.accelerator.vendor, n)
    return plan.problems if plan else []


def _runtime_limit_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """What the runtime in the pod would refuse of the spec's own fields, by the runtime's own rules: a target
    model path the kernel cannot open (a path component past NAME_MAX, the whole past PATH_MAX). Draft
    models (spec.speculative's and each alternative's) are checked with the speculative config."""
    return model_problems(spec.model, "spec.model")


def _contender_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """spec.speculative and the candidates it is tuned over: what an alternative is checked for too."""
    s = spec.speculative
    found = speculative_config(spec).problems(SPECULATIVE_PATH, spec.accelerator.count)
    found += drafter_problems(s.ngram_drafter, s.method, bool(s.schedule), spec.accelerator.vendor,
                              f"{SPECULATIVE_PATH}.{DRAFTER_FIELD}", f"{SPECULATIVE_PATH}.schedule")
    why = _no_schedule_reason(spec)
    if why and spec.speculative.schedule:
        found.append(Problem(f"{SPECULATIVE_PATH}.schedule", f"{why}: remove the schedule or the data parallelism"))
    if SCHEDULE_KEY in spec.speculative.extra:
        found.append(Problem(f"{SPECULATIVE_PATH}.extra.{SCHEDULE_KEY}",
                             f"set {SPECULATIVE_PATH}.schedule instead: specpilot checks it against N and caps it "
                             "for canaries started at a lower N"))
    found += _candidate_problems(spec)
    for value, count in Counter(spec.tuning.candidates or ()).items():
        if count > 1:
            found.append(Problem(CANDIDATES_PATH, f"{value} is listed {count} times; list each N once"))
    if any(len(key) > MAX_EXTRA_KEY_LENGTH for key in spec.speculative.extra):
        # A CEL rule in spirit, which CEL cannot express (rules.py): extra's keys are out of its reach.
        found.append(Problem(f"{SPECULATIVE_PATH}.extra", EXTRA_KEY_MESSAGE))
    for key, value in spec.speculative.extra.items():
        size = len(json.dumps(value))
        if size > MAX_EXTRA_VALUE_BYTES:
            found.append(Problem(f"{SPECULATIVE_PATH}.extra.{key}",
                                 f"is {size} bytes as JSON; at most {MAX_EXTRA_VALUE_BYTES}"))
    return found


def _alternative_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Each alternative checked as spec.speculative is, on the spec the operator renders it from
    (for_contender), with the problems moved to the alternative's paths; then duplicates."""
    deployment = SpeculativeDeployment(spec=spec)
    found: list[Problem] = []
    for i, alternative in enumerate(spec.tuning.alternatives or ()):
        where = f"spec.tuning.alternatives[{i}]"
        moves = {SPECULATIVE_PATH: where, CANDIDATES_PATH: f"{where}.candidates"}
        for problem in _contender_problems(deployment.for_contender(i + 1).spec):
            # Inherited candidates are checked as spec.tuning.candidates; the tuner skips those above an
            # alternative's limit (machine.candidates), so an alternative answers only for its own.
            if alternative.candidates or not _covers(CANDIDATES_PATH, problem.path):
                found.append(_moved(problem, moves))
    return found + _duplicate_alternatives(spec)


def _moved(problem: Problem, moves: dict[str, str]) -> Problem:
    """`problem` with the first of `moves`' paths that covers it replaced, in its path and its message."""
    for old, new in moves.items():
        if _covers(old, problem.path):
            return Problem(new + problem.path[len(old):], problem.message.replace(old, new))
    return problem


def _duplicate_alternatives(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """An alternative that speculates as spec.speculative or an earlier alternative does: the tuner would
    measure the same drafter twice (it tunes N for each contender already)."""
    seen = {_drafter(spec.speculative): SPECULATIVE_PATH}
    found: list[Problem] = []
    for i, alternative in enumerate(spec.tuning.alternatives or ()):
        where, drafter = f"spec.tuning.alternatives[{i}]", _drafter(alternative)
        if drafter in seen:
            found.append(Problem(where, f"has the same method, draftModel, blockSize, extra and ngramDrafter as "
                                        f"{seen[drafter]}: the tuner already tries N for it; remove this "
                                        "alternative or change one of those fields"))
        else:
            seen[drafter] = where
    return found


def _drafter(speculative: Speculative) -> str:
    """What makes two ways to speculate different contenders (N, schedule and candidates are tuned)."""
    return json.dumps([speculative.method, speculative.draft_model, speculative.block_size, speculative.extra,
                       speculative.ngram_drafter], sort_keys=True)


def policy_problems(spec: SpeculativeDeploymentSpec, policy: Policy) -> list[Problem]:
    """What this operator's policy refuses although the CRD allows it."""
    return author_policy.problems([e.name for e in spec.engine.env], spec.image, spec.accelerator.vendor,
                                  spec.accelerator.security_profile, policy.author) + _host_path_problems(spec, policy)


def _host_path_problems(spec: SpeculativeDeploymentSpec, policy: Policy) -> list[Problem]:
    cache = spec.engine.model_cache
    host = cache.host_path if cache else None
    if host is None:
        return []
    where = "spec.engine.modelCache.hostPath"
    if not policy.host_path_prefixes:
        return [Problem(where, "hostPath model caches are off: the operator was not started with "
                               "--allow-host-path (chart value operator.allowedHostPaths); use claimName, a "
                               "PersistentVolumeClaim")]
    if not any(host == p or host.startswith(p.rstrip("/") + "/") for p in policy.host_path_prefixes):
        return [Problem(where, f"{host!r} is outside the host directories this operator allows "
                               f"({', '.join(policy.host_path_prefixes)}); use one of them or claimName")]
    return []


def _env_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """The runtime's environment check, so a spec it would refuse in the pod is refused here."""
    env = {e.name: e.value for e in spec.engine.env}
    problem = visible_devices_problem(spec.accelerator.vendor, env)
    if problem is None:
        return []
    index = next(i for i, e in enumerate(spec.engine.env) if e.name == CUDA_VISIBLE)
    return [Problem(f"spec.engine.env[{index}].value", problem)]


def _size_problem(obj: dict[str, Any]) -> list[Problem]:
    size = len(json.dumps(obj.get("spec"), default=str))
    if size <= MAX_SPEC_BYTES:
        return []
    return [Problem("spec", f"is {size} bytes as JSON; at most {MAX_SPEC_BYTES} (a real spec is a few KiB)")]


def _candidate_problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    method, block = spec.speculative.method, spec.speculative.block_size
    limit = max_n(method, block)
    block_note = f" at blockSize {block or METHODS[method].default_block_size}" \
        if METHODS[method].block_bound is not None else ""
    return [Problem(f"spec.tuning.candidates[{i}]",
                    f"{c} is above {method}'s limit{block_note}: allowed 0..{limit} (0 turns speculation off)")
            for i, c in enumerate(spec.tuning.candidates or ()) if c > limit]


def _resource_problems(resources: dict[str, Any], gpu: str) -> list[Problem]:
    found: list[Problem] = []
    for key, value in resources.items():
        where = f"spec.engine.resources.{key}"
        if key not in RESOURCE_KEYS:
            found.append(Problem(where, f"unknown field, allowed: {', '.join(RESOURCE_KEYS)}"))
        elif key != "claims" and not isinstance(value, dict):
            found.append(Problem(where, "must be a map of resource name to quantity"))
        elif key != "claims":
            for name in sorted({*GPU_RESOURCES.values(), gpu}):
                if name in value:
                    found.append(Problem(f"{where}.{name}",
                                         "is set by specpilot from spec.accelerator; set accelerator.count "
                                         "(and accelerator.resourceName for another resource)"))
    return found


def _covers(node: str, path: str) -> bool:
    return path == node or path.startswith((node + ".", node + "["))


def _as_speculative(path: str) -> str:
    """An alternative's path as the same field of spec.speculative (its candidates as spec.tuning.candidates)."""
    match = ALTERNATIVE_PATH.match(path)
    if match is None:
        return path
    rest = path[match.end():]
    if _covers(".candidates", rest):
        return CANDIDATES_PATH + rest[len(".candidates"):]
    return SPECULATIVE_PATH + rest


def _removed_method_reason(problem: Problem, obj: dict[str, Any]) -> Problem:
    """Say why a removed method is refused rather than only listing the methods allowed."""
    match = METHOD_PATH.fullmatch(problem.path)
    if match is None:
        return problem
    # A problem at this path means every object and list on the way to it is one.
    spec = obj["spec"]
    index = match.group(1)
    method = (spec["speculative"] if index is None else spec["tuning"]["alternatives"][int(index)]).get("method")
    reason = REMOVED_METHODS.get(method) if isinstance(method, str) else None
    return Problem(problem.path, f"{method!r} is not supported: {reason}") if reason else problem


def _pydantic_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's location in the schema's path form: `spec.engine.env[0].value`."""
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}" if path else str(part)
    return path


def _pydantic_problems(err: ValidationError) -> list[Problem]:
    return [Problem(_pydantic_path(e["loc"]), e["msg"]) for e in err.errors()]


def validate_object(obj: Any, policy: Policy = DEFAULT_POLICY) -> list[Problem]:
    """Every problem with one SpeculativeDeployment object (a dict as read from YAML or the API), for an
    operator running with `policy`.

    Checks apiVersion, kind, metadata.name and spec; status is the operator's, not the user's, so an
    object read back from the cluster validates the same as the file it was applied from.
    """
    if not isinstance(obj, dict):
        return [Problem("", f"must be a {KIND} object, got {type(obj).__name__}")]
    obj = {k: v for k, v in obj.items() if k != "status"}
    found: list[Problem] = []
    if obj.get("apiVersion") != API_VERSION:
        found.append(Problem("apiVersion", f"{obj.get('apiVersion')!r} is not allowed, use {API_VERSION}"))
    if obj.get("kind") != KIND:
        found.append(Problem("kind", f"{obj.get('kind')!r} is not allowed, use {KIND}"))
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not (metadata.get("name") or metadata.get("generateName")):
        found.append(Problem("metadata.name", "is required"))
    if found:
        return found
    found = _size_problem(obj)
    if found:
        return found  # checking it field by field would only repeat the same thing, slowly
    schema = crd_schema()
    api = [_removed_method_reason(p, obj) for p in admission.problems(schema, obj)]
    try:
        parsed = SpeculativeDeployment.model_validate(admission.defaulted(schema, obj))
    except ValidationError as err:
        # The schema already named these fields; pydantic adds only what it alone refuses.
        return api + [p for p in _pydantic_problems(err)
                      if not any(_covers(a.path, p.path) or _covers(p.path, a.path) for a in api)]
    semantic = spec_problems(parsed.spec) + policy_problems(parsed.spec, policy)
    # A rule both layers check: keep the semantic message, which names the item and the value.
    kept = [p for p in api
            if not (_as_speculative(p.path) in RECHECKED_PATHS and any(_covers(p.path, s.path) for s in semantic))]
    return kept + semantic


def load(obj: dict[str, Any], policy: Policy = DEFAULT_POLICY) -> SpeculativeDeployment:
    """Validate and parse spec and metadata (status stays None: read it from the object itself).

    Raises InvalidSpeculativeDeployment listing every problem.
    """
    problems = validate_object(obj, policy)
    if problems:
        raise InvalidSpeculativeDeployment(problems)
    spec_only = {k: v for k, v in obj.items() if k != "status"}
    return SpeculativeDeployment.model_validate(admission.defaulted(crd_schema(), spec_only))


def problem_lines(doc: documents.Document, problems: list[Problem]) -> list[str]:
    """`FILE: NAME: field: message` lines for one document's problems, as `validate` and `render` print them:
    a long list summarised by field (runtime report.summarised: 10,000 candidates made 9,969 lines), each
    name, field and message bounded however large the value it quotes."""
    name, head = doc.name, f"{doc.file}: "
    lines = []
    for p in summarised(problems):
        line = documents.problem_line(doc, one_line(p.path, MAX_PATH_CHARS), one_line(p.message))
        if len(name) > MAX_NAME_CHARS and line.startswith(head + name):
            line = head + one_line(name, MAX_NAME_CHARS) + line[len(head) + len(name):]
        lines.append(line)
    return lines
