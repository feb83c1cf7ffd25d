"""The serving pod template, per accelerator vendor.

AMD pods follow AMD's vLLM guidance (docs/references.md §2): the amd.com/gpu resource (the device plugin adds
/dev/kfd and /dev/dri; accelerator.resourceName overrides it), a memory-backed /dev/shm, the video group,
ROCm's kernel switch and, with the recommended security profile, seccomp Unconfined with SYS_PTRACE
(security.py). NVIDIA pods take nvidia.com/gpu. Both run the specpilot runtime, which
reads engine.json and supervises `vllm serve`; vLLM's API and /metrics share the `http` port.

With vLLM's published images (spec.runtimeFrom operatorImage, the default) an init container from the
operator image runs `specpilot-runtime install` onto an emptyDir that the vLLM container has on
PYTHONPATH, and the container runs the copy with the image's python3 (runtime/specpilot_runtime/install.py).
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

from specpilot_runtime.drain import DRAIN_DIR
from specpilot_runtime.engine import VLLM_CACHE_ENV
from specpilot_runtime.engine_config import DEFAULT_PORT, TEARDOWN_S
from specpilot_runtime.live import LIVE_DIR

from ..api.models import SpeculativeDeployment, gpu_resource
from ..api.switchback import measured_live
from .images import DEFAULT_SERVING, ServingDefaults, image_for
from ..api.names import (ENGINE_CONFIG_DIR, ENGINE_CONFIG_PATH, ENGINE_HASH_ANNOTATION, PORT_NAME, Track,
                         config_map_name, drain_config_map_name, live_config_map_name, pod_labels)
from .drain import pod_drain_s
from .resources import as_guaranteed, container_resources, guaranteed
from .security import security_contexts

CONTAINER = "vllm"
LIVE_VOLUME = "live"
DRAIN_VOLUME = "drain"
SHM_SIZE = "8Gi"
# VLLM_CACHE_ROOT, under the model cache's mountPath when there is one.
VLLM_CACHE_DIR = "vllm"
COMMAND = ["specpilot-runtime", "serve", "--config", ENGINE_CONFIG_PATH]
# The runtime copied by the init container has no console script: the image's python3 runs the module.
RUNTIME_DIR = "/opt/specpilot"
RUNTIME_VOLUME = "specpilot-runtime"
INSTALLER = "install-runtime"
COPIED_COMMAND = ["python3", "-m", "specpilot_runtime.cli", "serve", "--config", ENGINE_CONFIG_PATH]
INSTALL_COMMAND = ["specpilot-runtime", "install", "--to", RUNTIME_DIR]
# The copy is ~0.3 MB; the installer is one short Python process.
INSTALLER_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
# Meets Pod Security restricted whatever the profile; the pod-level context (user, seccomp) still applies.
INSTALLER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "capabilities": {"drop": ["ALL"]}}

# vLLM's port opens only once the weights are loaded: allow 30 minutes (180 x 10 s) for large models.
STARTUP_PERIOD_S = 10
STARTUP_FAILURES = 180
# Endpoints (kube-proxy, ingress controllers, gateways) take a few seconds to drop a terminating pod; the
# preStop sleep keeps vLLM serving until they have, so no new request reaches a pod that stopped accepting.
PRESTOP_S = 5
# Slack between the runtime's own deadline and the kubelet's SIGKILL, so the runtime's kill is the one logged.
KUBELET_SLACK_S = 5

VENDOR_ENV: dict[str, dict[str, str]] = {
    "amd": {"VLLM_ROCM_USE_AITER": "1"},  # AMD's tuned kernels; off by default in vLLM
    "nvidia": {},
}


def termination_grace_s(drain_s: int) -> int:
    """The pod's terminationGracePeriodSeconds: preStop, then vLLM's drain (--shutdown-timeout) and its
    teardown (the runtime's grace period after SIGTERM), then slack before the kubelet's SIGKILL."""
    return PRESTOP_S + drain_s + TEARDOWN_S + KUBELET_SLACK_S


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": PORT_NAME}, "periodSeconds": period,
            "timeoutSeconds": 5, "failureThreshold": failures}


def _resources(sd: SpeculativeDeployment) -> dict[str, Any]:
    """The user's resources, the GPU limit from accelerator (extended resources need a limit) and the
    profile's CPU and memory requests (resources.py)."""
    acc = sd.spec.accelerator
    return container_resources(sd.spec.engine.resources, acc.vendor, acc.count, gpu_resource(acc))


def _copied_runtime(sd: SpeculativeDeployment) -> bool:
    return sd.spec.runtime_from == "operatorImage"


def _env(sd: SpeculativeDeployment) -> list[dict[str, Any]]:
    """Pod-level env: vendor defaults and secrets. The user's env travels in engine.json."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in VENDOR_ENV[sd.spec.accelerator.vendor].items()]
    if _copied_runtime(sd):
        env.append({"name": "PYTHONPATH", "value": RUNTIME_DIR})
    cache = sd.spec.engine.model_cache
    if cache:
        env.append({"name": "HF_HOME", "value": cache.mount_path})
        # vLLM's own cache (model-class inspection, startup plans, torch.compile artifacts) on the same
        # volume: a canary or a restarted pod finds it warm and starts sooner (a fresh container's is empty).
        env.append({"name": VLLM_CACHE_ENV, "value": posixpath.join(cache.mount_path, VLLM_CACHE_DIR)})
    secret = sd.spec.engine.hf_token_secret_ref
    if secret:
        env.append({"name": "HF_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}})
    return env


def _volumes(sd: SpeculativeDeployment, track: Track) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    name = sd.metadata["name"]
    volumes: list[dict[str, Any]] = [
        {"name": "engine-config", "configMap": {"name": config_map_name(name, track)}},
        # PyTorch's tensor-parallel workers share memory through /dev/shm; the container default is 64Mi.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "engine-config", "mountPath": ENGINE_CONFIG_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if track == "stable" and measured_live(sd):
        # live.json (switchback): optional, so a pod starts (serving its engine.json's table) before the
        # ConfigMap exists; the kubelet refreshes it in place. Nested in the engine-config mount, which
        # kubelets allow for ConfigMap volumes (they create the mount point), and LIVE_DIR is the runtime's.
        volumes.append({"name": LIVE_VOLUME, "configMap": {"name": live_config_map_name(name), "optional": True}})
        mounts.append({"name": LIVE_VOLUME, "mountPath": LIVE_DIR, "readOnly": True})
    if sd.spec.engine.drain_seconds is None:
        # drain.json (automatic drain) on every track: optional, so a pod starts before the ConfigMap exists
        # (the runtime then drains for engine.json's maximum); refreshed in place, hashed by no template.
        volumes.append({"name": DRAIN_VOLUME, "configMap": {"name": drain_config_map_name(name), "optional": True}})
        mounts.append({"name": DRAIN_VOLUME, "mountPath": DRAIN_DIR, "readOnly": True})
    if _copied_runtime(sd):
        volumes.append({"name": RUNTIME_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}})
        mounts.append({"name": RUNTIME_VOLUME, "mountPath": RUNTIME_DIR, "readOnly": True})
    cache = sd.spec.engine.model_cache
    if cache:
        source: dict[str, Any] = ({"persistentVolumeClaim": {"claimName": cache.claim_name}} if cache.claim_name
                                  else {"hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}})
        volumes.append({"name": "model-cache", **source})
        mounts.append({"name": "model-cache", "mountPath": cache.mount_path})
    return volumes, mounts


def _installer(defaults: ServingDefaults, pod_guaranteed: bool) -> dict[str, Any]:
    """The init container that copies the runtime from the operator image onto the shared emptyDir; made
    Guaranteed too when the vLLM container is, since a pod is Guaranteed only if every container is."""
    resources = as_guaranteed(INSTALLER_RESOURCES) if pod_guaranteed else copy.deepcopy(INSTALLER_RESOURCES)
    return {"name": INSTALLER, "image": defaults.runtime_image, "imagePullPolicy": "IfNotPresent",
            "command": list(INSTALL_COMMAND), "resources": resources,
            "securityContext": copy.deepcopy(INSTALLER_SECURITY),
            "volumeMounts": [{"name": RUNTIME_VOLUME, "mountPath": RUNTIME_DIR}]}


def _pull_secrets(sd: SpeculativeDeployment, defaults: ServingDefaults) -> list[dict[str, str]]:
    names = ([s.name for s in sd.spec.image_pull_secrets] if sd.spec.image_pull_secrets is not None
             else list(defaults.image_pull_secrets))
    return [{"name": name} for name in dict.fromkeys(names)]


def pod_template(sd: SpeculativeDeployment, track: Track, n: int, engine_hash: str,
                 defaults: ServingDefaults = DEFAULT_SERVING) -> dict[str, Any]:
    """The Deployment's pod template for one track running N = `n`; `defaults` are the cluster-wide
    serving settings the spec's own image and imagePullSecrets override."""
    vendor = sd.spec.accelerator.vendor
    volumes, mounts = _volumes(sd, track)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image_for(vendor, sd.spec.image, defaults),
        "imagePullPolicy": "IfNotPresent",
        "command": list(COPIED_COMMAND if _copied_runtime(sd) else COMMAND),
        "ports": [{"name": PORT_NAME, "containerPort": DEFAULT_PORT, "protocol": "TCP"}],
        "env": _env(sd),
        "resources": _resources(sd),
        "volumeMounts": mounts,
        "startupProbe": _probe(STARTUP_PERIOD_S, STARTUP_FAILURES),
        "readinessProbe": _probe(5, 3),
        # An argv, no shell: `sleep` is in every vLLM image (Ubuntu based).
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_S)]}}},
    }
    pod: dict[str, Any] = {
        # A Service named like a vLLM setting (say `vllm`) would inject VLLM_PORT=tcp://... and break vLLM.
        "enableServiceLinks": False,
        # The runtime never talks to the Kubernetes API.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": termination_grace_s(pod_drain_s(sd)),
        "containers": [container],
        "volumes": volumes,
    }
    if _copied_runtime(sd):
        pod["initContainers"] = [_installer(defaults, guaranteed(container["resources"]))]
    pull_secrets = _pull_secrets(sd, defaults)
    if pull_secrets:
        pod["imagePullSecrets"] = pull_secrets
    pod_security, container_security = security_contexts(vendor, sd.spec.accelerator.security_profile)
    if container_security:
        container["securityContext"] = container_security
    if pod_security:
        pod["securityContext"] = pod_security
    if sd.spec.engine.node_selector:
        pod["nodeSelector"] = dict(sd.spec.engine.node_selector)
    if sd.spec.engine.tolerations:
        pod["tolerations"] = [dict(t) for t in sd.spec.engine.tolerations]
    annotations = {
        ENGINE_HASH_ANNOTATION: engine_hash,
        # For Prometheus setups that discover pods by annotation; the chart's PodMonitor uses the port name.
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(DEFAULT_PORT),
        "prometheus.io/path": "/metrics",
    }
    return {"metadata": {"labels": pod_labels(sd.metadata["name"], track, n), "annotations": annotations},
            "spec": pod}
