"""The runtime's side of draft length set live: engine.json's live_file -> the engine's environment and
plugins, refused where vLLM would keep no list to rewrite; serve's dry-run; the plugin in the pod's copy."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from specpilot_runtime import engine, live
from specpilot_runtime.cli import main
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.install import install

LIVE = "/etc/specpilot/live/live.json"
STATE = "/tmp/specpilot-live-x/state.prom"
TABLE = [[1, 256, 4]]


def cfg(**kw: Any) -> EngineConfig:
    spec = {"method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": TABLE,
            **kw.pop("speculative", {})}
    return EngineConfig.model_validate({"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "cpu"},
                                        "speculative": spec, "live_file": LIVE, **kw})


def test_live_file_sets_both_paths_and_loads_both_plugins() -> None:
    env = engine.env(cfg(), {}, live_state=STATE)
    assert env[live.LIVE_FILE_ENV] == LIVE and env[live.LIVE_STATE_ENV] == STATE
    assert engine.VLLM_PLUGINS_ENV not in env  # unset: vLLM loads every installed plugin, ours too
    listed = engine.env(cfg(), {engine.VLLM_PLUGINS_ENV: "their_plugin"}, live_state=STATE)
    assert listed[engine.VLLM_PLUGINS_ENV] == f"their_plugin,{engine.PLUGIN_ENTRY_POINT},{engine.LIVE_ENTRY_POINT}"


def test_live_keeps_the_stat_logger_plugin_even_with_the_drafted_metric_off() -> None:
    """It relays the live counters to /metrics and keeps vLLM's per-step stats on, which they read."""
    off = cfg(drafted_per_position_metric=False)
    env = engine.env(off, {}, ["their_plugin", engine.PLUGIN_ENTRY_POINT, engine.LIVE_ENTRY_POINT], STATE)
    assert env[engine.PLUGIN_ENABLE_ENV] == "0" and engine.VLLM_PLUGINS_ENV not in env
    env = engine.env(off, {engine.VLLM_PLUGINS_ENV: "their_plugin"}, live_state=STATE)
    assert env[engine.VLLM_PLUGINS_ENV] == f"their_plugin,{engine.PLUGIN_ENTRY_POINT},{engine.LIVE_ENTRY_POINT}"


def test_without_live_file_nothing_changes_for_the_live_plugin() -> None:
    plain = cfg(live_file=None)
    env = engine.env(plain, {}, ["their_plugin", engine.PLUGIN_ENTRY_POINT, engine.LIVE_ENTRY_POINT])
    assert live.LIVE_FILE_ENV not in env and live.LIVE_STATE_ENV not in env
    assert engine.VLLM_PLUGINS_ENV not in env
    listed = {engine.VLLM_PLUGINS_ENV: f"their_plugin,{engine.LIVE_ENTRY_POINT}"}  # kept, though it idles
    assert engine.env(plain, listed)[engine.VLLM_PLUGINS_ENV] == \
        f"their_plugin,{engine.LIVE_ENTRY_POINT},{engine.PLUGIN_ENTRY_POINT}"


def test_live_file_without_a_state_path_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="live_state"):
        engine.env(cfg(), {})


@pytest.mark.parametrize("kw,field,words", [
    ({"speculative": {"num_speculative_tokens_per_batch_size": None}},
     "speculative.num_speculative_tokens_per_batch_size", "batch size 1"),
    ({"speculative": {"method": "suffix", "num_speculative_tokens_per_batch_size": None}}, "live_file",
     "suffix"),
    ({"speculative": {"method": "off", "num_speculative_tokens": 0, "num_speculative_tokens_per_batch_size": None}},
     "live_file", "nothing is drafted"),
    ({"args": ["--data-parallel-size", "2"]}, "live_file", "data parallelism"),
    ({"args": ["-dp=4"]}, "live_file", "data parallelism"),
])
def test_live_file_is_refused_where_vllm_keeps_no_list_to_rewrite(kw: dict[str, Any], field: str,
                                                                   words: str) -> None:
    (problem,) = engine.live_problems(cfg(**kw))
    assert problem.path == field and words in problem.message


def test_a_table_from_batch_size_1_under_one_data_parallel_rank_is_accepted() -> None:
    assert engine.live_problems(cfg(args=["--data-parallel-size", "1"])) == []
    assert engine.live_problems(cfg(speculative={"num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 64, 2]]})) \
        == []
    assert engine.live_problems(cfg(live_file=None, speculative={"num_speculative_tokens_per_batch_size": None})) \
        == []


def serve_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], **kw: Any) -> tuple[int, str, str]:
    config = tmp_path / "engine.json"
    config.write_text(json.dumps(json.loads(cfg(**kw).model_dump_json(exclude_none=True))))
    code = main(["serve", "--config", str(config), "--dry-run"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_serve_dry_run_shows_where_the_live_state_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = serve_dry_run(tmp_path, capsys)
    assert code == 0
    env = json.loads(out)["env"]
    assert env[live.LIVE_FILE_ENV] == LIVE and env[live.LIVE_STATE_ENV].endswith("live-state.prom")


def test_serve_refuses_live_file_without_a_table_before_vllm_starts(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = serve_dry_run(tmp_path, capsys, speculative={"num_speculative_tokens_per_batch_size": None})
    assert code == 2 and out == ""
    assert "speculative.num_speculative_tokens_per_batch_size: live_file needs a starting table" in err


def test_the_general_plugin_is_declared_and_copied_into_the_pod(tmp_path: Path) -> None:
    names = {ep.name: ep.value for ep in metadata.entry_points(group="vllm.general_plugins")}
    assert names.get(engine.LIVE_ENTRY_POINT) == "specpilot_runtime.live_engine:register"
    install(tmp_path)
    (dist,) = metadata.distributions(path=[str(tmp_path)])
    groups = {(ep.group, ep.name) for ep in dist.entry_points}
    assert {("vllm.general_plugins", engine.LIVE_ENTRY_POINT),
            ("vllm.stat_logger_plugins", engine.PLUGIN_ENTRY_POINT)} <= groups
