"""Serving pods from vLLM's published images: the runtime copied in by an init container from the
operator image, cluster-wide serving defaults overridable per SpeculativeDeployment, the custom-image path."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from specpilot.api.validate import InvalidSpeculativeDeployment, load
from specpilot.render import ServingDefaults, render_track
from specpilot.render.images import add_serving_arguments, serving_defaults_from
from specpilot_runtime import engine
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.install import install

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime" / "specpilot_runtime"
# What vLLM's images ship for the runtime (vLLM 0.33 requires pydantic>=2.12, prometheus_client>=0.18, numpy,
# huggingface_hub>=1.31; the runtime's hub fetch also runs without it).
VLLM_SHIPS = {"pydantic", "prometheus_client", "numpy", "huggingface_hub", "vllm"}


def _sd(**spec: Any) -> Any:
    return load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                 "metadata": {"name": "chat", "namespace": "team"},
                 "spec": {"model": "Qwen/Qwen3-8B", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                          **spec}})


def _pod(sd: Any, defaults: ServingDefaults | None = None) -> dict[str, Any]:
    objects = render_track(sd, defaults=defaults) if defaults else render_track(sd)
    return next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]


def test_default_pods_copy_the_runtime_from_the_operator_image_into_vllms_image() -> None:
    pod = _pod(_sd(accelerator={"vendor": "nvidia"}))
    (init,) = pod["initContainers"]
    (vllm,) = pod["containers"]
    assert vllm["image"] == "vllm/vllm-openai:v0.33.0"
    assert init["image"] == "specpilot/specpilot:0.1.0"
    assert init["command"] == ["specpilot-runtime", "install", "--to", "/opt/specpilot"]
    assert init["volumeMounts"] == [{"name": "specpilot-runtime", "mountPath": "/opt/specpilot"}]
    assert init["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                       "capabilities": {"drop": ["ALL"]}}
    assert {"name": "specpilot-runtime", "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]
    assert {"name": "specpilot-runtime", "mountPath": "/opt/specpilot", "readOnly": True} in vllm["volumeMounts"]
    assert {"name": "PYTHONPATH", "value": "/opt/specpilot"} in vllm["env"]
    assert vllm["command"][:3] == ["python3", "-m", "specpilot_runtime.cli"]
    assert "imagePullSecrets" not in pod


def test_an_image_with_the_runtime_built_in_skips_the_copy() -> None:
    pod = _pod(_sd(image="registry.example/specpilot-runtime:rocm", runtimeFrom="servingImage"))
    (vllm,) = pod["containers"]
    assert "initContainers" not in pod
    assert vllm["command"][:2] == ["specpilot-runtime", "serve"]
    assert vllm["image"] == "registry.example/specpilot-runtime:rocm"
    assert all(e["name"] != "PYTHONPATH" for e in vllm["env"])
    assert all(v["name"] != "specpilot-runtime" for v in pod["volumes"])


def test_cluster_defaults_apply_and_the_spec_overrides_them() -> None:
    defaults = ServingDefaults({"amd": "mirror.example/rocm/vllm:tag", "nvidia": "mirror.example/vllm:tag"},
                               ("regcred", "mirror"), "mirror.example/specpilot:0.1.0")
    pod = _pod(_sd(), defaults)
    assert pod["containers"][0]["image"] == "mirror.example/rocm/vllm:tag"
    assert pod["initContainers"][0]["image"] == "mirror.example/specpilot:0.1.0"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    own = _pod(_sd(image="rocm/vllm:custom", imagePullSecrets=[{"name": "team-cred"}]), defaults)
    assert own["containers"][0]["image"] == "rocm/vllm:custom"
    assert own["imagePullSecrets"] == [{"name": "team-cred"}]
    assert "imagePullSecrets" not in _pod(_sd(imagePullSecrets=[]), defaults)  # [] clears the defaults


@pytest.mark.parametrize("secrets", [[{"name": "Bad_Name"}], [{"name": "a b"}], [{"name": ""}]])
def test_a_bad_pull_secret_name_is_refused_naming_the_field(secrets: list[dict[str, str]]) -> None:
    with pytest.raises(InvalidSpeculativeDeployment, match=r"spec\.imagePullSecrets"):
        _sd(imagePullSecrets=secrets)


def test_a_model_cache_cannot_hide_the_copied_runtime() -> None:
    with pytest.raises(InvalidSpeculativeDeployment, match="/opt/specpilot"):
        _sd(engine={"modelCache": {"claimName": "hf", "mountPath": "/opt/specpilot"}})


def _parse(argv: list[str], env: dict[str, str]) -> ServingDefaults:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser, env)
    return serving_defaults_from(parser.parse_args(argv))


def test_serving_defaults_come_from_flags_then_environment() -> None:
    env = {"SPECPILOT_SERVING_IMAGE_AMD": "rocm/vllm:rocm7_vllm_0.33", "SPECPILOT_IMAGE_PULL_SECRETS": "a, b",
           "SPECPILOT_RUNTIME_IMAGE": "me/specpilot:1"}
    got = _parse([], env)
    assert got.images == {"amd": "rocm/vllm:rocm7_vllm_0.33", "nvidia": "vllm/vllm-openai:v0.33.0"}
    assert got.image_pull_secrets == ("a", "b") and got.runtime_image == "me/specpilot:1"
    flags = _parse(["--serving-image", "nvidia=x/y:1", "--image-pull-secret", "c", "--runtime-image", "z:2"], env)
    assert flags.images["nvidia"] == "x/y:1" and flags.images["amd"] == "rocm/vllm:rocm7_vllm_0.33"
    assert flags.image_pull_secrets == ("c",) and flags.runtime_image == "z:2"
    assert _parse([], {}) == ServingDefaults()
    assert _parse([], {"SPECPILOT_SERVING_LISTEN_ADDRESS": "::"}).listen_address == "::"
    assert _parse(["--serving-listen-address", "0:0::0"], {}).listen_address == "::"  # as vLLM's --host takes it
    assert ServingDefaults().listen_address == "0.0.0.0"


def test_an_ipv6_cluster_gets_vllm_listening_on_every_address() -> None:
    """On an IPv6 (or IPv6-first dual-stack) cluster the kubelet probes the pod, and the operator scrapes
    it, at its IPv6 address: vLLM on 0.0.0.0 answers neither. The default keeps engine.json as it was, so
    an upgrade rolls no pod."""
    sd = _sd()
    objects = render_track(sd, defaults=ServingDefaults(listen_address="::"))
    config = EngineConfig.model_validate_json(objects[0]["data"]["engine.json"])
    argv = engine.argv(config)
    assert argv[argv.index("--host") + 1] == "::"
    default = render_track(sd)
    assert '"host": "0.0.0.0"' in default[0]["data"]["engine.json"]
    hashes = [objs[1]["spec"]["template"]["metadata"]["annotations"]["specpilot.io/engine-config-hash"]
              for objs in (objects, default)]
    assert hashes[0] != hashes[1]


@pytest.mark.parametrize("argv, env", [
    (["--serving-image", "intel=x:1"], {}),
    (["--serving-image", "amd=has space"], {}),
    (["--image-pull-secret", "UPPER"], {}),
    ([], {"SPECPILOT_IMAGE_PULL_SECRETS": "ok,$(rm -rf /)"}),
    ([], {"SPECPILOT_RUNTIME_IMAGE": "a\tb"}),
    ([], {"SPECPILOT_RUNTIME_IMAGE": "Me/specpilot:1"}),
    (["--serving-listen-address", "localhost"], {}),
    ([], {"SPECPILOT_SERVING_LISTEN_ADDRESS": "0.0.0.0 --trust-remote-code"}),
])
def test_bad_serving_defaults_are_refused(argv: list[str], env: dict[str, str]) -> None:
    with pytest.raises(SystemExit):
        _parse(argv, env)


def test_install_writes_the_package_and_a_dist_info_declaring_the_plugin(tmp_path: Path) -> None:
    written = install(tmp_path)
    assert (tmp_path / "specpilot_runtime" / "plugin.py") in written
    assert not list(tmp_path.rglob("__pycache__"))
    dists = [d for d in metadata.distributions(path=[str(tmp_path)])]
    assert [d.metadata["Name"] for d in dists] == ["specpilot-runtime"]
    (plugin,) = [ep for ep in dists[0].entry_points if ep.group == "vllm.stat_logger_plugins"]
    assert plugin.value == "specpilot_runtime.plugin:DraftedPerPositionLogger"
    assert install(tmp_path) == written  # a restarted pod's init container installs again


def test_the_copy_runs_from_pythonpath_in_an_isolated_interpreter(tmp_path: Path) -> None:
    install(tmp_path)
    config = tmp_path / "engine.json"
    config.write_text('{"model": "m", "speculative": {"method": "ngram", "num_speculative_tokens": 3}}')
    # -S: no site-packages, so the copy is the only specpilot_runtime there is (pydantic comes from this
    # venv through PYTHONPATH, as vLLM's image would provide it).
    site = next(p for p in sys.path if p.endswith("site-packages"))
    done = subprocess.run([sys.executable, "-S", "-c", "import specpilot_runtime, sys; print(specpilot_runtime.__file__);"
                           "from specpilot_runtime.cli import main; sys.exit(main(['serve', '--config', sys.argv[1], "
                           "'--dry-run']))", str(config)],
                          env={"PYTHONPATH": f"{tmp_path}:{site}"}, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(tmp_path / "specpilot_runtime"))
    assert '"serve"' in done.stdout


def test_the_runtime_imports_only_what_vllm_images_ship() -> None:
    stdlib = set(sys.stdlib_module_names)
    imported = set()
    for path in RUNTIME.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert imported - stdlib - {"__future__"} <= VLLM_SHIPS, imported - stdlib - VLLM_SHIPS


def test_a_users_pythonpath_keeps_the_copied_runtime() -> None:
    cfg = EngineConfig.model_validate({"model": "m", "speculative": {"method": "ngram", "num_speculative_tokens": 3},
                                       "env": {"PYTHONPATH": "/models/code"}})
    assert engine.env(cfg, {"PYTHONPATH": "/opt/specpilot"})["PYTHONPATH"] == "/models/code:/opt/specpilot"
