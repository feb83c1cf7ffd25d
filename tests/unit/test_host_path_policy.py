"""hostPath model caches: off unless the operator names the host directories it allows,
never mounted over specpilot's own mounts; a PersistentVolumeClaim is the default."""

from __future__ import annotations

from typing import Any

import pytest

from specpilot.api.models import RESERVED_MOUNT_PATHS
from specpilot.api.validate import Policy, load, validate_object
from specpilot.cli import build_parser, main
from specpilot.render import render_track
from specpilot.render.pod import DRAIN_VOLUME

HOST_PATH = "spec.engine.modelCache.hostPath"
MOUNT_PATH = "spec.engine.modelCache.mountPath"


def sd(model_cache: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "q"},
            "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3},
                     "engine": {"modelCache": model_cache},
                     # hostPath needs a profile Pod Security baseline would refuse (the CRD's rule)
                     "accelerator": {"vendor": "nvidia", "securityProfile": "recommended"}}}


def messages(obj: dict[str, Any], policy: Policy = Policy(), path: str = HOST_PATH) -> list[str]:
    return [p.message for p in validate_object(obj, policy) if p.path == path]


def test_host_path_is_off_by_default_and_says_what_to_use() -> None:
    (message,) = messages(sd({"hostPath": "/data/hf"}))
    assert "--allow-host-path" in message and "claimName" in message


def test_host_path_is_allowed_at_or_below_an_allowed_directory_only() -> None:
    policy = Policy(host_path_prefixes=("/data/hf", "/mnt/models/"))
    for ok in ("/data/hf", "/data/hf/qwen", "/mnt/models/x"):
        assert validate_object(sd({"hostPath": ok}), policy) == [], ok
    for bad in ("/data/hf2", "/data", "/etc", "/root"):
        (message,) = messages(sd({"hostPath": bad}), policy)
        assert "outside the host directories this operator allows (/data/hf, /mnt/models/)" in message


@pytest.mark.parametrize("path", ["/", "relative/dir", "/data/hf/", "/data//hf", "/data/hf/../../etc", "/data/./hf"])
def test_host_paths_that_are_not_plain_absolute_directories_are_refused(path: str) -> None:
    assert messages(sd({"hostPath": path}), Policy(host_path_prefixes=("/data",)))


@pytest.mark.parametrize("mount", ["/etc/specpilot", "/etc/specpilot/x", "/etc", "/dev/shm", "/dev", "/",
                                   "/models/../etc/specpilot"])
def test_the_cache_never_mounts_over_specpilots_own_mounts(mount: str) -> None:
    assert messages(sd({"claimName": "hf", "mountPath": mount}), path=MOUNT_PATH), mount


def test_a_claim_is_accepted_without_any_policy() -> None:
    assert validate_object(sd({"claimName": "hf-cache"})) == []
    assert validate_object(sd({"claimName": "hf-cache", "mountPath": "/models"})) == []


def test_reserved_mount_paths_are_the_ones_the_pod_template_uses() -> None:
    deployment = next(o for o in render_track(load(sd({"claimName": "hf"}))) if o["kind"] == "Deployment")
    # The drain.json mount is nested in /etc/specpilot, which is reserved with everything under it.
    mounts = {m["mountPath"] for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
              if m["name"] not in ("model-cache", DRAIN_VOLUME)}
    assert mounts == set(RESERVED_MOUNT_PATHS)


def test_run_validate_and_render_take_the_same_allow_flag(tmp_path, capsys) -> None:
    for command in ("run", "validate", "render"):
        extra = [] if command == "run" else ["-f", "x.yaml"]
        args = build_parser().parse_args([command, *extra, "--allow-host-path", "/data/hf"])
        assert args.host_path_prefixes == ["/data/hf"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--allow-host-path", "data/hf"])
    path = tmp_path / "sd.yaml"
    path.write_text(
        "apiVersion: specpilot.io/v1alpha1\nkind: SpeculativeDeployment\nmetadata: {name: q}\n"
        "spec: {model: m, speculative: {method: ngram, numSpeculativeTokens: 3},\n"
        "       accelerator: {vendor: nvidia, securityProfile: recommended},\n"
        "       engine: {modelCache: {hostPath: /data/hf/q}}}\n")
    assert main(["validate", "-f", str(path)]) == 1
    assert f"{path}: q: {HOST_PATH}: hostPath model caches are off" in capsys.readouterr().out
    assert main(["validate", "-f", str(path), "--allow-host-path", "/data/hf"]) == 0
