"""No two SpeculativeDeployments' children can share a name: every name a child takes is refused as a
SpeculativeDeployment's own name (the reserved endings), so `chat-canary` cannot be created beside `chat`."""

from __future__ import annotations

import itertools

from specpilot.api.models import RESERVED_NAME_SUFFIXES
from specpilot.api.validate import validate_object
from specpilot.api.names import (TRACKS, config_map_name, deployment_name, drain_config_map_name, live_config_map_name,
                                 service_name, track_service_name)


def _children(name: str) -> dict[str, set[str]]:
    return {"Deployment": {deployment_name(name, t) for t in TRACKS},
            "ConfigMap": {config_map_name(name, t) for t in TRACKS} | {live_config_map_name(name),
                                                                        drain_config_map_name(name)},
            "Service": {service_name(name)} | {track_service_name(name, t) for t in TRACKS}}


def _admitted(name: str) -> bool:
    obj = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": name},
           "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}}
    return validate_object(obj) == []


def test_admitted_names_never_share_a_child_name_of_the_same_kind() -> None:
    stems = ["chat", "chat-engine", "a", "a-b"]
    names = stems + [f"{s}{suffix}" for s in stems for suffix in ("-canary", "-stable", "-engine", "-canary-engine",
                                                                   "-live", "-drain")]
    admitted = [n for n in dict.fromkeys(names) if _admitted(n)]
    assert "chat" in admitted and "chat-engine" in admitted
    assert not any(n.endswith(RESERVED_NAME_SUFFIXES) for n in admitted)
    for a, b in itertools.combinations(admitted, 2):
        for kind, taken in _children(a).items():
            assert not taken & _children(b)[kind], (a, b, kind)


def test_the_refusal_names_the_field_and_why() -> None:
    obj = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat-canary"},
           "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}}
    (problem,) = validate_object(obj)
    assert problem.path == "metadata.name" and "must not end in -canary or -stable" in problem.message
