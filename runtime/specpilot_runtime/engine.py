"""EngineConfig -> the `vllm serve` command (an argv list, never a shell string) and its environment.

Pure: the caller passes the inherited environment in and applies the result. The environment returned
holds only what specpilot sets, so it can be logged without dumping the pod's whole environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .engine_config import EngineConfig, data_parallel_size
from .live import LIVE_FILE_ENV, LIVE_STATE_ENV
from .speculative import (CUSTOM_DRAFTERS, LOOKUP_KEYS, OFF, SCHEDULE_METHODS, Problem,
                          schedule_method_message)

# The stat-logger plugin (plugin.py): its entry-point name in pyproject.toml and its on/off switch.
PLUGIN_ENTRY_POINT = "specpilot_drafted_per_position"
PLUGIN_ENABLE_ENV = "SPECPILOT_DRAFTED_PER_POSITION"
# The general plugin that lets the engine core follow live.json (live_engine.py): its entry-point name.
LIVE_ENTRY_POINT = "specpilot_live"
# vLLM loads only the plugins this comma-separated list names, when it is set.
VLLM_PLUGINS_ENV = "VLLM_PLUGINS"
PYTHONPATH = "PYTHONPATH"

# ROCm reads HIP_VISIBLE_DEVICES, parts of vLLM and PyTorch read CUDA_VISIBLE_DEVICES: on AMD both must
# name the same devices or workers bind to different GPUs than the scheduler counted.
HIP_VISIBLE = "HIP_VISIBLE_DEVICES"
CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
# vLLM's n-gram proposer runs numba with at most one thread (ngram_proposer.py: min(1, cpu_count // 2)), but
# numba's pool starts one thread per core of the node, whatever the pod's CPU limit. Beside another busy
# engine those threads made an n-gram pod 2.4x slower per token (docs/references.md §4); one costs nothing.
NUMBA_THREADS = "NUMBA_NUM_THREADS"
# vLLM's cache directory: the operator puts it on the model cache volume (render/pod.py), and `serve`
# drops it when the pod cannot write there.
VLLM_CACHE_ENV = "VLLM_CACHE_ROOT"
NUMBA_METHODS = frozenset({"ngram"})


@dataclass(frozen=True)
class Launch:
    """What to execute: argv, and the variables specpilot sets on top of the inherited environment."""

    argv: list[str]
    env: dict[str, str]

    def to_json(self) -> str:
        return json.dumps({"argv": self.argv, "env": self.env}, indent=2)


def _merged(cfg: EngineConfig, inherited: Mapping[str, str]) -> dict[str, str]:
    return {**inherited, **cfg.env}


def visible_devices_problem(vendor: str, env: Mapping[str, str]) -> str | None:
    """Why this environment would bind vLLM's workers to other GPUs than its scheduler counted, if it
    would. The operator's validate runs it on spec.engine.env, the runtime on the pod's whole environment."""
    hip, cuda = env.get(HIP_VISIBLE), env.get(CUDA_VISIBLE)
    if vendor == "amd" and hip is not None and cuda is not None and hip != cuda:
        return (f"{HIP_VISIBLE}={hip!r} and {CUDA_VISIBLE}={cuda!r} name different GPUs; "
                "set one of them (specpilot copies it to the other) or make them equal")
    return None


def env_problems(cfg: EngineConfig, inherited: Mapping[str, str]) -> list[Problem]:
    """Environment settings that contradict each other for this vendor."""
    problem = visible_devices_problem(cfg.accelerator.vendor, _merged(cfg, inherited))
    return [Problem(f"env.{CUDA_VISIBLE}", problem)] if problem else []


def argv(cfg: EngineConfig, vllm_bin: str = "vllm") -> list[str]:
    out = [vllm_bin, "serve", cfg.model, "--host", cfg.host, "--port", str(cfg.port)]
    if cfg.served_model_name:
        out += ["--served-model-name", cfg.served_model_name]
    if cfg.accelerator.vendor != "cpu" and cfg.accelerator.count > 1:
        out += ["--tensor-parallel-size", str(cfg.accelerator.count)]
    spec = cfg.speculative.to_vllm()
    if spec is not None and cfg.ngram_drafter in CUSTOM_DRAFTERS:
        spec = {"method": "custom_class", "model": CUSTOM_DRAFTERS[cfg.ngram_drafter],
                **{k: v for k, v in spec.items() if k != "method" and k not in LOOKUP_KEYS}}
    if spec is not None:
        # Compact JSON: the value is one argv element; vLLM parses it with json.loads.
        out += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if cfg.shutdown_timeout_s is not None:
        out += ["--shutdown-timeout", str(cfg.shutdown_timeout_s)]
    return out + list(cfg.args)


def live_problems(cfg: EngineConfig) -> list[Problem]:
    """Why the engine could not follow `live_file`: K is set live by rewriting the batch size -> K list vLLM
    builds at start from the table, which only some methods' runners read and data parallelism turns off."""
    if cfg.live_file is None:
        return []
    method = cfg.speculative.method
    if method not in SCHEDULE_METHODS:
        why = "nothing is drafted" if method == OFF else schedule_method_message(method)
        return [Problem("live_file", f"draft length cannot be set live: {why}")]
    if data_parallel_size(cfg.args) > 1:
        return [Problem("live_file", "draft length cannot be set live under data parallelism > 1: vLLM serves "
                                     "no batch-size table there")]
    table = cfg.speculative.num_speculative_tokens_per_batch_size
    if not table or min(row[0] for row in table) != 1:
        return [Problem("speculative.num_speculative_tokens_per_batch_size",
                        "live_file needs a starting table whose first range starts at batch size 1 (e.g. "
                        f"[[1, 256, {cfg.speculative.num_speculative_tokens}]]): without one vLLM keeps no batch "
                        "size -> K list to rewrite")]
    return []


