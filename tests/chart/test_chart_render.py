"""The Helm chart: lint, Kubernetes schemas, values schema, CRDs, hardening, watch modes, HA, monitors."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from helm_tools import CHART, CRD_KINDS, HELM, NAMESPACE, ROOT, by_kind, helm_template, render

from specpilot.api import names
from specpilot.api.names import PORT_NAME
from specpilot.cli import build_parser
from specpilot.observability import alerts, dashboards
from specpilot.render.images import SPECPILOT_VERSION

# Value sets a user would plausibly install with; every check below runs against all of them.
VALUE_SETS = {
    "defaults": (),
    "namespaced": ("--set", "watch.namespaces={team-a,team-b}"),
    "monitoring": ("--set", "metrics.serviceMonitor.enabled=true", "--set", "vllmPodMonitor.enabled=true",
                   "--set", "prometheusRule.enabled=true"),
    "single": ("--set", "replicaCount=1", "--set", "leaderElection.enabled=false",
               "--set", "dashboards.enabled=false"),
}
# Oldest Kubernetes the chart supports (Chart.yaml kubeVersion: the CRD's CEL rules use `reason` and
# `fieldPath`, new in 1.28) and the newest schemas kubernetes-validate bundles.
OLDEST = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"].removeprefix(">=").removesuffix("-0")
KUBERNETES_VERSIONS = (OLDEST, kubernetes_validate.latest_version())


def _set_args(values: dict[str, str]) -> tuple[str, ...]:
    return tuple(arg for key, value in values.items() for arg in ("--set", f"{key}={value}"))


@pytest.mark.parametrize("args", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_strict_is_clean(args: tuple[str, ...]) -> None:
    proc = subprocess.run([str(HELM), "lint", "--strict", str(CHART), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("args", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rendered_objects_pass_strict_kubernetes_schemas(args: tuple[str, ...], version: str) -> None:
    skipped = set()
    objects = render("--include-crds", *args)
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in CRD_KINDS:
            skipped.add(key)  # no schema ships for the Prometheus Operator's kinds
            continue
        kubernetes_validate.validate(obj, version, strict=True)
    assert len(objects) > len(skipped)


@pytest.mark.parametrize("values, message", [
    ({"replicaCount": "two"}, "replicaCount"),
    ({"watch.namespaces": "{Not_A_Namespace}"}, "watch.namespaces"),
    ({"operator.verbose": "maybe"}, "verbose"),
    ({"metrics.serviceMonitor.interval": "often"}, "interval"),
    ({"unknownKey": "1"}, "unknownKey"),
    ({"serving.listenAddress": "localhost"}, "listenAddress"),
])
def test_values_schema_refuses_bad_values(values: dict[str, str], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        helm_template(*_set_args(values))


def test_two_replicas_without_leader_election_are_refused() -> None:
    with pytest.raises(AssertionError, match="leaderElection"):
        helm_template(*_set_args({"replicaCount": "2", "leaderElection.enabled": "false"}))


def test_chart_crds_are_the_generated_crds() -> None:
    top = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert top, "crds/ is empty: run `make crd`"
    assert chart == top, "charts/specpilot/crds/ differs from crds/: copy crds/*.yaml into the chart"


def _operator_container(objects: list[dict]) -> dict:
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_operator_pod_is_hardened() -> None:
    objects = render()
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = _operator_container(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
    # A writable /tmp, since the root filesystem is not.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_default_install_is_highly_available() -> None:
    objects = render()
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert any(a.startswith("--lease-name=") for a in _operator_container(objects)["args"])
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"] \
        == "kubernetes.io/hostname"
    single = render(*VALUE_SETS["single"])
    assert not by_kind(single, "PodDisruptionBudget")
    assert "--no-leader-election" in _operator_container(single)["args"]


def test_watch_mode_selects_cluster_role_or_roles() -> None:
    cluster = render()
    assert "--all-namespaces" in _operator_container(cluster)["args"]
    (cluster_role,) = by_kind(cluster, "ClusterRole")
    assert any("speculativedeployments" in r["resources"] for r in cluster_role["rules"])
    assert [r["metadata"]["name"] for r in by_kind(cluster, "Role")] == ["specpilot-leader-election"]

    namespaced = render(*VALUE_SETS["namespaced"])
    args = _operator_container(namespaced)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args
    (cluster_role,) = by_kind(namespaced, "ClusterRole")
    assert not any("speculativedeployments" in r["resources"] for r in cluster_role["rules"])
    roles = {r["metadata"]["namespace"]: r for r in by_kind(namespaced, "Role")}
    assert set(roles) == {"team-a", "team-b", NAMESPACE}
    bindings = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in by_kind(namespaced, "RoleBinding")}
    assert {(ns, roles[ns]["metadata"]["name"]) for ns in ("team-a", "team-b")} <= bindings


@pytest.mark.parametrize("args", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rbac_has_no_wildcards_and_secrets_only_to_read_labels(args: tuple[str, ...]) -> None:
    objects = render(*args)
    rules = [rule for kind in ("ClusterRole", "Role") for role in by_kind(objects, kind) for rule in role["rules"]]
    assert rules
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), rule
        if {"secrets", "secrets/*"} & set(rule["resources"]):  # an opted-in Secret's labels (threat-model.md)
            assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get"], rule
        assert "nonResourceURLs" not in rule and "resourceNames" not in rule, rule


def test_monitors_are_off_by_default_and_select_what_the_operator_renders() -> None:
    assert not by_kind(render(), "ServiceMonitor") and not by_kind(render(), "PodMonitor")
    assert not by_kind(render(), "PrometheusRule")
    objects = render(*VALUE_SETS["monitoring"])

    (monitor,) = by_kind(objects, "ServiceMonitor")
    service = next(s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics"))
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The operator's `namespace` label is the SpeculativeDeployment's, not the scrape target's.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True

    (pod_monitor,) = by_kind(objects, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"] == {names.MANAGED_BY: names.MANAGER}
    endpoint = pod_monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == PORT_NAME and endpoint["path"] == "/metrics"
    # Prometheus exposes pod labels as __meta_kubernetes_pod_label_<label, non-alphanumerics as _>.
    copied = {r["sourceLabels"][0]: r["targetLabel"] for r in endpoint["relabelings"]}
    meta = "__meta_kubernetes_pod_label_{}".format
    sanitize = lambda label: "".join(c if c.isalnum() else "_" for c in label)  # noqa: E731
    assert copied == {meta(sanitize(names.DEPLOYMENT_LABEL)): "deployment",
                      meta(sanitize(names.TRACK_LABEL)): "track",
                      meta(sanitize(names.N_LABEL)): "num_speculative_tokens"}


def test_prometheus_rule_carries_the_generated_rules_verbatim() -> None:
    (rule,) = by_kind(render(*VALUE_SETS["monitoring"]), "PrometheusRule")
    assert rule["spec"] == alerts.rule_groups()
    # Label templates reach Prometheus untouched by Helm.
    assert "{{ $labels.deployment }}" in json.dumps(rule["spec"])


def test_dashboards_ship_as_labelled_config_maps() -> None:
    maps = [m for m in by_kind(render(), "ConfigMap") if "-dashboard-" in m["metadata"]["name"]]
    shipped = {key: json.loads(text) for m in maps for key, text in m["data"].items()}
    assert shipped == {f"{name}.json": dash for name, dash in dashboards.rendered().items()}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert not [m for m in by_kind(render(*VALUE_SETS["single"]), "ConfigMap")]



def test_allowed_host_paths_become_allow_host_path_flags() -> None:
    container = _operator_container(render("--set", "operator.allowedHostPaths={/data/hf,/mnt/models}"))
    assert build_parser().parse_args(container["args"]).host_path_prefixes == ["/data/hf", "/mnt/models"]


@pytest.mark.parametrize("args", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_operator_command_line_is_one_specpilot_run_accepts(args: tuple[str, ...]) -> None:
    objects = render(*args)
    container = _operator_container(objects)
    assert container["command"] == ["specpilot"]
    parsed = build_parser().parse_args(container["args"])
    assert parsed.command == "run"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert parsed.metrics_port == values["operator"]["metricsPort"]
    assert parsed.liveness_stall_seconds == values["operator"]["livenessStallSeconds"]
    if "--set" in args and "watch.namespaces={team-a,team-b}" in args:
        assert parsed.namespaces == ["team-a", "team-b"] and not parsed.all_namespaces
    else:
        assert parsed.all_namespaces and parsed.namespaces == []
    assert parsed.host_path_prefixes == []  # hostPath model caches are off unless allowedHostPaths names some
    (deployment,) = by_kind(objects, "Deployment")
    if deployment["spec"]["replicas"] > 1:
        # The Lease is where the chart's leader-election Role lets the operator write it.
        (role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-leader-election")]
        assert not parsed.no_leader_election and parsed.lease_namespace == role["metadata"]["namespace"]


def test_packaged_chart_carries_crds_dashboards_and_rules(tmp_path: Path) -> None:
    proc = subprocess.run([str(HELM), "package", str(CHART), "--destination", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (package,) = tmp_path.glob("specpilot-*.tgz")
    with tarfile.open(package) as tar:
        names = set(tar.getnames())
    expected = {f"specpilot/{p.relative_to(CHART)}" for sub in ("crds", "dashboards", "files", "templates")
                for p in (CHART / sub).iterdir()}
    assert expected <= names


def test_default_image_is_the_operator_image_the_project_builds() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == importlib.metadata.version("specpilot") == SPECPILOT_VERSION
    objects = render()
    container = _operator_container(objects)
    assert container["image"] == f"specpilot/specpilot:{chart['appVersion']}"
    # The operator stage of images/Dockerfile runs as this user; the chart's non-root settings match it.
    dockerfile = (ROOT / "images" / "Dockerfile").read_text()
    operator_stage = dockerfile[dockerfile.index("AS operator"):]
    user = int(re.search(r"^USER (\d+)$", operator_stage, re.M).group(1))
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == user


def test_gateway_routing_grants_httproutes_only_when_asked() -> None:
    def httproute_verbs(*args: str) -> set[str]:
        roles = by_kind(render(*args), "ClusterRole") + by_kind(render(*args), "Role")
        return {verb for role in roles for rule in role.get("rules", [])
                if "httproutes" in rule["resources"] for verb in rule["verbs"]}

    assert httproute_verbs() == set()
    # The tuning loop reads the named HTTPRoute and patches its backend weights (canary/traffic.py, canary/routing.py).
    assert httproute_verbs("--set", "rbac.gatewayApi=true") == {"get", "patch"}
    namespaced = ("--set", "rbac.gatewayApi=true", "--set", "watch.namespaces={team-a}")
    assert httproute_verbs(*namespaced) == {"get", "patch"}


def test_serving_values_become_the_operators_serving_defaults() -> None:
    from specpilot.render.images import serving_defaults_from
    container = _operator_container(render(
        "--set", "serving.images.nvidia=mirror.example/vllm-openai:v0.33.0",
        "--set", "serving.imagePullSecrets={regcred,mirror}"))
    got = serving_defaults_from(build_parser().parse_args(container["args"]))
    assert got.images == {"amd": "vllm/vllm-openai-rocm:v0.33.0", "nvidia": "mirror.example/vllm-openai:v0.33.0"}
    assert got.image_pull_secrets == ("regcred", "mirror")
    assert got.runtime_image == container["image"]  # the runtime is copied from the operator's own image
    assert got.listen_address == "0.0.0.0"
    ipv6 = _operator_container(render("--set", "serving.listenAddress=::"))
    assert serving_defaults_from(build_parser().parse_args(ipv6["args"])).listen_address == "::"
