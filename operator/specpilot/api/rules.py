"""The CRD's cross-field rules as CEL (`x-kubernetes-validations`), generated from speculative.py.

Every method list and limit below is read from the runtime's tables, so adding a method or changing a
bound there changes the CRD (and the drift test tells you to regenerate it). Rules are keyed by the
schema location they sit on: dotted property names, `[]` for a list's items, "" for the root.
What a real kube-apiserver requires of them (tests/controlplane/test_crd_on_apiserver.py applies the CRD):
- each rule reads only fields whose size the schema bounds (maxItems / maxLength / enum), so the API server's
  cost estimate stays within its limits (the whole schema's rules are ~15% of the total budget);
- no messageExpression converts a number with string(): its size has no bound in the estimate, so every
  concatenation after it is estimated at the largest request (>100x the budget); number_text instead;
- a rule on a section the schema defaults to `{}` guards every field with has(): the server checks that
  default against the rules as it is, before the fields' own defaults fill it ("no such key");
- CEL cannot range over a preserve-unknown-fields object's keys: the length of `extra`'s keys is checked in
  validate.py, which the operator runs too.
"""

from __future__ import annotations

import re
from typing import get_args

from specpilot_runtime.engine_config import DISABLE_LOG_STATS, RESERVED_FLAGS, GpuVendor
from specpilot_runtime.speculative import (
    CUSTOM_DRAFTERS,
    DEFAULT_NGRAM_DRAFTER,
    DRAFTER_METHOD,
    MAX_NUM_SPECULATIVE_TOKENS,
    METHODS,
    OFF,
    SCHEDULE_METHODS,
    SCHEDULE_START_MESSAGE,
    SPECULATIVE_FLAGS,
    SCHEDULE_INSTEAD,
    SCHEDULE_WHAT,
    Family,
    drafter_table_message,
    schedule_ignored,
    schedule_method_message,
    table_blind,
)

from .models import (MAX_BLOCK_SIZE, MAX_SLO_TPOT, MAX_SLO_TTFT, MIN_ANALYSIS_WINDOW, RESERVED_MOUNT_PATHS,
                     RESERVED_NAME_SUFFIXES)

RECOMMENDED_PROFILE = "recommended"
REPLACE_MODE_MESSAGE = ("canary mode replace takes canary.replicas stable replicas out while the canary runs: it "
                        "needs replicas >= canary.replicas + 1 (at least 2) so a stable replica keeps serving; "
                        "raise replicas or use mode surge (which needs spare GPUs)")

Rule = dict[str, str]

# A '.' or '..' path segment, which would let a path climb out of the directory it names.
DOT_SEGMENT = "(^|/)[.][.]?(/|$)"
# Longer than any vLLM speculative-config key (validate.py checks it: CEL cannot read extra's keys).
MAX_EXTRA_KEY_LENGTH = 64
EXTRA_KEY_MESSAGE = f"extra keys are vLLM speculative-config keys: at most {MAX_EXTRA_KEY_LENGTH} characters"


