"""engine: the `vllm serve` argv and the environment, per accelerator vendor."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specpilot_runtime import engine
from specpilot_runtime.engine_config import EngineConfig


def cfg(**kw: Any) -> EngineConfig:
    base: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "amd", "count": 1},
                            "speculative": {"method": "eagle3", "model": "org/eagle3-head",
                                            "num_speculative_tokens": 3}}
    return EngineConfig.model_validate({**base, **kw})


def spec_json(argv: list[str]) -> dict[str, Any]:
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_argv_is_a_list_vllm_serve_model_then_flags() -> None:
    argv = engine.argv(cfg(served_model_name="qwen", args=["--max-model-len", "8192"]), "/usr/bin/vllm")
    assert argv[:3] == ["/usr/bin/vllm", "serve", "Qwen/Qwen3-8B"]
    assert argv[argv.index("--port") + 1] == "8000" and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--served-model-name") + 1] == "qwen"
    assert spec_json(argv) == {"method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 3}
    assert argv[-2:] == ["--max-model-len", "8192"]  # user args last, untouched
    assert "--tensor-parallel-size" not in argv


def test_speculative_config_is_one_argv_element_even_with_spaces_in_paths() -> None:
    argv = engine.argv(cfg(speculative={"method": "draft_model", "model": "/models/my draft",
                                        "num_speculative_tokens": 4}))
    assert spec_json(argv)["model"] == "/models/my draft"


def test_batch_size_schedule_renders_vllms_key() -> None:
    argv = engine.argv(cfg(speculative={"method": "dflash", "model": "z-lab/dflash", "num_speculative_tokens": 7,
                                        "num_speculative_tokens_per_batch_size": [[1, 4, 7], [5, 64, 3],
                                                                                  [65, 512, 0]]}))
    assert spec_json(argv)["num_speculative_tokens_per_batch_size"] == [[1, 4, 7], [5, 64, 3], [65, 512, 0]]


def test_speculation_off_renders_no_speculative_config_and_no_plugin() -> None:
    c = cfg(speculative={"method": "off"})
    assert "--speculative-config" not in engine.argv(c)
    assert engine.env(c, {})[engine.PLUGIN_ENABLE_ENV] == "0"


@pytest.mark.parametrize("vendor,count,tp", [("amd", 8, "8"), ("nvidia", 2, "2"), ("amd", 1, None),
                                             ("cpu", 4, None)])
def test_tensor_parallel_follows_the_accelerator_count(vendor: str, count: int, tp: str | None) -> None:
    argv = engine.argv(cfg(accelerator={"vendor": vendor, "count": count}))
    assert (argv[argv.index("--tensor-parallel-size") + 1] if "--tensor-parallel-size" in argv else None) == tp


def test_rocm_visible_devices_are_kept_consistent() -> None:
    c = cfg(env={"VLLM_ROCM_USE_AITER": "1"})
    env = engine.env(c, {"HIP_VISIBLE_DEVICES": "0,1"})
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["VLLM_ROCM_USE_AITER"] == "1"
    assert engine.env(c, {"CUDA_VISIBLE_DEVICES": "3"})["HIP_VISIBLE_DEVICES"] == "3"
    # Neither set: the device plugin exposes only the pod's GPUs, nothing to copy.
    assert "HIP_VISIBLE_DEVICES" not in engine.env(c, {}) and "CUDA_VISIBLE_DEVICES" not in engine.env(c, {})


def test_rocm_visible_devices_that_disagree_are_refused() -> None:
    problems = engine.env_problems(cfg(env={"CUDA_VISIBLE_DEVICES": "1"}), {"HIP_VISIBLE_DEVICES": "0"})
    assert len(problems) == 1 and "HIP_VISIBLE_DEVICES='0'" in str(problems[0])
    assert engine.env_problems(cfg(), {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}) == []


def test_nvidia_and_cpu_do_not_touch_visible_devices() -> None:
    for vendor in ("nvidia", "cpu"):
        env = engine.env(cfg(accelerator={"vendor": vendor}), {"HIP_VISIBLE_DEVICES": "0"})
        assert "CUDA_VISIBLE_DEVICES" not in env
    assert engine.env_problems(cfg(accelerator={"vendor": "nvidia"}),
                               {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}) == []


def test_aiter_is_only_set_when_configured() -> None:
    assert "VLLM_ROCM_USE_AITER" not in engine.env(cfg(), {})


def test_plugin_switch_and_vllm_plugins_allow_list() -> None:
    assert engine.env(cfg(), {})[engine.PLUGIN_ENABLE_ENV] == "1"
    assert engine.VLLM_PLUGINS_ENV not in engine.env(cfg(), {})  # unset: vLLM loads every plugin
    env = engine.env(cfg(), {"VLLM_PLUGINS": "other_plugin"})
    assert env["VLLM_PLUGINS"] == f"other_plugin,{engine.PLUGIN_ENTRY_POINT}"
    listed = engine.env(cfg(env={"VLLM_PLUGINS": engine.PLUGIN_ENTRY_POINT}), {})
    assert listed["VLLM_PLUGINS"] == engine.PLUGIN_ENTRY_POINT
    off = engine.env(cfg(drafted_per_position_metric=False), {"VLLM_PLUGINS": "other_plugin"})
    assert off[engine.PLUGIN_ENABLE_ENV] == "0" and "VLLM_PLUGINS" not in off


def test_the_plugin_is_not_loaded_when_nothing_is_drafted() -> None:
    """vLLM turns its stats on whenever a stat-logger plugin is loaded: with method off (what a track at N=0
    runs, render/engine.py) the plugin is left out of VLLM_PLUGINS, and every other installed plugin kept."""
    off, others = cfg(speculative={"method": "off"}), ["lora_filesystem_resolver", "their_logger"]
    env = engine.env(off, {}, [*others, engine.PLUGIN_ENTRY_POINT])
    assert env[engine.VLLM_PLUGINS_ENV] == "lora_filesystem_resolver,their_logger"
    # Nothing else installed: an empty list, which vLLM reads as "load none".
    assert engine.env(off, {}, [engine.PLUGIN_ENTRY_POINT])[engine.VLLM_PLUGINS_ENV] == ""
    listed = engine.env(off, {engine.VLLM_PLUGINS_ENV: f"their_logger,{engine.PLUGIN_ENTRY_POINT}"}, others)
    assert listed[engine.VLLM_PLUGINS_ENV] == "their_logger"
    assert engine.VLLM_PLUGINS_ENV not in engine.env(off, {engine.VLLM_PLUGINS_ENV: "their_logger"}, others)
    # The metric turned off in engine.json: not loaded either, though N > 0.
    assert engine.env(cfg(drafted_per_position_metric=False), {}, others)[engine.VLLM_PLUGINS_ENV] == \
        "lora_filesystem_resolver,their_logger"
    # Drafting: vLLM's default (every installed plugin) already loads it.
    assert engine.VLLM_PLUGINS_ENV not in engine.env(cfg(), {}, [*others, engine.PLUGIN_ENTRY_POINT])


def test_serve_lists_the_installed_vllm_plugins_it_leaves_ours_out_of() -> None:
    from specpilot_runtime.serve import installed_vllm_plugins

    assert engine.PLUGIN_ENTRY_POINT in installed_vllm_plugins()


def test_ngram_pods_get_one_numba_thread_unless_the_pod_or_user_says_otherwise() -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    assert engine.env(cfg(speculative=ngram), {})[engine.NUMBA_THREADS] == "1"
    assert engine.env(cfg(speculative=ngram, env={engine.NUMBA_THREADS: "4"}), {})[engine.NUMBA_THREADS] == "4"
    assert engine.NUMBA_THREADS not in engine.env(cfg(speculative=ngram), {engine.NUMBA_THREADS: "2"})
    assert engine.NUMBA_THREADS not in engine.env(cfg(), {})  # eagle3 runs no numba


def test_entry_point_name_matches_pyproject() -> None:
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="vllm.stat_logger_plugins")}
    assert names.get(engine.PLUGIN_ENTRY_POINT) == "specpilot_runtime.plugin:DraftedPerPositionLogger"


def test_env_holds_only_what_specpilot_sets() -> None:
    env = engine.env(cfg(env={"HF_HOME": "/cache"}), {"SECRET_TOKEN": "x", "PATH": "/bin"})
    assert set(env) == {"HF_HOME", engine.PLUGIN_ENABLE_ENV}