def env(cfg: EngineConfig, inherited: Mapping[str, str], installed_plugins: Sequence[str] = (),
        live_state: str | None = None) -> dict[str, str]:
    """The variables specpilot sets for vLLM: the config's own env plus what the vendor and plugin need;
    `installed_plugins`: the entry-point names in vLLM's plugin groups (serve.installed_vllm_plugins);
    `live_state`: with `live_file`, the pod-local file where the engine core leaves its live counters for
    the API server's /metrics."""
    merged = _merged(cfg, inherited)
    out = dict(cfg.env)
    # The pod's PYTHONPATH holds the runtime the init container copied, with its vLLM plugin: a user's
    # PYTHONPATH adds to it rather than hiding the plugin from vLLM.
    pod_path = inherited.get(PYTHONPATH)
    if PYTHONPATH in out and pod_path:
        out[PYTHONPATH] = os.pathsep.join([out[PYTHONPATH], pod_path])
    if cfg.accelerator.vendor == "amd":
        hip, cuda = merged.get(HIP_VISIBLE), merged.get(CUDA_VISIBLE)
        if hip is not None and cuda is None:
            out[CUDA_VISIBLE] = hip
        elif cuda is not None and hip is None:
            out[HIP_VISIBLE] = cuda
    if cfg.speculative.method in NUMBA_METHODS and NUMBA_THREADS not in merged:
        out[NUMBA_THREADS] = "1"
    if cfg.ngram_drafter in CUSTOM_DRAFTERS:
        out.update({LOOKUP_KEYS[k]: str(v) for k, v in cfg.speculative.extra.items() if k in LOOKUP_KEYS})
    plugin_on = cfg.drafted_per_position_metric and cfg.speculative.method != OFF
    out[PLUGIN_ENABLE_ENV] = "1" if plugin_on else "0"
    live_on = cfg.live_file is not None
    if live_on:
        if live_state is None:
            raise ValueError("live_file is set: pass where the engine leaves its live state (live_state)")
        out[LIVE_FILE_ENV], out[LIVE_STATE_ENV] = str(cfg.live_file), live_state
    # The stat-logger plugin also relays the live state to /metrics, and keeps vLLM's per-step spec-decoding
    # stats on, which the live counters read; the general plugin left alone when off (it does nothing then).
    wanted = {PLUGIN_ENTRY_POINT: plugin_on or live_on, **({LIVE_ENTRY_POINT: True} if live_on else {})}
    out.update(_plugin_allow_list(wanted, merged.get(VLLM_PLUGINS_ENV), installed_plugins))
    return out


def _plugin_allow_list(wanted: Mapping[str, bool], allowed: str | None, installed: Sequence[str]) -> dict[str, str]:
    """VLLM_PLUGINS so that vLLM loads each of `wanted`'s plugins exactly when it is True: vLLM turns its
    stats on whenever a stat-logger plugin is loaded, so with nothing drafted (method off) ours is not loaded
    at all. Unset, vLLM loads every installed plugin: leaving one out takes listing the others (`installed`,
    the entry-point names in vLLM's plugin groups)."""
    if allowed is None:
        if all(wanted.values()):
            return {}
        return {VLLM_PLUGINS_ENV: ",".join(n for n in dict.fromkeys(installed) if wanted.get(n, True))}
    names = [n for n in allowed.split(",") if n]
    kept = [n for n in names if wanted.get(n, True)] + [n for n, on in wanted.items() if on and n not in names]
    return {} if kept == names else {VLLM_PLUGINS_ENV: ",".join(kept)}


def launch(cfg: EngineConfig, inherited: Mapping[str, str], vllm_bin: str = "vllm",
           installed_plugins: Sequence[str] = (), live_state: str | None = None) -> Launch:
    return Launch(argv(cfg, vllm_bin), env(cfg, inherited, installed_plugins, live_state))
