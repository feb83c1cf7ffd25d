"""The API server's PodSecurity admission, for the levels a namespace enforces through the label
`pod-security.kubernetes.io/enforce` (baseline, restricted; privileged or none admits everything).

Checks the controls a serving pod can trip, with the API server's wording, so a refused pod reads as it
would on a real cluster: `pods "x" is forbidden: violates PodSecurity "baseline:latest": ...`.
"""

from __future__ import annotations

from typing import Any

from specpilot_harness.sandbox.errors import ApiError

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# Capabilities baseline lets a container add (the container runtime's defaults).
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
RESTRICTED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret")


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _ctx(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


def baseline_violations(spec: dict[str, Any]) -> list[str]:
    found: list[str] = []
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        found.append(f"host namespaces ({', '.join(hosts)})")
    privileged = [c["name"] for c in _containers(spec) if _ctx(c).get("privileged")]
    if privileged:
        found.append(f"privileged (container {_names(privileged)} must not set securityContext.privileged=true)")
    for c in _containers(spec):
        added = [a for a in (_ctx(c).get("capabilities") or {}).get("add") or [] if a not in BASELINE_CAPABILITIES]
        if added:
            found.append(f'non-default capabilities (container "{c["name"]}" must not include '
                         f'{_names(added)} in securityContext.capabilities.add)')
    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        found.append(f"hostPath volumes (volume {_names(host_paths)})")
    unconfined = ["pod"] if (_ctx(spec).get("seccompProfile") or {}).get("type") == "Unconfined" else []
    unconfined += [f'container "{c["name"]}"' for c in _containers(spec)
                   if (_ctx(c).get("seccompProfile") or {}).get("type") == "Unconfined"]
    if unconfined:
        found.append(f'seccompProfile ({" and ".join(unconfined)} must not set securityContext.seccompProfile.type '
                     'to "Unconfined")')
    return found


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    found: list[str] = []
    containers = _containers(spec)
    pod = _ctx(spec)
    escalating = [c["name"] for c in containers if _ctx(c).get("allowPrivilegeEscalation") is not False]
    if escalating:
        found.append(f"allowPrivilegeEscalation != false (container {_names(escalating)} must set "
                     "securityContext.allowPrivilegeEscalation=false)")
    undropped = [c["name"] for c in containers
                 if "ALL" not in ((_ctx(c).get("capabilities") or {}).get("drop") or [])]
    if undropped:
        found.append(f"unrestricted capabilities (container {_names(undropped)} must set "
                     'securityContext.capabilities.drop=["ALL"])')
    volumes = [(v["name"], next((k for k in v if k != "name"), "")) for v in spec.get("volumes") or []]
    bad = [(name, kind) for name, kind in volumes if kind not in RESTRICTED_VOLUMES]
    if bad:
        found.append("restricted volume types (" + ", ".join(f'volume "{n}" uses restricted volume type "{k}"'
                                                              for n, k in bad) + ")")
    root = [c["name"] for c in containers if _ctx(c).get("runAsNonRoot", pod.get("runAsNonRoot")) is not True]
    if root:
        found.append(f"runAsNonRoot != true (pod or container {_names(root)} must set "
                     "securityContext.runAsNonRoot=true)")
    if pod.get("runAsUser") == 0 or any(_ctx(c).get("runAsUser") == 0 for c in containers):
        found.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    unset = [c["name"] for c in containers
             if (_ctx(c).get("seccompProfile") or {}).get("type", pod_seccomp) not in ("RuntimeDefault", "Localhost")]
    if unset:
        found.append(f"seccompProfile (pod or container {_names(unset)} must set securityContext.seccompProfile.type "
                     'to "RuntimeDefault" or "Localhost")')
    return found


def _names(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def violations(level: str, spec: dict[str, Any]) -> list[str]:
    """What a pod spec breaks at `level`; restricted includes baseline."""
    if level == "baseline":
        return baseline_violations(spec)
    if level == "restricted":
        return baseline_violations(spec) + restricted_violations(spec)
    return []


def admit_pod(namespace: dict[str, Any] | None, pod: dict[str, Any]) -> None:
    """Raise the API server's 403 when the pod's namespace enforces a level the pod breaks."""
    level = ((namespace or {}).get("metadata", {}).get("labels") or {}).get(ENFORCE_LABEL, "privileged")
    found = violations(level, pod.get("spec") or {})
    if found:
        name = pod["metadata"].get("name", "")
        raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": '
                                         + ", ".join(found),
                       {"name": name, "kind": "pods"})
