"""Draft checkpoint inspection: does the checkpoint's config.json fit the speculative method and N?

vLLM either fails late (after minutes of loading) or not at all on these mismatches: a DFlash draft
trained with block size B run at N >= B, a DSpark draft run above its block size (acceptance
collapses), a draft whose architecture belongs to another method, MTP on a target that has no MTP
layers. The rules are pure functions over parsed config.json; `read_config` is the one file reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import FileProblem, parse_json, read_bounded
from .speculative import METHODS, Problem, SpeculativeConfig

# A model's config.json is a few kB (tens with a large label map); a file far past that is not one, and is
# not read into memory.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
# Real config.json files nest a few levels (text_config.rope_scaling, a quantization config's layers).
MAX_CONFIG_DEPTH = 64
# Fields holding the number of MTP layers a target ships, in the spellings vLLM reads.
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict")
# Target families that ship no MTP layers, so MTP without a draft model cannot work on them.
NO_MTP_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3", "gemma3_text", "gemma4", "gemma4_text", "phi3", "granite", "olmo2", "gpt_oss",
})

# What each drafter family is called when telling the user which method a checkpoint is for.
_FAMILY_HINT = {
    "dflash": "a DFlash draft: use method dflash",
    "dspark": "a DSpark draft: use method dspark",
    "eagle3": "an EAGLE-3 head: use method eagle3",
    "eagle": "an EAGLE (v1) head, which specpilot does not run: use an EAGLE-3 head with method eagle3",
    "mtp": "an MTP module: use method mtp",
    "draft_model": "a standalone language model: use method draft_model",
}


@dataclass(frozen=True)
class DraftInfo:
    """What config.json says about a draft checkpoint."""

    architectures: tuple[str, ...]
    family: str  # a key of _FAMILY_HINT
    block_size: int | None


def architecture_family(architecture: str, model_type: str = "") -> str:
    """The speculative method a checkpoint architecture is built for (vLLM's registry naming)."""
    a, t = architecture.lower(), model_type.lower()
    if "dflash" in a or "dflash" in t:
        return "dflash"
    if "dspark" in a or "dspark" in t:
        return "dspark"
    if "eagle3" in a or "peagle" in a or "eagle3" in t:
        return "eagle3"
    # NVIDIA's Eagle2.5 is a vision-language model, not an EAGLE head.
    if ("eagle" in a and not a.startswith("eagle2_5")) or t.endswith("_eagle"):
        return "eagle"
    # Gemma 4 MTP assistants are served through vLLM's MTP path.
    if "mtp" in a or "mtp" in t or t.endswith("_assistant"):
        return "mtp"
    return "draft_model"


def _nested(config: Mapping[str, Any], name: str, sections: tuple[str, ...]) -> Any:
    """`name` from the first of `sections` that has it, then top level (vLLM's precedence)."""
    for section in sections:
        sub = config.get(section)
        if isinstance(sub, Mapping) and sub.get(name) is not None:
            return sub[name]
    return config.get(name)


def _text(value: Any) -> str:
    """A config.json string field; anything else (a number, a list, an object) reads as absent."""
    return value if isinstance(value, str) else ""


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def draft_info(config: Mapping[str, Any]) -> DraftInfo:
    listed = config.get("architectures")
    archs = tuple(a for a in listed if isinstance(a, str)) if isinstance(listed, list) else ()
    model_type = _text(config.get("model_type"))
    families = {architecture_family(a, model_type) for a in archs} or {architecture_family("", model_type)}
    # A checkpoint listing a specialised head and a plain LM is the head.
    family = next((f for f in _FAMILY_HINT if f in families and f != "draft_model"), "draft_model")
    sections = ("dflash_config", "eagle_config")
    block = _nested(config, "block_size", sections)
    if block is None and family == "dspark":
        block = _nested(config, "dspark_block_size", sections)
    return DraftInfo(archs, family, _positive_int(block))


def target_mtp_layers(config: Mapping[str, Any]) -> int | None:
    """MTP layers in a target checkpoint: a count, 0 when it certainly has none, None when unknown."""
    for where in (config, config.get("text_config")):
        if isinstance(where, Mapping):
            for name in MTP_LAYER_FIELDS:
                value = where.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
    model_types = {_text(config.get("model_type"))}
    if isinstance(config.get("text_config"), Mapping):
        model_types.add(_text(config["text_config"].get("model_type")))
    model_types.discard("")
    return 0 if model_types and model_types <= NO_MTP_MODEL_TYPES else None


def draft_problems(spec: SpeculativeConfig, draft: Mapping[str, Any] | None,
                   target: Mapping[str, Any] | None, path: str = "speculative") -> list[Problem]:
    """Mismatches between the method, N, and what the checkpoints' config.json files say.

    `draft` and `target` are the parsed config.json files, None when not readable (a hub id): then
    nothing is claimed about them.
    """
    method, n = spec.method, spec.num_speculative_tokens
    if method not in METHODS:
        return []  # SpeculativeConfig.problems() reports unknown methods
    p: list[Problem] = []
    if draft is not None and spec.model:
        info = draft_info(draft)
        if info.family != method:
            arch = ", ".join(info.architectures) or f"model_type {draft.get('model_type')!r}"
            p.append(Problem(f"{path}.draftModel",
                             f"{spec.model} has architecture {arch}, which is {_FAMILY_HINT[info.family]} "
                             f"(or pick a {method} checkpoint)"))
        elif info.block_size is not None:
            p += _block_problems(spec, info.block_size, path)
    if method == "mtp" and not spec.model and target is not None:
        layers = target_mtp_layers(target)
        if layers == 0:
            p.append(Problem(f"{path}.method",
                             f"the target model ({target.get('model_type', 'unknown type')}) has no MTP layers: "
                             "use a checkpoint with MTP layers, give an MTP draft model, or pick another method"))
        elif layers and n > layers and n % layers:
            lower, upper = n - n % layers, n + layers - n % layers
            p.append(Problem(f"{path}.numSpeculativeTokens",
                             f"the target has {layers} MTP layers; N above that must be a multiple of "
                             f"{layers} (vLLM reuses the layers): use {lower} or {upper}"))
    return p


def _block_problems(spec: SpeculativeConfig, block: int, path: str) -> list[Problem]:
    p: list[Problem] = []
    if spec.block_size is not None and spec.block_size != block:
        p.append(Problem(f"{path}.blockSize",
                         f"is {spec.block_size} but the draft checkpoint was trained with block size "
                         f"{block}: set blockSize to {block}"))
    rule = METHODS[spec.method]
    if rule.block_bound is None:
        return p
    limit = block + rule.block_bound
    n = spec.num_speculative_tokens
    if n > limit:
        why = ("DFlash drafts 1 + N tokens per block (position 0 is the anchor)" if spec.method == "dflash"
               else "above the block size DSpark's acceptance collapses")
        p.append(Problem(f"{path}.numSpeculativeTokens",
                         f"{n} is too large for this {spec.method} draft (block size {block}): "
                         f"set it to at most {limit}; {why}"))
    return p


def read_config(model: str) -> dict[str, Any] | None:
    """config.json of a local checkpoint directory; None for a hub id or a directory without one.

    Raises CheckpointError, saying why in one line, for any other reason it cannot be read: a file the
    kernel cannot open (a path past PATH_MAX, no permission), past MAX_CONFIG_BYTES, not JSON, not an object."""
    path = Path(model) / "config.json"
    try:
        data = parse_json(read_bounded(path, MAX_CONFIG_BYTES), MAX_CONFIG_DEPTH)
    except (FileNotFoundError, NotADirectoryError):
        return None  # a hub id, or a local directory without config.json
    except OSError as e:
        raise CheckpointError(f"cannot read its config.json ({e.strerror or e}): {path}") from None
    except FileProblem as e:
        if e.kind == "not_regular":
            return None  # a config.json that is a directory (or a device) is none: nothing is claimed
        if e.kind == "too_large":
            raise CheckpointError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes: not a model's config.json") \
                from None
        raise CheckpointError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return data


class CheckpointError(Exception):
    """A local checkpoint's config.json exists but cannot be read."""


def check_checkpoints(model: str, spec: SpeculativeConfig, path: str = "speculative") -> list[Problem]:
    """Reads the target's and the draft's config.json where they are local, and checks them."""
    p: list[Problem] = []
    configs: list[dict[str, Any] | None] = []
    for where, name in (("model", model), (f"{path}.draftModel", spec.model)):
        try:
            configs.append(read_config(name) if name else None)
        except CheckpointError as e:
            p.append(Problem(where, str(e)))
            configs.append(None)
    target, draft = configs
    return p + draft_problems(spec, draft, target, path)
