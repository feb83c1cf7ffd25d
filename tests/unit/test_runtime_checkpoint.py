"""checkpoint: a draft's config.json against the method and N, refused with what to change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpilot_runtime.checkpoint import (
    architecture_family,
    check_checkpoints,
    draft_info,
    draft_problems,
    target_mtp_layers,
)
from specpilot_runtime.speculative import SpeculativeConfig

DFLASH_B16 = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
              "dflash_config": {"block_size": 16, "mask_token_id": 151669}}
DSPARK_B8 = {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3", "block_size": 8}
EAGLE3 = {"architectures": ["Eagle3LlamaForCausalLM"], "model_type": "llama"}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
GEMMA4_ASSISTANT = {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant"}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
               "num_nextn_predict_layers": 1}
QWEN35 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
          "text_config": {"model_type": "qwen3_5_text", "mtp_num_hidden_layers": 2}}


def spec(method: str, n: int, model: str | None = "/ckpt/draft", **kw: Any) -> SpeculativeConfig:
    return SpeculativeConfig(method=method, model=model, num_speculative_tokens=n, **kw)


def messages(*args: Any) -> list[str]:
    return [str(p) for p in draft_problems(*args)]


@pytest.mark.parametrize("arch,model_type,family", [
    ("DFlashDraftModel", "qwen3", "dflash"), ("Qwen3DSparkModel", "qwen3", "dspark"),
    ("Eagle3LlamaForCausalLM", "llama", "eagle3"), ("LlamaForCausalLMEagle3", "llama", "eagle3"),
    ("EagleLlamaForCausalLM", "llama", "eagle"), ("DeepSeekMTPModel", "deepseek_mtp", "mtp"),
    ("Gemma4AssistantForCausalLM", "gemma4_assistant", "mtp"), ("LlamaForCausalLM", "llama", "draft_model"),
    ("Eagle2_5_VLForConditionalGeneration", "eagle_2_5_vl", "draft_model"),
])
def test_architecture_family(arch: str, model_type: str, family: str) -> None:
    assert architecture_family(arch, model_type) == family


def test_dflash_block_16_refuses_n_16_and_says_15() -> None:
    (msg,) = messages(spec("dflash", 16), DFLASH_B16, None)
    assert msg.startswith("speculative.numSpeculativeTokens:")
    assert "block size 16" in msg and "at most 15" in msg and "anchor" in msg
    assert messages(spec("dflash", 15), DFLASH_B16, None) == []


def test_dspark_n_above_block_size_is_refused() -> None:
    (msg,) = messages(spec("dspark", 9), DSPARK_B8, None)
    assert "block size 8" in msg and "at most 8" in msg
    assert messages(spec("dspark", 8), DSPARK_B8, None) == []


def test_declared_block_size_must_match_the_checkpoint() -> None:
    (msg,) = messages(spec("dflash", 7, block_size=8), DFLASH_B16, None)
    assert msg.startswith("speculative.blockSize:") and "set blockSize to 16" in msg


@pytest.mark.parametrize("method,draft,hint", [
    ("dflash", EAGLE3, "use method eagle3"),
    ("eagle3", DFLASH_B16, "use method dflash"),
    ("eagle3", LLAMA, "use method draft_model"),
    ("draft_model", EAGLE3, "use method eagle3"),
    ("dspark", DFLASH_B16, "use method dflash"),
    ("mtp", LLAMA, "use method draft_model"),
])
def test_a_draft_built_for_another_method_is_refused(method: str, draft: dict[str, Any], hint: str) -> None:
    (msg,) = messages(spec(method, 3), draft, None)
    assert msg.startswith("speculative.draftModel:") and hint in msg
    assert ", ".join(draft["architectures"]) in msg


def test_matching_drafts_pass() -> None:
    assert messages(spec("eagle3", 3), EAGLE3, None) == []
    assert messages(spec("draft_model", 4), LLAMA, None) == []
    assert messages(spec("mtp", 1), GEMMA4_ASSISTANT, None) == []


def test_mtp_on_a_target_without_mtp_layers_is_refused() -> None:
    (msg,) = messages(spec("mtp", 3, model=None), None, LLAMA)
    assert msg.startswith("speculative.method:") and "no MTP layers" in msg
    assert messages(spec("mtp", 3, model=None), None, {**DEEPSEEK_V3, "num_nextn_predict_layers": 0})


def test_mtp_n_above_the_layer_count_must_be_a_multiple() -> None:
    (msg,) = messages(spec("mtp", 3, model=None), None, QWEN35)
    assert "2 MTP layers" in msg and "use 2 or 4" in msg
    assert messages(spec("mtp", 4, model=None), None, QWEN35) == []
    assert messages(spec("mtp", 5, model=None), None, DEEPSEEK_V3) == []  # one layer, any N


def test_unknown_targets_are_not_guessed() -> None:
    assert target_mtp_layers({"model_type": "some_new_moe"}) is None
    assert messages(spec("mtp", 3, model=None), None, {"model_type": "some_new_moe"}) == []
    assert target_mtp_layers(QWEN35) == 2


def test_hub_ids_are_not_checked() -> None:
    assert messages(spec("dflash", 16), None, None) == []


def test_draft_info_reads_dspark_block_size_spelling() -> None:
    assert draft_info({"architectures": ["Qwen3DSparkModel"], "dspark_block_size": 4}).block_size == 4
    assert draft_info(DFLASH_B16).block_size == 16
    assert draft_info(LLAMA).block_size is None


def test_local_checkpoints_are_read_from_config_json(tmp_path: Path) -> None:
    draft, target = tmp_path / "draft", tmp_path / "target"
    draft.mkdir()
    target.mkdir()
    (draft / "config.json").write_text(json.dumps(DFLASH_B16))
    (target / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    problems = check_checkpoints(str(target), spec("dflash", 16, model=str(draft)))
    assert [p.path for p in problems] == ["speculative.numSpeculativeTokens"]


def test_unreadable_config_json_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    problems = check_checkpoints("Qwen/Qwen3-8B", spec("draft_model", 4, model=str(tmp_path)))
    assert [p.path for p in problems] == ["speculative.draftModel"]
    assert "cannot read" in problems[0].message


@pytest.mark.parametrize("text,says", [("[" * 100_000, "cannot read"), (" " * (5 << 20) + "{}", "larger than"),
                                       ("[]", "not a JSON object")])
def test_a_config_json_past_reading_is_a_problem_not_a_traceback(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "config.json").write_text(text)
    problems = check_checkpoints("Qwen/Qwen3-8B", spec("draft_model", 4, model=str(tmp_path)))
    assert [p.path for p in problems] == ["speculative.draftModel"] and says in problems[0].message


@pytest.mark.parametrize("bad,key", [({"architectures": 5}, "architectures"),
                                     ({"architectures": "Eagle3LlamaForCausalLM"}, "architectures"),
                                     ({"architectures": [None, {"a": 1}]}, "architectures"),
                                     ({"model_type": {"a": 1}}, "model_type"),
                                     ({"model_type": ["qwen3"], "text_config": {"model_type": 7}}, "model_type")])
def test_fields_of_the_wrong_type_are_refused_naming_the_key(bad: dict[str, Any], key: str) -> None:
    """`architectures: 5` and a `model_type` object raised TypeError out of `specpilot-runtime serve`; then
    they read as absent, which claimed nothing about a file no checkpoint writes. Now they are named."""
    for method in ("eagle3", "dflash", "draft_model"):
        (msg,) = messages(spec(method, 3), bad, None)
        assert msg.startswith(f"speculative.draftModel: the draft's config.json: {key} is "), msg
    if key == "model_type":  # what a target's MTP check reads of it
        (msg,) = messages(spec("mtp", 3, model=None), None, bad)
        assert msg.startswith(f"model: the target's config.json: {key} is "), msg
