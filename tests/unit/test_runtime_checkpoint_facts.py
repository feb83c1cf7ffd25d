"""Checkpoint facts, not defaults: the runtime reads a draft's (or target's) config.json from a local directory
or the Hugging Face hub cache, refuses an N the checkpoint cannot draft naming the field, and treats the file
as hostile (size, depth, NaN/Infinity, types and ranges), naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpilot_runtime.checkpoint import check_checkpoints, hub_cache, hub_snapshot
from specpilot_runtime.cli import main
from specpilot_runtime.speculative import SpeculativeConfig

COMMIT = "0123456789abcdef0123456789abcdef01234567"
# The shape of DeepSeek's DeepSpec dense DSpark drafts: block 7, where specpilot's default is 16.
DSPARK_B7 = {"architectures": ["DeepseekV3DSparkForCausalLM"], "model_type": "deepseek_v3", "block_size": 7}
DFLASH_B16 = {"architectures": ["DFlashDraftModel"], "dflash_config": {"block_size": 16}}


def cache_repo(hub: Path, repo: str, config: dict[str, Any] | str, ref: str = "main",
               commit: str = COMMIT) -> Path:
    """A hub cache entry as huggingface_hub lays it out: refs/<ref> -> snapshots/<commit>/config.json."""
    root = hub / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return snapshot / "config.json"


def spec(method: str, n: int, model: str | None, **kw: Any) -> SpeculativeConfig:
    return SpeculativeConfig(method=method, model=model, num_speculative_tokens=n, **kw)


def problems(tmp_path: Path, speculative: SpeculativeConfig, target: str = "Qwen/Qwen3-8B") -> list[str]:
    return [str(p) for p in check_checkpoints(target, speculative, env={"HF_HOME": str(tmp_path)})]


def test_dspark_default_block_size_follows_the_cached_checkpoint(tmp_path: Path) -> None:
    cache_repo(tmp_path / "hub", "deepseek-ai/DeepSpec-DSpark", DSPARK_B7)
    (msg,) = problems(tmp_path, spec("dspark", 8, "deepseek-ai/DeepSpec-DSpark"))
    assert msg.startswith("speculative.numSpeculativeTokens: 8 is too large for this dspark draft (block size 7")
    assert "config.json block_size" in msg and "at most 7" in msg and "not the default 16" in msg
    assert problems(tmp_path, spec("dspark", 7, "deepseek-ai/DeepSpec-DSpark")) == []
    # A declared blockSize that is not the checkpoint's is named too.
    (msg,) = problems(tmp_path, spec("dspark", 7, "deepseek-ai/DeepSpec-DSpark", block_size=16))
    assert msg.startswith("speculative.blockSize: is 16") and "set blockSize to 7" in msg


def test_a_dspark_head_inside_the_target_is_read_from_the_targets_config(tmp_path: Path) -> None:
    cache_repo(tmp_path / "hub", "org/target-with-dspark", {"model_type": "qwen3", "dspark_block_size": 7})
    (msg,) = problems(tmp_path, spec("dspark", 12, None), target="org/target-with-dspark")
    assert msg.startswith("speculative.numSpeculativeTokens: 12") and "dspark_block_size" in msg


def test_mtp_layers_are_read_from_the_cached_target(tmp_path: Path) -> None:
    cache_repo(tmp_path / "hub", "Qwen/Qwen3.5-27B", {"model_type": "qwen3_5",
                                                       "text_config": {"mtp_num_hidden_layers": 2}})
    (msg,) = problems(tmp_path, spec("mtp", 3, None), target="Qwen/Qwen3.5-27B")
    assert msg.startswith("speculative.numSpeculativeTokens:") and "use 2 or 4" in msg


def test_a_revision_picks_its_snapshot(tmp_path: Path) -> None:
    other = "f" * 40
    cache_repo(tmp_path / "hub", "org/dflash", DFLASH_B16)
    cache_repo(tmp_path / "hub", "org/dflash", {**DFLASH_B16, "dflash_config": {"block_size": 8}}, "b8", other)
    assert problems(tmp_path, spec("dflash", 10, "org/dflash")) == []
    (msg,) = problems(tmp_path, spec("dflash", 10, "org/dflash", extra={"revision": "b8"}))
    assert "block size 8" in msg and "at most 7" in msg
    assert problems(tmp_path, spec("dflash", 10, "org/dflash", extra={"revision": other})) == [msg]


def test_what_is_not_cached_or_not_a_hub_id_is_not_claimed(tmp_path: Path) -> None:
    assert problems(tmp_path, spec("dflash", 15, "org/not-downloaded")) == []
    cache_repo(tmp_path, "x", DFLASH_B16)  # beside the cache, not in it
    for model in ("../x", "org/../../x", "org--x/y", "a/b/c", "/abs/path/missing"):
        assert hub_snapshot(model, {"HF_HOME": str(tmp_path)}) is None, model


def test_the_cache_is_found_as_huggingface_hub_finds_it() -> None:
    assert hub_cache({"HF_HUB_CACHE": "/a", "HF_HOME": "/b"}) == Path("/a")
    assert hub_cache({"HF_HOME": "/b"}) == Path("/b/hub")
    assert hub_cache({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/huggingface/hub")
    assert hub_cache({"HOME": "/h"}) == Path("/h/.cache/huggingface/hub")


def test_a_damaged_refs_file_names_the_file(tmp_path: Path) -> None:
    cache_repo(tmp_path / "hub", "org/dflash", DFLASH_B16)
    ref = tmp_path / "hub" / "models--org--dflash" / "refs" / "main"
    ref.write_text("../../../../etc\n")
    (msg,) = problems(tmp_path, spec("dflash", 7, "org/dflash"))
    assert msg.startswith("speculative.draftModel:") and "refs/main does not hold a commit hash" in msg
    ref.write_text("0" * 4096)
    (msg,) = problems(tmp_path, spec("dflash", 7, "org/dflash"))
    assert "refs/main is larger than 256 bytes: a refs file holds one commit hash" in msg


@pytest.mark.parametrize(("config", "key", "says"), [
    ({**DFLASH_B16, "dflash_config": {"block_size": "16"}}, "dflash_config.block_size", '"16" (a string)'),
    ({**DFLASH_B16, "dflash_config": {"block_size": 16.5}}, "dflash_config.block_size", "with a fraction"),
    ({**DFLASH_B16, "dflash_config": {"block_size": True}}, "dflash_config.block_size", "(a boolean)"),
    ({**DFLASH_B16, "dflash_config": {"block_size": -1}}, "dflash_config.block_size", "from 1 to 4096"),
    ({**DFLASH_B16, "dflash_config": {"block_size": 10 ** 30}}, "dflash_config.block_size", "from 1 to 4096"),
    ({**DFLASH_B16, "architectures": 5}, "architectures", "list of class names"),
    ({**DFLASH_B16, "architectures": [None]}, "architectures", "list of class names"),
    ({**DFLASH_B16, "model_type": {"a": 1}}, "model_type", "a model type is a string"),
])
def test_a_malformed_field_names_the_file_and_the_key(tmp_path: Path, config: dict[str, Any], key: str,
                                                      says: str) -> None:
    path = cache_repo(tmp_path / "hub", "org/dflash", config)
    (msg,) = problems(tmp_path, spec("dflash", 7, "org/dflash"))
    assert msg.startswith(f"speculative.draftModel: {path}: {key} is ") and says in msg


@pytest.mark.parametrize(("target", "key"), [
    ({"model_type": "deepseek_v3", "num_nextn_predict_layers": "1"}, "num_nextn_predict_layers"),
    ({"model_type": "qwen3_5", "text_config": {"mtp_num_hidden_layers": 1000}}, "text_config.mtp_num_hidden_layers"),
    ({"model_type": "qwen3_5", "text_config": {"model_type": 7}}, "text_config.model_type"),
])
def test_a_malformed_target_field_names_the_file_and_the_key(tmp_path: Path, target: dict[str, Any],
                                                             key: str) -> None:
    path = cache_repo(tmp_path / "hub", "org/target", target)
    (msg,) = problems(tmp_path, spec("mtp", 2, None), target="org/target")
    assert msg.startswith(f"model: {path}: {key} is ")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_naming_the_file(tmp_path: Path, constant: str) -> None:
    path = cache_repo(tmp_path / "hub", "org/dflash", f'{{"architectures": ["DFlashDraftModel"], '
                                                      f'"dflash_config": {{"block_size": {constant}}}}}')
    (msg,) = problems(tmp_path, spec("dflash", 7, "org/dflash"))
    assert msg.startswith("speculative.draftModel:") and str(path) in msg
    assert f"holds {constant}" in msg and "finite" in msg


def test_a_huge_cached_config_is_refused_unread(tmp_path: Path) -> None:
    cache_repo(tmp_path / "hub", "org/dflash", " " * (5 << 20) + "{}")
    (msg,) = problems(tmp_path, spec("dflash", 7, "org/dflash"))
    assert msg.startswith("speculative.draftModel:") and "larger than" in msg


def test_serve_refuses_before_vllm_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cache_repo(tmp_path / "hub", "deepseek-ai/DeepSpec-DSpark", DSPARK_B7)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    config = tmp_path / "engine.json"
    config.write_text(json.dumps({"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "cpu"},
                                  "speculative": {"method": "dspark", "model": "deepseek-ai/DeepSpec-DSpark",
                                                  "num_speculative_tokens": 16}}))
    assert main(["serve", "--config", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "speculative.numSpeculativeTokens: 16 is too large for this dspark draft (block size 7" in err
