"""deploy/specpilot.yaml, for users without Helm, is the chart rendered with default values."""

from __future__ import annotations

import kubernetes_validate
import yaml
from helm_tools import NAMESPACE, ROOT, render

DEPLOY = ROOT / "deploy" / "specpilot.yaml"


def _objects() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(DEPLOY.read_text()) if doc]


def test_plain_manifests_match_the_chart_with_default_values() -> None:
    namespace, *rest = _objects()
    assert namespace == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    assert rest == render("--include-crds"), "deploy/specpilot.yaml is stale: run `make chart-assets`"


def test_plain_manifests_hold_crd_rbac_and_operator_in_apply_order() -> None:
    kinds = [o["kind"] for o in _objects()]
    for kind in ("CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"):
        assert kind in kinds
    # kubectl applies in file order: the namespace and the CRD before anything that needs them.
    assert kinds.index("Namespace") == 0 and kinds.index("CustomResourceDefinition") == 1
    for obj in _objects():
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
