"""How a tuned SpeculativeDeployment's canary takes its pods (tuning.canary.mode): the replicas and rolling
strategy of each track, the traffic share that follows, and the Event's words."""

from __future__ import annotations

from typing import Any

from specpilot.api.validate import load
from specpilot.canary.traffic import canary_weight
from specpilot.render import render
from specpilot.render.replicas import placement


def tuned_sd(mode: str, replicas: int = 3) -> Any:
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "qwen", "namespace": "llm"},
                 "spec": {"model": "Qwen/Qwen3-8B", "replicas": replicas,
                          "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                          "tuning": {"enabled": True, "canary": {"mode": mode}}}})


def deployments(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["labels"]["specpilot.io/track"]: o["spec"] for o in objects if o["kind"] == "Deployment"}


def test_replace_mode_gives_the_canary_a_stable_replica_and_rolls_without_surge() -> None:
    running = deployments(render(tuned_sd("replace"), canary_n=5))
    assert (running["stable"]["replicas"], running["canary"]["replicas"]) == (2, 1)  # 3 GPUs, as without a canary
    assert running["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert deployments(render(tuned_sd("replace")))["stable"]["replicas"] == 3
    assert canary_weight(tuned_sd("replace"), True) == 33  # traffic follows the replicas: 1 of 3 pods


def test_surge_mode_adds_the_canary_on_top() -> None:
    running = deployments(render(tuned_sd("surge"), canary_n=5))
    assert (running["stable"]["replicas"], running["canary"]["replicas"]) == (3, 1)
    assert running["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert canary_weight(tuned_sd("surge"), True) == 25


def test_the_default_mode_replaces_where_a_stable_pod_keeps_serving_and_surges_where_none_would() -> None:
    # auto: three replicas give one up to the canary, as replace does; one replica cannot, and surges.
    running = deployments(render(tuned_sd("auto"), canary_n=5))
    assert (running["stable"]["replicas"], running["canary"]["replicas"]) == (2, 1)
    assert running["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    alone = deployments(render(tuned_sd("auto", replicas=1), canary_n=5))
    assert (alone["stable"]["replicas"], alone["canary"]["replicas"]) == (1, 1)
    assert alone["stable"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "q", "namespace": "llm"},
                 "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                          "tuning": {"enabled": True}}}).spec.tuning.canary.mode == "auto"
    # Its Event says which it became.
    assert placement(tuned_sd("auto")) == "1 pod in place of 1 of the 3 stable (canary.mode auto)"
    assert placement(tuned_sd("auto", replicas=1)) == "1 pod beside the 1 stable (canary.mode auto)"
