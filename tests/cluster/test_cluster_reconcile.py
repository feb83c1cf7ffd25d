"""What a user sees when the operator reconciles SpeculativeDeployments (one operator, one sandbox)."""

from __future__ import annotations

import json
import re
from typing import Any

from specpilot import render
from specpilot.api.validate import load
from specpilot.api.names import N_LABEL

from cluster_kit import Cluster, example, wait_for


def _sd(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    return cluster.get("speculativedeployment", "-n", ns, name)


def _ready(cluster: Cluster, ns: str, name: str) -> dict[str, Any] | None:
    sd = _sd(cluster, ns, name)
    conds = {c["type"]: c for c in ((sd or {}).get("status") or {}).get("conditions") or []}
    ok = sd and conds.get("Ready", {}).get("status") == "True" and \
        sd["status"].get("observedGeneration") == sd["metadata"]["generation"]
    return sd if ok else None


def _contains(live: Any, want: Any) -> bool:
    """Every field rendered is in the live object with the same value (the server may add defaults)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(_contains(live.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) == len(want) and all(_contains(a, b) for a, b in zip(live, want))
    return live == want


def _printed(table: str) -> dict[str, str]:
    """The first row of `kubectl get` output by column header (headers may contain spaces)."""
    header, row = table.splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"(?<=\s{2})\S|^\S", header)]
    bounds = list(zip(starts, starts[1:] + [None]))
    return {header[a:b].strip(): row[a:b].strip() for a, b in bounds}


def _children(cluster: Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    return cluster.items("deploy,cm,svc", "-n", ns, "-l", f"specpilot.io/deployment={name}")


def test_apply_creates_the_rendered_children_and_reports_ready(cluster: Cluster, ns: str) -> None:
    obj = example("eagle3")
    name = obj["metadata"]["name"]
    assert cluster.apply(obj, ns).returncode == 0
    sd = wait_for("Ready", lambda: _ready(cluster, ns, name))

    desired = render.render(load(sd), owner=render.owner_reference(sd))
    for child in desired:
        kind = child["kind"].lower()
        live = cluster.get(kind, "-n", ns, child["metadata"]["name"])
        assert live is not None, f"{kind} {child['metadata']['name']} missing"
        assert _contains(live, {k: v for k, v in child.items() if k != "metadata"})
        assert _contains(live["metadata"], {k: v for k, v in child["metadata"].items() if k != "namespace"})
    assert len(_children(cluster, ns, name)) == len(desired)

    status = sd["status"]
    assert status["phase"] == "Running"
    assert status["method"] == obj["spec"]["speculative"]["method"]
    assert status["numSpeculativeTokens"] == obj["spec"]["speculative"]["numSpeculativeTokens"]
    assert status["readyReplicas"] == status["replicas"] == 1
    assert {c["type"] for c in status["conditions"]} == {"Ready", "Progressing", "SpecValid", "Tuning", "Degraded"}
    pods = cluster.items("pods", "-n", ns, "-l", f"specpilot.io/deployment={name}")
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    assert pods[0]["status"]["podIP"].startswith("10.244.")  # the node agent's addresses
    assert cluster.ready_addresses(ns, name) == [pods[0]["status"]["podIP"]]

    # Printer columns show real values.
    printed = cluster.kubectl("get", "sd", "-n", ns, name).stdout
    row = _printed(printed)
    assert (row.get("METHOD"), row.get("N"), row.get("PHASE")) == \
        ("eagle3", str(status["numSpeculativeTokens"]), "Running"), printed
    described = cluster.kubectl("describe", "sd", "-n", ns, name).stdout
    assert "Created" in described and f"created Deployment {name}" in described


def test_changing_n_rolls_the_stable_deployment(cluster: Cluster, ns: str) -> None:
    obj = example("mtp")
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    old_pods = {p["metadata"]["name"] for p in cluster.items("pods", "-n", ns)}
    new_n = obj["spec"]["speculative"]["numSpeculativeTokens"] + 1
    cluster.kubectl("patch", "sd", "-n", ns, name, "--type", "merge",
                    "-p", f'{{"spec":{{"speculative":{{"numSpeculativeTokens":{new_n}}}}}}}')
    sd = wait_for("Ready at the new N", lambda: (s := _ready(cluster, ns, name))
                  and s["status"]["numSpeculativeTokens"] == new_n and s)
    assert sd["status"]["phase"] == "Running"
    assert cluster.kubectl("rollout", "status", f"deployment/{name}", "-n", ns, "--timeout=60s").returncode == 0

    deploy = cluster.get("deployment", "-n", ns, name)
    assert deploy["spec"]["template"]["metadata"]["labels"][N_LABEL] == str(new_n)
    engine = json.loads(cluster.get("configmap", "-n", ns, f"{name}-engine")["data"]["engine.json"])
    assert engine["speculative"]["num_speculative_tokens"] == new_n
    pods = wait_for("old pods gone", lambda: (ps := cluster.items("pods", "-n", ns))
                    and not old_pods & {p["metadata"]["name"] for p in ps} and ps)
    assert [p["metadata"]["labels"][N_LABEL] for p in pods] == [str(new_n)]
    replicasets = cluster.items("rs", "-n", ns)
    assert sorted(rs["spec"]["replicas"] for rs in replicasets) == [0, 1]


def test_deleted_or_edited_children_are_restored(cluster: Cluster, ns: str) -> None:
    obj = example("ngram")
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    before = {(c["kind"], c["metadata"]["name"]): c["metadata"]["uid"] for c in _children(cluster, ns, name)}

    cluster.kubectl("delete", "deployment,configmap,service", "-n", ns, "-l", f"specpilot.io/deployment={name}")
    after = wait_for("children re-created", lambda: len(c := _children(cluster, ns, name)) == len(before) and c)
    assert {(c["kind"], c["metadata"]["name"]) for c in after} == set(before)
    assert not {c["metadata"]["uid"] for c in after} & set(before.values())

    cluster.kubectl("scale", "deployment", name, "-n", ns, "--replicas=4")
    cluster.kubectl("label", "deployment", name, "-n", ns, "--overwrite", f"{N_LABEL}=99")
    wait_for("hand edits reverted", lambda: (d := cluster.get("deployment", "-n", ns, name))
             and d["spec"]["replicas"] == 1 and d["metadata"]["labels"][N_LABEL] != "99")
    events = cluster.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}").stdout
    assert "Restored" in events and "Reverted" in events


def test_spec_refused_by_the_api_creates_nothing(cluster: Cluster, ns: str) -> None:
    obj = example("eagle3")
    obj["metadata"]["name"] = "no-draft"
    del obj["spec"]["speculative"]["draftModel"]       # CEL: eagle3 needs a draft
    done = cluster.apply(obj, ns)
    assert done.returncode != 0 and "draftModel" in done.stderr
    obj["spec"]["speculative"]["draftModel"] = "x/y"
    obj["spec"]["replicas"] = -1                       # schema: minimum 0
    done = cluster.apply(obj, ns)
    assert done.returncode != 0 and "spec.replicas" in done.stderr
    assert cluster.items("sd,deploy,cm,svc", "-n", ns, "-l", "app.kubernetes.io/managed-by=specpilot") == []
    assert cluster.items("sd", "-n", ns) == []


def test_semantically_invalid_spec_sets_specvalid_false_and_touches_nothing(cluster: Cluster, ns: str) -> None:
    obj = example("eagle3")
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    deploy = cluster.get("deployment", "-n", ns, name)

    # Passes the CRD schema and CEL; only the operator's semantic checks see the duplicate variable.
    bad = example("eagle3")
    bad["spec"]["engine"] = {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}
    bad["spec"]["speculative"]["numSpeculativeTokens"] += 1
    assert cluster.apply(bad, ns).returncode == 0

    def refused() -> dict[str, Any] | None:
        sd = _sd(cluster, ns, name)
        cond = next((c for c in sd["status"]["conditions"] if c["type"] == "SpecValid"), {})
        return sd if cond.get("status") == "False" else None

    sd = refused_sd = wait_for("SpecValid=False", refused)
    cond = next(c for c in sd["status"]["conditions"] if c["type"] == "SpecValid")
    assert cond["reason"] == "InvalidSpec" and "spec.engine.env" in cond["message"]
    assert refused_sd["status"]["phase"] == "Invalid"
    assert refused_sd["status"]["numSpeculativeTokens"] == obj["spec"]["speculative"]["numSpeculativeTokens"]
    still = cluster.get("deployment", "-n", ns, name)
    assert still["metadata"]["generation"] == deploy["metadata"]["generation"]
    assert still["spec"] == deploy["spec"]
    events = cluster.kubectl("get", "events", "-n", ns, "--field-selector", "reason=InvalidSpec").stdout
    assert "spec.engine.env" in events

    cluster.apply(obj, ns)
    wait_for("valid again", lambda: (s := _ready(cluster, ns, name)) and s["status"]["phase"] == "Running")

    # A new object that is invalid from the start gets no children at all.
    bad["metadata"]["name"] = "born-invalid"
    assert cluster.apply(bad, ns).returncode == 0
    wait_for("SpecValid=False on the new object", lambda: (s := _sd(cluster, ns, "born-invalid")).get("status")
             and s["status"]["phase"] == "Invalid")
    assert _children(cluster, ns, "born-invalid") == []


def test_paused_objects_are_left_alone(cluster: Cluster, ns: str) -> None:
    obj = example("dspark")
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    cluster.kubectl("annotate", "sd", "-n", ns, name, "specpilot.io/paused=true")
    wait_for("Paused", lambda: _sd(cluster, ns, name)["status"]["phase"] == "Paused")
    paused_runs = _paused_reconciles(cluster, ns, name)
    n = obj["spec"]["speculative"]["numSpeculativeTokens"]
    cluster.kubectl("patch", "sd", "-n", ns, name, "--type", "merge",
                    "-p", f'{{"spec":{{"speculative":{{"numSpeculativeTokens":{n - 1}}}}}}}')
    cluster.kubectl("delete", "configmap", "-n", ns, f"{name}-engine")
    # Both changes were seen (each ran a reconcile that ended in "paused") and neither was acted on.
    wait_for("reconciles of the changes", lambda: _paused_reconciles(cluster, ns, name) >= paused_runs + 2)
    assert cluster.get("deployment", "-n", ns, name)["metadata"]["labels"][N_LABEL] == str(n)
    assert cluster.get("configmap", "-n", ns, f"{name}-engine") is None
    cluster.kubectl("annotate", "sd", "-n", ns, name, "specpilot.io/paused-")
    wait_for("resumed at the new N", lambda: (s := _ready(cluster, ns, name))
             and s["status"]["numSpeculativeTokens"] == n - 1)
    assert cluster.get("configmap", "-n", ns, f"{name}-engine") is not None


def _paused_reconciles(cluster: Cluster, ns: str, name: str) -> float:
    needle = f'specpilot_operator_reconciles_total{{deployment="{name}",namespace="{ns}",result="paused"}} '
    line = next((ln for ln in cluster.operators[0].metrics().splitlines() if ln.startswith(needle)), None)
    return float(line.split()[-1]) if line else 0.0


def test_delete_removes_every_child(cluster: Cluster, ns: str) -> None:
    obj = example("dflash")
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    assert cluster.kubectl("delete", "sd", "-n", ns, name, "--timeout=60s").returncode == 0
    # Every namespace keeps what Kubernetes puts there (kube-root-ca.crt); the children are the labelled rest.
    wait_for("children gone", lambda: cluster.items("deploy,rs,pods,cm,svc,endpointslices", "-n", ns, "-l",
                                                    f"specpilot.io/deployment={name}") == [])
    wait_for("pods gone", lambda: cluster.items("pods", "-n", ns) == [])


def test_operator_metrics(cluster: Cluster, ns: str) -> None:
    obj = example("off")
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    text = cluster.operators[0].metrics()
    assert f'specpilot_operator_reconciles_total{{deployment="{name}",namespace="{ns}",result="applied"}}' in text
    assert "specpilot_operator_reconcile_duration_seconds_count" in text
    assert f'specpilot_operator_num_speculative_tokens{{deployment="{name}",namespace="{ns}",track="stable"}} 0.0' in text
    assert "specpilot_operator_leader 1.0" in text
    managed = {kind: float(line.rsplit(" ", 1)[1]) for kind in ("SpeculativeDeployment", "Deployment")
               for line in text.splitlines() if line.startswith(f'specpilot_operator_managed_objects{{kind="{kind}"}}')}
    assert managed["SpeculativeDeployment"] >= 1 and managed["Deployment"] >= 1


def test_tuning_state_in_status_drives_the_tracks(cluster: Cluster, ns: str) -> None:
    """The seam the tuning loop uses: status.tuning.stableN / canaryN decide what runs."""
    obj = example("dflash")  # tuning enabled
    name = obj["metadata"]["name"]
    cluster.apply(obj, ns)
    wait_for("Ready", lambda: _ready(cluster, ns, name))
    assert "specpilot.io/finalizer" in _sd(cluster, ns, name)["metadata"]["finalizers"]

    def set_tuning(tuning: dict[str, Any] | None) -> None:
        # As the tuning loop does: a status write only, which the operator notices by itself.
        cluster.kubectl("patch", "sd", "-n", ns, name, "--subresource=status", "--type", "merge",
                        "-p", json.dumps({"status": {"tuning": tuning}}))

    set_tuning({"stableN": 7, "canaryN": 11})
    sd = wait_for("canary running", lambda: (s := _ready(cluster, ns, name))
                  and s["status"].get("canaryNumSpeculativeTokens") == 11 and s)
    assert sd["status"]["phase"] == "Tuning"
    canary = cluster.get("deployment", "-n", ns, f"{name}-canary")
    assert canary["spec"]["template"]["metadata"]["labels"]["specpilot.io/track"] == "canary"

    set_tuning({"stableN": 11, "canaryN": None})
    wait_for("canary promoted and removed", lambda: (s := _ready(cluster, ns, name))
             and s["status"]["numSpeculativeTokens"] == 11 and s["status"].get("canaryNumSpeculativeTokens") is None
             and cluster.get("deployment", "-n", ns, f"{name}-canary") is None)
