"""A ReadWriteOnce(-Pod) model cache claim with pods that may land on several nodes is named with the
reason and the fix; one pod, a shared claim, or pods pinned to one node are fine."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import SpeculativeDeployment
from specpilot.controller import model_cache as mc


def _sd(replicas: int = 1, tuning: bool = False, node_selector: dict[str, str] | None = None) -> SpeculativeDeployment:
    return SpeculativeDeployment.model_validate({
        "apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"},
        "spec": {"model": "m", "replicas": replicas, "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                 "tuning": {"enabled": tuning},
                 "engine": {"modelCache": {"claimName": "models"}, "nodeSelector": node_selector or {}}}})


def _pvc(*modes: str) -> dict[str, Any]:
    return {"metadata": {"name": "models"}, "spec": {"accessModes": list(modes)}}


def test_only_several_pods_can_conflict() -> None:
    assert mc.pods_sharing(_sd()) is None
    assert mc.pods_sharing(_sd(replicas=2)) == "replicas is 2"
    assert "canary" in (mc.pods_sharing(_sd(tuning=True)) or "")


@pytest.mark.parametrize(("sd", "pvc", "status", "reason", "words"), [
    (_sd(replicas=2), _pvc("ReadWriteOnce"), "False", "ReadWriteOnce",
     ("replicas is 2", "ReadWriteMany", "replicas: 1 with tuning off", "kubernetes.io/hostname")),
    (_sd(tuning=True), _pvc("ReadWriteOnce"), "False", "ReadWriteOnce", ("tuning is on", "ContainerCreating")),
    (_sd(tuning=True), _pvc("ReadWriteOncePod"), "False", "ReadWriteOncePod", ("only one pod", "ReadWriteMany")),
    (_sd(replicas=2, node_selector={"kubernetes.io/hostname": "gpu-1"}), _pvc("ReadWriteOncePod"), "False",
     "ReadWriteOncePod", ("only one pod",)),
    (_sd(replicas=2, node_selector={"kubernetes.io/hostname": "gpu-1"}), _pvc("ReadWriteOnce"), "True", "OneNode",
     ("gpu-1",)),
    (_sd(replicas=3), _pvc("ReadWriteMany"), "True", "Shareable", ("ReadWriteMany",)),
    (_sd(tuning=True), _pvc("ReadOnlyMany", "ReadWriteOnce"), "True", "Shareable", ()),
    (_sd(tuning=True), None, "Unknown", "ClaimNotFound", ("models not found yet",)),
])
def test_the_claims_access_modes_against_the_pods(sd: SpeculativeDeployment, pvc: dict[str, Any] | None,
                                                 status: str, reason: str, words: tuple[str, ...]) -> None:
    finding = mc.assess(sd, "models", pvc)
    assert (finding.status, finding.reason) == (status, reason), finding
    for word in words:
        assert word in finding.message, (word, finding.message)
