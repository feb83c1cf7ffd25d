"""The SpeculativeDeployment CRD, generated from the pydantic models and the CEL rules.

`crd()` is what `specpilot crd` prints and what `crds/` holds. The openAPIV3Schema is structural:
every node has a type and a description, pydantic's Optional/`$ref` forms are flattened, and
`x-kubernetes-preserve-unknown-fields` appears only where the models accept free-form maps.
"""

from __future__ import annotations

import copy
from typing import Any

from . import kube_yaml
from .models import (
    GROUP,
    KIND,
    NAME_MAX_LENGTH,
    NAME_PATTERN,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    SpeculativeDeploymentSpec,
    SpeculativeDeploymentStatus,
)
from .rules import RULES

Schema = dict[str, Any]

_PRINTER_COLUMNS = [
    {"name": "Method", "type": "string", "jsonPath": ".status.method",
     "description": "Speculative-decoding method the stable pods run (the tuner may choose one of "
                    "spec.tuning.alternatives)."},
    {"name": "N", "type": "integer", "jsonPath": ".status.numSpeculativeTokens",
     "description": "num_speculative_tokens the stable pods run."},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
     "description": "Stable pods Ready."},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
     "description": "Lifecycle phase."},
    {"name": "Accepted length", "type": "number", "jsonPath": ".status.acceptedLength",
     "description": "Mean accepted length (1 + accepted/drafts) over the last window."},
    {"name": "Schedule", "type": "string", "jsonPath": ".status.servedSchedule",
     "description": "Batch-size schedule the stable pods serve (tuning mode schedule)."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    # -o wide: what the tuner is doing now.
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas", "priority": 1,
     "description": "Stable pods."},
    {"name": "Started N", "type": "integer", "jsonPath": ".status.startedNumSpeculativeTokens", "priority": 1,
     "description": "Switchback: the N the stable pods were started at (every N up to it is set live)."},
    {"name": "Arms", "type": "string", "jsonPath": ".status.liveArms", "priority": 1,
     "description": "Switchback: the draft-length tables the stable pods alternate between now."},
    {"name": "Canary N", "type": "integer", "jsonPath": ".status.canaryNumSpeculativeTokens", "priority": 1,
     "description": "num_speculative_tokens of the running canary, if any."},
    {"name": "Tuning", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Tuning")].reason',
     "priority": 1, "description": "What the tuner is doing (the Tuning condition's reason)."},
]

# The root metadata schema: the API server refuses anything there but name/generateName restrictions.
ROOT_METADATA = ".metadata"

# Keywords copied from pydantic's JSON schema as they are; bounds need translating (see _bounds).
_PLAIN_KEYWORDS = ("minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
                   "minProperties", "maxProperties", "enum", "default")


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline `$ref` and unwrap Optional (`anyOf: [X, null]`), keeping the outer keywords."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**_resolve(target, defs), **node}
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {options}")
        node = {**_resolve(options[0], defs), **node}
    if "default" in node and node["default"] is None:  # Optional field: absent means unset
        del node["default"]
    return node


def _bounds(node: Schema, out: Schema) -> None:
    """JSON Schema 2020's numeric exclusive bounds -> OpenAPI v3's boolean form."""
    for key, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if key in node:
            out[limit] = node[key]
            out[key] = True


def _convert(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    node = _resolve(node, defs)
    out: Schema = {}
    if "const" in node:
        out["enum"] = [node["const"]]
    kind = node.get("type")
    if kind is not None:
        out["type"] = kind
    if "description" in node:
        out["description"] = node["description"]
    for key in _PLAIN_KEYWORDS:
        if key in node:
            out[key] = copy.deepcopy(node[key])
    _bounds(node, out)
    if kind == "array":
        out["items"] = _convert(node["items"], defs, path + "[]")
    elif kind == "object" or kind is None:
        _convert_object(node, defs, path, out)
    rules = RULES.get(path)
    if rules:
        out["x-kubernetes-validations"] = copy.deepcopy(rules)
    return out


def _convert_object(node: Schema, defs: dict[str, Schema], path: str, out: Schema) -> None:
    props = node.get("properties")
    extra = node.get("additionalProperties")
    if props:
        required = set(node.get("required", ()))
        out["properties"] = {}
        for name, sub in props.items():
            child = _convert(sub, defs, f"{path}.{name}" if path else name)
            if child.get("type") == "object" and "properties" in child and name not in required \
                    and "default" not in sub:
                # A nested model with a default factory: `{}` lets the API server fill its defaults.
                child["default"] = {}
            out["properties"][name] = child
        if required:
            out["required"] = [n for n in props if n in required]
    elif isinstance(extra, dict) and extra:
        out["additionalProperties"] = _convert(extra, defs, path + "{}")
    else:
        # `dict[str, Any]` (type object) or `Any` (no type): a free-form value the models pass through.
        out["x-kubernetes-preserve-unknown-fields"] = True


def _require_descriptions(node: Schema, path: str) -> None:
    for name, sub in node.get("properties", {}).items():
        if not sub.get("description") and f"{path}.{name}" != ROOT_METADATA:
            raise ValueError(f"{path}.{name} has no description: add one to the pydantic model")
        _require_descriptions(sub, f"{path}.{name}")
    if "items" in node:
        _require_descriptions(node["items"], path + "[]")


def _section(model: type, path: str) -> Schema:
    schema = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    return _convert(schema, schema.get("$defs", {}), path)


def open_api_schema() -> Schema:
    """The version's openAPIV3Schema: what the API server and `specpilot validate` check objects against."""
    spec = _section(SpeculativeDeploymentSpec, "spec")
    status = _section(SpeculativeDeploymentStatus, "status")
    spec["description"] = ("What to serve (target model, accelerator, speculative method and N) and how "
                           "specpilot may tune N.")
    status["description"] = "Observed state, written by the operator."
    # A fresh object has no status; `{}` would make the API server write one.
    status.pop("default", None)
    root: Schema = {
        "type": "object",
        "description": "A vLLM deployment with speculative decoding whose num_speculative_tokens "
                       "specpilot tunes with canaries.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "specpilot.io/v1alpha1."},
            "kind": {"type": "string", "description": "SpeculativeDeployment."},
            # The API server allows nothing on the root metadata but restrictions of name and generateName
            # (no description: "must not specify anything other than name and generateName").
            "metadata": {
                "type": "object",
                "properties": {
                    "name": {
                        "type": "string", "maxLength": NAME_MAX_LENGTH, "pattern": NAME_PATTERN,
                        "description": "Also names the Service and labels the pods, so it must be a "
                                       "DNS-1035 label (lower case, starts with a letter, at most 63)."},
                },
            },
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": copy.deepcopy(RULES[""]),
    }
    _require_descriptions(root, "")
    return root


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": SINGULAR,
                      "shortNames": list(SHORT_NAMES), "categories": ["all", "specpilot"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": open_api_schema()},
                "subresources": {"status": {}},
                "additionalPrinterColumns": _PRINTER_COLUMNS,
            }],
        },
    }


def crd_yaml() -> str:
    """The CRD as YAML, exactly as checked in under crds/."""
    return "# Generated by `specpilot crd` from operator/specpilot/api; do not edit.\n" + kube_yaml.dump(
        crd(), sort_keys=False, width=100)
