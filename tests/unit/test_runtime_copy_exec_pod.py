"""The rendered pod's init container runs for real (the sandbox's exec pod runtime): it copies the runtime
from the operator image onto the emptyDir, and the serving container runs that copy from PYTHONPATH."""

from __future__ import annotations

import asyncio
import json
import sys
import sysconfig
from pathlib import Path

import pytest
from specpilot_harness.sandbox.exec_pods import ExecRuntime, ImageMap, bind_mode_available
from specpilot_harness.sandbox.pod_runtime import PodContext

from specpilot.api.validate import load
from specpilot.render import render_track

MODES = ["rewrite"] + (["namespace"] if bind_mode_available() == "namespace" else [])
# A stand-in for vLLM's image: its python3 runs without site-packages processing (-S), so specpilot's own
# install here is invisible and `specpilot_runtime` can only come from the copy on PYTHONPATH; the image's
# other packages (pydantic, ...) are appended as plain directories, as vLLM's image provides them.
PYTHON3 = f"""#!{sys.executable} -S
import runpy, sys
sys.path.append({sysconfig.get_paths()["purelib"]!r})
import specpilot_runtime
print("runtime from", specpilot_runtime.__file__, flush=True)
assert sys.argv[1] == "-m", sys.argv
module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


@pytest.fixture
def images(tmp_path: Path) -> ImageMap:
    vllm_image = tmp_path / "vllm-image-bin"
    vllm_image.mkdir()
    (vllm_image / "python3").write_text(PYTHON3)
    (vllm_image / "python3").chmod(0o755)
    return ImageMap((("specpilot/specpilot:*", Path(sys.executable).parent), ("vllm/vllm-openai*", vllm_image)))


@pytest.mark.parametrize("mode", MODES)
async def test_the_init_container_copies_the_runtime_that_the_vllm_container_runs(
        tmp_path: Path, images: ImageMap, mode: str) -> None:
    sd = load({"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
               "metadata": {"name": "chat", "namespace": "team"},
               "spec": {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "nvidia"},
                        "speculative": {"method": "ngram", "numSpeculativeTokens": 3}}})
    config_map, deployment = render_track(sd)[:2]
    template = deployment["spec"]["template"]
    (vllm,) = template["spec"]["containers"]
    vllm["command"] = [*vllm["command"], "--dry-run"]  # everything up to starting vLLM, which is not here
    pod = {"metadata": {"name": "chat-abc", "namespace": "team", "uid": "u1"}, "spec": template["spec"]}
    ctx = PodContext(pod, "127.0.0.1", {f"/etc/specpilot/{k}": v for k, v in config_map["data"].items()})
    runtime = ExecRuntime(tmp_path / "pods", images, mode)  # type: ignore[arg-type]
    await runtime.start(ctx)
    try:
        (_, proc), = runtime._pods["u1"].procs
        assert await asyncio.wait_for(proc.wait(), 60) == 0, (tmp_path / "pods" / "team_chat-abc" / "vllm.log").read_text()
    finally:
        await runtime.stop(ctx)
    root = tmp_path / "pods" / "team_chat-abc"
    assert "files in" in (root / "install-runtime.log").read_text()
    copy = root / "volumes" / "specpilot-runtime"
    assert (copy / "specpilot_runtime" / "plugin.py").is_file()
    assert "[vllm.stat_logger_plugins]" in next(copy.glob("*.dist-info")).joinpath("entry_points.txt").read_text()
    first, rest = (root / "vllm.log").read_text().split("\n", 1)
    seen_at = "/opt/specpilot" if mode == "namespace" else str(copy)
    assert first == f"runtime from {seen_at}/specpilot_runtime/__init__.py"
    plan = json.loads(rest[rest.index("{"):])
    assert plan["argv"][1:3] == ["serve", "Qwen/Qwen3-8B"]