def _list(values: list[str] | tuple[str, ...] | frozenset[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in sorted(values)) + "]"


def _methods(draft_model: str) -> list[str]:
    return sorted(m for m, r in METHODS.items() if r.draft_model == draft_model)


def _block_methods() -> list[str]:
    return sorted(m for m, r in METHODS.items() if r.block_bound is not None)


def _block_limit(method: str) -> str:
    """A block method's N limit in words: "blockSize - 1", "blockSize"."""
    bound = METHODS[method].block_bound or 0
    return "blockSize" + (f" - {-bound}" if bound < 0 else f" + {bound}" if bound > 0 else "")


def _limits_text() -> str:
    """The per-method N limits in words, e.g. "blockSize - 1 for dflash, ..., 32 for other methods"."""
    parts = [f"{_block_limit(name)} for {name}" for name in _block_methods()]
    return ", ".join(parts) + f", {MAX_NUM_SPECULATIVE_TOKENS} for other methods; only 0 when method is off"


def max_n_expression(speculative: str) -> str:
    """CEL for speculative.max_n(method, blockSize), with `speculative` the expression of a speculative
    object (spec.speculative or one of spec.tuning.alternatives)."""
    method = f"{speculative}.method"
    expr = str(MAX_NUM_SPECULATIVE_TOKENS)
    for name, rule in reversed(list(METHODS.items())):
        if rule.family is Family.NONE:
            expr = f"{method} == '{name}' ? 0 : ({expr})"
        elif rule.block_bound is not None:
            block = (f"(has({speculative}.blockSize) ? {speculative}.blockSize "
                     f": {rule.default_block_size})")
            expr = f"{method} == '{name}' ? {block} + ({rule.block_bound}) : ({expr})"
    return expr


def _largest_limit() -> int:
    """The largest N any method allows at any blockSize the schema accepts."""
    bounds = [MAX_BLOCK_SIZE + (r.block_bound or 0) for r in METHODS.values() if r.block_bound is not None]
    return max([MAX_NUM_SPECULATIVE_TOKENS, *bounds])


def number_text(expression: str) -> str:
    """CEL for the decimal text of `expression`, an int in 0.._largest_limit(), as a messageExpression may
    use it: an index into a list of string literals. `string(int)` has no size bound in the API server's cost
    estimate, so every concatenation after it is estimated at the largest request (>100x the budget); a
    literal's size is known. Out of range it fails to evaluate, and the server falls back to `message`."""
    return "[" + ", ".join(f"'{i}'" for i in range(_largest_limit() + 1)) + f"][{expression}]"


def _candidates_rule(guard: str, candidates: str, speculative: str, field_path: str, what: str) -> Rule:
    """`candidates` (a list expression, read when `guard` does not already hold) lie in 0..max_n of the
    speculative object `speculative`."""
    limit = max_n_expression(speculative)
    return {"rule": f"{guard} || {candidates}.all(c, c <= ({limit}))",
            "fieldPath": field_path,
            "message": f"every {what} must lie within the method's limits: 0 (speculation off) "
                       f"up to {_limits_text()}",
            "messageExpression": f"'every {what} must lie in 0..' + {number_text(limit)} + ' for method ' + "
                                 f"{speculative}.method + ' (0 turns speculation off)'"}


def _prefixes(words: list[str]) -> str:
    """A regex for every prefix (the empty one included) of any of `words`, built on their trie so shared
    stems are written once; a '-' also matches '_', which vLLM reads as '-'."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})

    def walk(node: dict[str, dict]) -> str:
        if not node:
            return ""
        alts = [("[-_]" if ch == "-" else re.escape(ch)) + walk(child) for ch, child in sorted(node.items())]
        return "(" + "|".join(alts) + ")?"

    return walk(trie)


def flag_pattern(flags: frozenset[str]) -> str:
    """RE2 regex for an argv item that names one of `flags` in a spelling vLLM 0.33 accepts (engine_config.
    reserved_flags_named): a non-empty prefix of the flag, '_' for '-' in long flags, then the end, `=value`
    or a dotted sub-key. No backslashes, so it needs no escaping inside a CEL string."""
    long_words = sorted(f[2:] for f in flags if f.startswith("--"))
    short_words = sorted(f[1:] for f in flags if not f.startswith("--"))
    heads = [f"--({_prefixes(long_words)[1:-2]})"] if long_words else []
    heads += [f"-({_prefixes(short_words)[1:-2]})"] if short_words else []
    return "(?s)^(" + "|".join(heads) + ")([=.].*)?$"


def _flag_used(args: str, flags: frozenset[str]) -> str:
    return f"{args}.exists(a, a.matches('{flag_pattern(flags)}'))"


def _speculative_rules() -> list[Rule]:
    required, forbidden = _methods("required"), _methods("forbidden")
    rules: list[Rule] = [
        {"rule": f"!(self.method in {_list(required)}) || has(self.draftModel)",
         "fieldPath": ".draftModel", "reason": "FieldValueRequired",
         "message": f"draftModel is required for methods {', '.join(required)}: "
                    "set a draft checkpoint (hub id or path)"},
        {"rule": f"!(self.method in {_list(forbidden)}) || !has(self.draftModel)",
         "fieldPath": ".draftModel", "reason": "FieldValueForbidden",
         "message": f"draftModel must not be set for methods {', '.join(forbidden)}: remove it"},
        {"rule": f"self.method == '{OFF}' || self.numSpeculativeTokens >= 1",
         "fieldPath": ".numSpeculativeTokens",
         "message": f"numSpeculativeTokens must be >= 1 (at most {MAX_NUM_SPECULATIVE_TOKENS}) "
                    "unless method is off"},
        {"rule": f"self.method != '{OFF}' || self.numSpeculativeTokens == 0",
         "fieldPath": ".numSpeculativeTokens",
         "message": "numSpeculativeTokens must be 0 or omitted when method is off"},
        {"rule": f"self.method != '{OFF}' || !has(self.schedule)",
         "fieldPath": ".schedule", "reason": "FieldValueForbidden",
         "message": "schedule must be omitted when method is off"},
        _schedule_method_rule(),
        {"rule": "!has(self.schedule) || "
                 "self.schedule.all(e, e.numSpeculativeTokens <= self.numSpeculativeTokens)",
         "fieldPath": ".schedule",
         "message": "every schedule entry's numSpeculativeTokens must be <= the started "
                    "numSpeculativeTokens (vLLM sizes its buffers for that N)"},
        {"rule": "!has(self.schedule) || size(self.schedule) == 0 || self.schedule[0].minBatchSize == 1",
         "fieldPath": ".schedule", "message": SCHEDULE_START_MESSAGE},
        {"rule": f"!has(self.blockSize) || self.method in {_list(_block_methods())}",
         "fieldPath": ".blockSize", "reason": "FieldValueForbidden",
         "message": f"blockSize applies only to methods {', '.join(_block_methods())}: remove it"},
        *_drafter_rules(),
    ]
    for name in _block_methods():
        rule = METHODS[name]
        bound = rule.block_bound or 0
        limit = _block_limit(name)
        block = f"(has(self.blockSize) ? self.blockSize : {rule.default_block_size})"
        rules.append({
            "rule": f"self.method != '{name}' || self.numSpeculativeTokens <= {block} + ({bound})",
            "fieldPath": ".numSpeculativeTokens",
            "message": f"{name} allows numSpeculativeTokens <= {limit} "
                       f"(blockSize defaults to {rule.default_block_size}): {rule.note}"})
    # The length of extra's keys is checked in validate.py (extra_key_problems), not here: extra is a
    # preserve-unknown-fields object, whose keys CEL cannot range over (the API server refuses
    # `self.extra.all(k, ...)`: "cannot be range of a comprehension"), and a map of typeless values would
    # not be a CEL map either.
    return rules


DRAFTER_FIELD = "ngramDrafter"


def _table_blind_drafters() -> list[str]:
    """Drafters with which vLLM ignores a batch-size table on every vendor the CRD admits (all GPUs)."""
    return sorted(d for d in CUSTOM_DRAFTERS if all(table_blind(d, v) for v in get_args(GpuVendor)))


def _blind_drafter(speculative: str) -> str:
    """CEL: the speculative object `speculative` names a table-blind drafter."""
    return f"(has({speculative}.{DRAFTER_FIELD}) && {speculative}.{DRAFTER_FIELD} in {_list(_table_blind_drafters())})"


def _drafter_rules() -> list[Rule]:
    """speculative.drafter_problems as CEL: a drafter of specpilot's drafts for its method only, and never
    with a schedule (every vendor the CRD admits is a GPU, where vLLM ignores the table with it)."""
    return [
        {"rule": f"!has(self.{DRAFTER_FIELD}) || self.{DRAFTER_FIELD} == '{DEFAULT_NGRAM_DRAFTER}' || "
                 f"self.method == '{DRAFTER_METHOD}'",
         "fieldPath": f".{DRAFTER_FIELD}", "reason": "FieldValueForbidden",
         "message": f"{DRAFTER_FIELD} other than {DEFAULT_NGRAM_DRAFTER} drafts for method {DRAFTER_METHOD} only: "
                    f"use {DEFAULT_NGRAM_DRAFTER} or method {DRAFTER_METHOD}"},
        {"rule": f"!{_blind_drafter('self')} || !has(self.schedule)",
         "fieldPath": f".{DRAFTER_FIELD}", "reason": "FieldValueForbidden",
         "message": drafter_table_message(DRAFTER_FIELD, " or ".join(_table_blind_drafters()),
                                          SCHEDULE_WHAT, SCHEDULE_INSTEAD)},
    ]


# What each tuning setting that needs a batch-size table is called where a drafter is refused, and the fix.
TABLE_SETTINGS: dict[tuple[str, str], tuple[str, str]] = {
    ("mode", "schedule"): ("tuning mode schedule (an N per batch-size range)", "use tuning mode single"),
    ("measure", "switchback"): ("tuning measure switchback (draft lengths set live in a batch-size table)",
                                "use tuning measure canary"),
}


def drafter_setting_message(field: str, value: str, drafter_field: str, drafter: str) -> str:
    what, instead = TABLE_SETTINGS[(field, value)]
    return drafter_table_message(drafter_field, drafter, what, instead)


def _drafter_table_rule(field: str, value: str) -> Rule:
    """spec.tuning.`field` = `value` needs a batch-size table: neither spec.speculative nor an alternative may
    name a drafter with which vLLM ignores it."""
    return {"rule": "!has(self.tuning) || !has(self.tuning.enabled) || !self.tuning.enabled || "
                    f"!has(self.tuning.{field}) || self.tuning.{field} != '{value}' || "
                    f"(!{_blind_drafter('self.speculative')} && (!has(self.tuning.alternatives) || "
                    f"!self.tuning.alternatives.exists(a, {_blind_drafter('a')})))",
            "fieldPath": f".tuning.{field}",
            "message": drafter_setting_message(field, value, DRAFTER_FIELD, " or ".join(_table_blind_drafters()))
            + " in spec.speculative and every alternative"}


def _schedule_blind_methods() -> list[str]:
    """Methods that draft but whose vLLM model runner ignores a batch-size schedule."""
    return sorted(m for m, r in METHODS.items() if r.family is not Family.NONE and m not in SCHEDULE_METHODS)


def _schedule_method_rule() -> Rule:
    """A schedule only with a method whose vLLM model runner serves it (speculative.SCHEDULE_METHODS); off
    has its own rule."""
    return {"rule": f"!has(self.schedule) || self.method in {_list([*SCHEDULE_METHODS, OFF])}",
            "fieldPath": ".schedule", "reason": "FieldValueForbidden",
            "message": schedule_method_message(", ".join(_schedule_blind_methods()))}


def _schedule_entry_rules() -> list[Rule]:
    return [{"rule": "self.minBatchSize <= self.maxBatchSize", "fieldPath": ".maxBatchSize",
             "message": "maxBatchSize must be >= minBatchSize"}]


def _engine_rules() -> list[Rule]:
    other_owned = RESERVED_FLAGS - SPECULATIVE_FLAGS
    return [
        {"rule": f"!has(self.args) || !{_flag_used('self.args', SPECULATIVE_FLAGS)}",
         "fieldPath": ".args", "reason": "FieldValueForbidden",
         "message": f"args must not carry speculative flags ({', '.join(sorted(SPECULATIVE_FLAGS))}), "
                    "in any spelling vLLM accepts (_ for -, =value, .subkey, abbreviations): "
                    "set spec.speculative instead"},
        {"rule": f"!has(self.args) || !{_flag_used('self.args', other_owned)}",
         "fieldPath": ".args", "reason": "FieldValueForbidden",
         "message": f"args must not carry {', '.join(sorted(other_owned))}, in any spelling vLLM accepts "
                    "(_ for -, =value, .subkey, abbreviations): specpilot sets them from spec.model, "
                    "spec.servedModelName, spec.accelerator and spec.engine.drainSeconds (--config would read flags "
                    "from a file)"},
    ]


def package_message(method: str, package: str, where: str = "") -> str:
    return (f"method {method}{where} needs the {package} package, which vLLM's images and specpilot's default "
            f"images lack (vLLM fails at startup without it): build an image FROM the default one with `pip "
            f"install {package}`, set spec.image to it and list {package} in spec.imagePackages")


def _package_rules() -> list[Rule]:
    """A method whose package vLLM does not ship runs only on an image declared to carry it, whether
    spec.speculative or an alternative the tuner may promote names it."""
    rules: list[Rule] = []
    for name, rule in METHODS.items():
        if not rule.package:
            continue
        shipped = f"(has(self.image) && has(self.imagePackages) && '{rule.package}' in self.imagePackages)"
        rules += [
            {"rule": f"self.speculative.method != '{name}' || {shipped}",
             "fieldPath": ".imagePackages", "reason": "FieldValueRequired",
             "message": package_message(name, rule.package)},
            {"rule": "!has(self.tuning) || !has(self.tuning.alternatives) || "
                     f"!self.tuning.alternatives.exists(a, a.method == '{name}') || {shipped}",
             "fieldPath": ".imagePackages", "reason": "FieldValueRequired",
             "message": package_message(name, rule.package, " (in spec.tuning.alternatives)")},
        ]
    return rules


def _cluster_fit_rules() -> list[Rule]:
    """What the cluster would refuse or never schedule: Pod Security and canaries without spare GPUs."""
    return [
        {"rule": "!has(self.engine) || !has(self.engine.modelCache) || !has(self.engine.modelCache.hostPath) || "
                 "!has(self.accelerator) || !has(self.accelerator.securityProfile) || "
                 f"self.accelerator.securityProfile == '{RECOMMENDED_PROFILE}'",
         "fieldPath": ".engine.modelCache.hostPath", "reason": "FieldValueForbidden",
         "message": "hostPath volumes are forbidden by Pod Security baseline and restricted "
                    "(accelerator.securityProfile): use claimName, a PersistentVolumeClaim"},
        {"rule": "!has(self.tuning) || !has(self.tuning.enabled) || !self.tuning.enabled || "
                 "!has(self.tuning.canary) || !has(self.tuning.canary.mode) || self.tuning.canary.mode != 'replace' "
                 "|| (has(self.replicas) ? self.replicas : 1) >= "
                 "(has(self.tuning.canary.replicas) ? self.tuning.canary.replicas : 1) + 1",
         "fieldPath": ".tuning.canary.mode",
         "message": REPLACE_MODE_MESSAGE},
    ]


def schedule_mode_message(methods: str) -> str:
    """Why tuning mode schedule is refused when spec.speculative or an alternative uses `methods`."""
    return (f"tuning mode schedule tunes a batch-size schedule, but {schedule_ignored(methods)}: use tuning "
            f"mode single, or one of {', '.join(SCHEDULE_METHODS)} in spec.speculative and every alternative")


def _table_methods_rule(field: str, value: str, message: str) -> Rule:
    """spec.tuning.`field` = `value` needs a batch-size table, so spec.speculative and every alternative must
    use a method whose runner serves one (or none)."""
    served = _list([*SCHEDULE_METHODS, OFF])
    return {"rule": "!has(self.tuning) || !has(self.tuning.enabled) || !self.tuning.enabled || "
                    f"!has(self.tuning.{field}) || self.tuning.{field} != '{value}' || "
                    f"(self.speculative.method in {served} && (!has(self.tuning.alternatives) || "
                    f"self.tuning.alternatives.all(a, a.method in {served})))",
            "fieldPath": f".tuning.{field}", "message": message}


def _schedule_mode_rule() -> Rule:
    return _table_methods_rule("mode", "schedule", schedule_mode_message(", ".join(_schedule_blind_methods())))


def switchback_message(methods: str) -> str:
    """Why tuning measure switchback is refused when spec.speculative or an alternative uses `methods`."""
    return (f"tuning measure switchback alternates draft lengths through a batch-size table, but "
            f"{schedule_ignored(methods)}: use measure canary, or one of {', '.join(SCHEDULE_METHODS)} in "
            "spec.speculative and every alternative")


def _switchback_rule() -> Rule:
    return _table_methods_rule("measure", "switchback", switchback_message(", ".join(_schedule_blind_methods())))


def _spec_rules() -> list[Rule]:
    return _package_rules() + _cluster_fit_rules() + [_schedule_mode_rule(), _switchback_rule()] + [
        _drafter_table_rule("mode", "schedule"), _drafter_table_rule("measure", "switchback")] + [
        _candidates_rule("!has(self.tuning) || !has(self.tuning.candidates)", "self.tuning.candidates",
                         "self.speculative", ".tuning.candidates", "tuning candidate"),
        {"rule": "!has(self.tuning) || !has(self.tuning.enabled) || !self.tuning.enabled || "
                 f"self.speculative.method != '{OFF}'",
         "fieldPath": ".tuning.enabled",
         "message": "tuning needs a speculative method: with method off there is no N to tune"},
        {"rule": "!has(self.tuning) || !has(self.tuning.enabled) || !self.tuning.enabled || "
                 "!has(self.engine) || !has(self.engine.args) || "
                 f"!{_flag_used('self.engine.args', frozenset({DISABLE_LOG_STATS}))}",
         "fieldPath": ".engine.args", "reason": "FieldValueForbidden",
         "message": f"{DISABLE_LOG_STATS} turns off the vllm: metrics tuning reads: remove it or set "
                    "tuning.enabled to false"},
    ]


def _slo_rule(field: str, most: str) -> Rule:
    """An SLO duration above 0 and at most `most` (models.Slo checks the same for every other reader)."""
    return {"rule": f"!has(self.{field}) || (duration(self.{field}) > duration('0s') && "
                    f"duration(self.{field}) <= duration('{most}'))",
            "fieldPath": f".{field}", "message": f"{field} must be above 0s and at most {most}"}


RESERVED_NAME_MESSAGE = (f"must not end in {' or '.join(RESERVED_NAME_SUFFIXES)}: another "
                         "SpeculativeDeployment's children take such names (its canary, its track Services)")

RULES: dict[str, list[Rule]] = {
    "": [{"rule": " && ".join(f"!self.metadata.name.endsWith('{s}')" for s in RESERVED_NAME_SUFFIXES),
          "fieldPath": ".metadata.name", "reason": "FieldValueInvalid", "message": RESERVED_NAME_MESSAGE}],
    "spec": _spec_rules(),
    "spec.speculative": _speculative_rules(),
    "spec.speculative.schedule[]": _schedule_entry_rules(),
    "spec.engine": _engine_rules(),
    "spec.engine.modelCache": [
        {"rule": "has(self.claimName) != has(self.hostPath)",
         "message": "set exactly one of claimName or hostPath"},
        {"rule": f"!has(self.mountPath) || !{_list(RESERVED_MOUNT_PATHS)}.exists(p, self.mountPath == p || "
                 "self.mountPath.startsWith(p + '/') || p.startsWith(self.mountPath + '/'))",
         "fieldPath": ".mountPath", "reason": "FieldValueForbidden",
         "message": f"mountPath must not be over, under or above specpilot's own mounts "
                    f"({', '.join(RESERVED_MOUNT_PATHS)}): use a directory of its own, e.g. /root/.cache/huggingface"},
        {"rule": f"!has(self.mountPath) || !self.mountPath.matches('{DOT_SEGMENT}')",
         "fieldPath": ".mountPath", "message": "mountPath must not contain '.' or '..' segments"},
        {"rule": f"!has(self.hostPath) || !self.hostPath.matches('{DOT_SEGMENT}')",
         "fieldPath": ".hostPath", "message": "hostPath must not contain '.' or '..' segments"},
    ],
    # Each alternative is checked as spec.speculative is, and its own candidates against its own limits.
    "spec.tuning.alternatives[]": _speculative_rules() + [
        _candidates_rule("!has(self.candidates)", "self.candidates", "self", ".candidates",
                         "candidate of this alternative"),
    ],
    "spec.tuning.alternatives[].schedule[]": _schedule_entry_rules(),
    # has() on every field: the API server checks the section's `{}` default against these rules as it is,
    # before its fields' own defaults fill it ("no such key: analysisWindow" otherwise).
    "spec.tuning.canary": [
        {"rule": f"!has(self.analysisWindow) || duration(self.analysisWindow) >= duration('{MIN_ANALYSIS_WINDOW}')",
         "fieldPath": ".analysisWindow",
         "message": f"analysisWindow must be at least {MIN_ANALYSIS_WINDOW} (real engines need minutes "
                    "per window): shorter windows keep the tuning loop busy"},
        {"rule": "!has(self.trafficRouting) || self.trafficRouting != 'gateway' || has(self.httpRoute)",
         "fieldPath": ".httpRoute", "reason": "FieldValueRequired",
         "message": "httpRoute is required when trafficRouting is gateway"},
    ],
    "spec.tuning.slo": [_slo_rule("ttft", MAX_SLO_TTFT), _slo_rule("tpot", MAX_SLO_TPOT)],
}
