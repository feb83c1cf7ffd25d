"""The defaults the real API server fills into built-in workloads (a subset: the fields kubectl describe
and rollout tooling read). Custom resources get theirs from their CRD schema instead."""

from __future__ import annotations

from typing import Any


def _container(c: dict[str, Any]) -> None:
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    c.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


def pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        _container(c)


def apply_defaults(kind: str, obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if kind == "Pod":
        pod_spec(spec)
    elif kind in ("Deployment", "ReplicaSet"):
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        if kind == "Deployment":
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
            if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                strategy.setdefault("type", "RollingUpdate")
                strategy.setdefault("rollingUpdate", {"maxSurge": "25%", "maxUnavailable": "25%"})
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            pod_spec(template["spec"])
