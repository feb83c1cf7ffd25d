"""ConfigMap and Secret volumes as a kubelet keeps them: the objects pods mount, watched, and the files each
pod's containers see, computed from them. Pure: the node agent feeds the watch events in.

A kubelet refreshes these volumes of running pods when their objects change (atomically, by swapping the
volume's `..data` symlink) on its periodic pod sync; a subPath mount is a copy taken at start and never
refreshed. The node agent does the same on its own, shorter period (agent.VOLUME_SYNC_S).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

# (kind, namespace, name) of a mounted object: kind "configmaps" or "secrets", the API's plural.
SourceKey = tuple[str, str, str]


def optional_volumes(pod: dict[str, Any]) -> set[str]:
    """The ConfigMap and Secret volumes marked optional: mounted empty while their object is missing."""
    return {vol["name"] for vol in (pod.get("spec") or {}).get("volumes") or []
            if ((vol.get("configMap") or vol.get("secret") or {}).get("optional")) is True}


def volume_sources(pod: dict[str, Any]) -> dict[str, SourceKey]:
    """The pod's ConfigMap and Secret volumes: volume name -> the object it mounts."""
    ns = pod["metadata"]["namespace"]
    out: dict[str, SourceKey] = {}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if "configMap" in vol:
            out[vol["name"]] = ("configmaps", ns, vol["configMap"].get("name", ""))
        elif "secret" in vol:
            out[vol["name"]] = ("secrets", ns, vol["secret"].get("secretName", ""))
    return out


def source_data(kind: str, obj: dict[str, Any] | None) -> dict[str, str]:
    """The keys a ConfigMap or Secret gives its volume (a Secret's decoded); none for a missing object."""
    data = (obj or {}).get("data") or {}
    if kind == "secrets":
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
    return dict(data)


def mounted_files(pod: dict[str, Any], sources: dict[str, dict[str, str]]) -> dict[str, str]:
    """Absolute path -> content of every file the pod's containers see, given each volume's keys."""
    spec = pod.get("spec") or {}
    files: dict[str, str] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for mount in container.get("volumeMounts") or []:
            data = sources.get(mount.get("name", ""), {})
            if mount.get("subPath"):
                if mount["subPath"] in data:
                    files[mount["mountPath"]] = data[mount["subPath"]]
            else:
                files.update({f"{mount['mountPath'].rstrip('/')}/{k}": v for k, v in data.items()})
    return files


def refreshed(pod: dict[str, Any], old: dict[str, str], sources: dict[str, dict[str, str]]) -> dict[str, str]:
    """What a running pod's files become after a re-sync: subPath mounts keep what they started with."""
    new = mounted_files(pod, sources)
    sub_paths = {m["mountPath"] for c in [*((pod.get("spec") or {}).get("initContainers") or []),
                                          *((pod.get("spec") or {}).get("containers") or [])]
                 for m in c.get("volumeMounts") or [] if m.get("subPath")}
    for path in sub_paths:
        if path in old:
            new[path] = old[path]
        else:
            new.pop(path, None)
    return new


@dataclass
class VolumeSources:
    """The ConfigMaps and Secrets the watches delivered; `version` counts the changes, so a re-sync with
    nothing new to deliver can skip the pods."""

    objects: dict[SourceKey, dict[str, str]] = field(default_factory=dict)
    version: int = 0

    def observe(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (kind, meta.get("namespace", ""), meta.get("name", ""))
        if event == "DELETED":
            if self.objects.pop(key, None) is not None:
                self.version += 1
            return
        data = source_data(kind, obj)
        if self.objects.get(key) != data:
            self.objects[key] = data
            self.version += 1

    def files_for(self, pod: dict[str, Any], old: dict[str, str]) -> dict[str, str] | None:
        """The running pod's files as they are now; None while an object it mounts is unknown (not seen yet,
        or deleted: a kubelet then keeps what the volume holds)."""
        sources: dict[str, dict[str, str]] = {}
        for name, key in volume_sources(pod).items():
            data = self.objects.get(key)
            if data is None:
                return None
            sources[name] = data
        return refreshed(pod, old, sources)
