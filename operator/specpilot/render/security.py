"""Pod and container securityContext per accelerator vendor and spec.accelerator.securityProfile.

recommended follows AMD's vLLM guidance (docs/references.md §2: SYS_PTRACE and seccomp Unconfined), which
Pod Security "baseline" refuses; baseline leaves both out, so namespaces enforcing baseline admit the pods;
restricted also meets Pod Security "restricted" (non-root, no privilege escalation, no capabilities,
seccomp RuntimeDefault). The video group (44) is allowed at every level and AMD's device nodes need it.
"""

from __future__ import annotations

from typing import Any

from ..api.models import NON_ROOT_UID

VIDEO_GID = 44


def security_contexts(vendor: str, profile: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod securityContext, container securityContext); empty dicts mean none."""
    pod: dict[str, Any] = {"supplementalGroups": [VIDEO_GID]} if vendor == "amd" else {}
    container: dict[str, Any] = {}
    if profile == "recommended" and vendor == "amd":
        pod["seccompProfile"] = {"type": "Unconfined"}
        container["capabilities"] = {"add": ["SYS_PTRACE"]}
    elif profile == "restricted":
        # fsGroup: a model cache volume is writable by the non-root user.
        pod.update({"runAsNonRoot": True, "runAsUser": NON_ROOT_UID, "fsGroup": NON_ROOT_UID,
                    "seccompProfile": {"type": "RuntimeDefault"}})
        container.update({"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})
    return pod, container
