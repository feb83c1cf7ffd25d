"""ConfigMaps whose one file the pods read while they run (live.json, drain.json): mounted without the pod
template hashing them, so writing one changes what the running pods read and rolls no pod."""

from __future__ import annotations

from typing import Any

from ..api.models import SpeculativeDeployment
from ..api.names import owned_labels


def file_config_map(sd: SpeculativeDeployment, name: str, file: str, text: str,
                    owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """ConfigMap `name` holding `text` as `file`, labelled as every child and owned by `owner` when given."""
    meta: dict[str, Any] = {"name": name}
    if sd.metadata.get("namespace"):
        meta["namespace"] = sd.metadata["namespace"]
    meta["labels"] = owned_labels(sd.metadata["name"])
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {file: text}}
