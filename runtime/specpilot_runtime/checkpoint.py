"""Draft checkpoint inspection: does the checkpoint's config.json fit the speculative method and N?

vLLM either fails late (after minutes of loading) or not at all on these mismatches: a DFlash draft
trained with block size B run at N >= B, a DSpark draft run above its block size (acceptance
collapses), a draft whose architecture belongs to another method, MTP on a target that has no MTP
layers. The rules are pure functions over parsed config.json; `read_config` is the one file reader, and
`hub_snapshot` finds a hub id's config.json in the Hugging Face cache (where the model cache volume holds it).

config.json is someone else's file: it is read up to a size and depth bound, NaN and Infinity are refused,
and every field a rule reads is type- and range-checked, a wrong one refused naming the file and the key.
"""

from __future__ import annotations

import json
import os
import re
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
# Fields holding the number of MTP layers a target ships, in the spellings vLLM reads (top level, then
# text_config).
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict")
# A draft's block size: the first of these keys present (vLLM's precedence: the drafter's section, then top
# level); a DSpark draft also spells it dspark_block_size. A DSpark head shipped inside the target (no draft
# model) says it only in its own spellings: a target's top-level block_size may mean something else.
BLOCK_FIELDS = ("dflash_config.block_size", "eagle_config.block_size", "block_size")
DSPARK_BLOCK_FIELDS = ("dflash_config.dspark_block_size", "eagle_config.dspark_block_size", "dspark_block_size")
TARGET_DSPARK_BLOCK_FIELDS = ("dspark_config.block_size", "dspark_block_size")
# Ranges a real checkpoint's counts lie in, far past any published one; beyond them the file is not one.
MAX_BLOCK = 4096
MAX_MTP_LAYERS = 256
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


class ConfigFieldError(ValueError):
    """A config.json field a rule reads holds what no checkpoint writes: `key` (dotted) and what is allowed."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key} {message}")
        self.key = key


@dataclass(frozen=True)
class DraftInfo:
    """What config.json says about a draft checkpoint."""

    architectures: tuple[str, ...]
    family: str  # a key of _FAMILY_HINT
    block_size: int | None
    block_key: str | None = None  # the key block_size was read from


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


def _shown(value: Any) -> str:
    """A hostile value, bounded, with its JSON type: `'16' (a string)`."""
    kind = {str: "a string", bool: "a boolean", float: "a number with a fraction", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), "a number")
    return f"{json.dumps(value)[:40]} ({kind})"


def _get(config: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key; None when any level is absent (a level that is not an object included)."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _whole(config: Mapping[str, Any], keys: tuple[str, ...], low: int, high: int,
           what: str) -> tuple[str, int] | tuple[None, None]:
    """The first of `keys` present, as (key, a whole number in low..high); ConfigFieldError otherwise."""
    for key in keys:
        value = _get(config, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigFieldError(key, f"is {_shown(value)}: {what} is a whole number from {low} to {high}")
        return key, value
    return None, None


def _name(config: Mapping[str, Any], key: str) -> str:
    """A string field (model_type); absent reads as ""."""
    value = _get(config, key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigFieldError(key, f"is {_shown(value)}: a model type is a string")
    return value


def _architectures(config: Mapping[str, Any]) -> tuple[str, ...]:
    listed = config.get("architectures")
    if listed is None:
        return ()
    if not isinstance(listed, list) or not all(isinstance(a, str) for a in listed):
        raise ConfigFieldError("architectures", f"is {_shown(listed)}: it is a list of class names (strings)")
    return tuple(listed)


def draft_info(config: Mapping[str, Any]) -> DraftInfo:
    """What a draft's config.json says; ConfigFieldError naming the key when a field it reads is malformed."""
    archs = _architectures(config)
    model_type = _name(config, "model_type")
    families = {architecture_family(a, model_type) for a in archs} or {architecture_family("", model_type)}
    # A checkpoint listing a specialised head and a plain LM is the head.
    family = next((f for f in _FAMILY_HINT if f in families and f != "draft_model"), "draft_model")
    keys = BLOCK_FIELDS + DSPARK_BLOCK_FIELDS if family == "dspark" else BLOCK_FIELDS
    key, block = _whole(config, keys, 1, MAX_BLOCK, "a block size")
    return DraftInfo(archs, family, block, key)


def target_dspark_block(config: Mapping[str, Any]) -> tuple[str, int] | tuple[None, None]:
    """The block size of a DSpark head shipped inside the target checkpoint (method dspark, no draft model)."""
    return _whole(config, TARGET_DSPARK_BLOCK_FIELDS, 1, MAX_BLOCK, "a block size")


def target_mtp_layers(config: Mapping[str, Any]) -> int | None:
    """MTP layers in a target checkpoint: a count, 0 when it certainly has none, None when unknown."""
    keys = MTP_LAYER_FIELDS + tuple(f"text_config.{name}" for name in MTP_LAYER_FIELDS)
    _, layers = _whole(config, keys, 0, MAX_MTP_LAYERS, "a count of MTP layers")
    if layers is not None:
        return layers
    model_types = {_name(config, "model_type"), _name(config, "text_config.model_type")}
    model_types.discard("")
    return 0 if model_types and model_types <= NO_MTP_MODEL_TYPES else None


def draft_problems(spec: SpeculativeConfig, draft: Mapping[str, Any] | None,
                   target: Mapping[str, Any] | None, path: str = "speculative",
                   files: tuple[str, str] = ("the draft's config.json", "the target's config.json")) -> list[Problem]:
    """Mismatches between the method, N, and what the checkpoints' config.json files say.

    `draft` and `target` are the parsed config.json files, None when not readable (a hub id not in the cache):
    then nothing is claimed about them. `files` names them (draft, target) in problems about their fields.
    """
    if spec.method not in METHODS:
        return []  # SpeculativeConfig.problems() reports unknown methods
    p: list[Problem] = []
    if draft is not None and spec.model:
        try:
            p += _draft_checks(spec, draft_info(draft), draft, path)
        except ConfigFieldError as e:
            p.append(Problem(f"{path}.draftModel", f"{files[0]}: {e}"))
    if not spec.model and target is not None:
        try:
            p += _target_checks(spec, target, path)
        except ConfigFieldError as e:
            p.append(Problem("model", f"{files[1]}: {e}"))
    return p


def _draft_checks(spec: SpeculativeConfig, info: DraftInfo, draft: Mapping[str, Any], path: str) -> list[Problem]:
    if info.family != spec.method:
        arch = ", ".join(info.architectures) or f"model_type {draft.get('model_type')!r}"
        return [Problem(f"{path}.draftModel", f"{spec.model} has architecture {arch}, which is "
                                              f"{_FAMILY_HINT[info.family]} (or pick a {spec.method} checkpoint)")]
    if info.block_size is None or info.block_key is None:
        return []
    return _block_problems(spec, info.block_size, info.block_key, path)


def _target_checks(spec: SpeculativeConfig, target: Mapping[str, Any], path: str) -> list[Problem]:
    """The target's own drafter (no draft model): its MTP layers, or the block of a DSpark head it ships."""
    n = spec.num_speculative_tokens
    if spec.method == "dspark":
        key, block = target_dspark_block(target)
        return [] if block is None or key is None else _block_problems(spec, block, key, path)
    if spec.method != "mtp":
        return []
    layers = target_mtp_layers(target)
    if layers == 0:
        return [Problem(f"{path}.method",
                        f"the target model ({target.get('model_type', 'unknown type')}) has no MTP layers: "
                        "use a checkpoint with MTP layers, give an MTP draft model, or pick another method")]
    if layers and n > layers and n % layers:
        lower, upper = n - n % layers, n + layers - n % layers
        return [Problem(f"{path}.numSpeculativeTokens",
                        f"the target has {layers} MTP layers; N above that must be a multiple of "
                        f"{layers} (vLLM reuses the layers): use {lower} or {upper}")]
    return []


def _block_problems(spec: SpeculativeConfig, block: int, key: str, path: str) -> list[Problem]:
    p: list[Problem] = []
    if spec.block_size is not None and spec.block_size != block:
        p.append(Problem(f"{path}.blockSize",
                         f"is {spec.block_size} but the draft checkpoint was trained with block size "
                         f"{block} (config.json {key}): set blockSize to {block}"))
    rule = METHODS[spec.method]
    if rule.block_bound is None:
        return p
    limit = block + rule.block_bound
    n = spec.num_speculative_tokens
    if n > limit:
        why = ("DFlash drafts 1 + N tokens per block (position 0 is the anchor)" if spec.method == "dflash"
               else "above the block size DSpark's acceptance collapses")
        default = (f"; without blockSize the checkpoint's block size applies, not the default "
                   f"{rule.default_block_size}" if spec.block_size is None else "")
        p.append(Problem(f"{path}.numSpeculativeTokens",
                         f"{n} is too large for this {spec.method} draft (block size {block}, config.json "
                         f"{key}): set it to at most {limit}; {why}{default}"))
    return p


def read_config(model: str, env: Mapping[str, str] | None = None, revision: str | None = None) -> \
        tuple[Path, dict[str, Any]] | None:
    """The config.json of a checkpoint and where it was read: a local directory's, or a hub id's cached snapshot
    (`hub_snapshot`, with `env` the pod's environment); None when there is none to read.

    Raises CheckpointError, saying why in one line, for any other reason it cannot be read: a file the
    kernel cannot open (a path past PATH_MAX, no permission), past MAX_CONFIG_BYTES, not JSON (NaN and
    Infinity included), not an object."""
    found = _read_config(Path(model) / "config.json")
    if found is not None or env is None:
        return found
    snapshot = hub_snapshot(model, env, revision)
    return None if snapshot is None else _read_config(snapshot / "config.json")


def _read_config(path: Path) -> tuple[Path, dict[str, Any]] | None:
    try:
        data = parse_json(read_bounded(path, MAX_CONFIG_BYTES), MAX_CONFIG_DEPTH, finite=True)
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
    return path, data


# A hub id as the Hub names repositories (`name` or `owner/name`): letters, digits, '-', '_', '.', no '..'
# and no '--' (which the cache uses as the separator), so it can only name a directory inside the cache.
HUB_ID = re.compile(r"(?!.*\.\.)(?!.*--)[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
COMMIT = re.compile(r"[0-9a-f]{40}")
# A refs file holds one commit hash.
MAX_REF_BYTES = 256


def hub_cache(env: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache directory as huggingface_hub (and so vLLM) finds it in `env`."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return Path(env[name])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub"
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".cache" / "huggingface" / "hub"


def hub_snapshot(model: str, env: Mapping[str, str], revision: str | None = None) -> Path | None:
    """The cached snapshot directory of hub id `model` at `revision` (a branch or tag through its refs file,
    or a commit; default main), or None when it is not a hub id or not cached (vLLM downloads it later: then
    nothing is claimed). Raises CheckpointError for a refs file that holds no commit."""
    if not HUB_ID.fullmatch(model):
        return None
    repo = hub_cache(env) / ("models--" + model.replace("/", "--"))
    rev = revision or "main"
    if COMMIT.fullmatch(rev):
        commit = rev
    else:
        if not re.fullmatch(r"[\w.-]{1,255}", rev) or ".." in rev:
            return None  # a revision no refs file can be named for (vLLM resolves it, or refuses it, itself)
        ref = repo / "refs" / rev
        try:
            commit = read_bounded(ref, MAX_REF_BYTES).decode("ascii", "replace").strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise CheckpointError(f"cannot read {ref}: {e.strerror or e}") from None
        except FileProblem as e:
            what = f"is larger than {MAX_REF_BYTES} bytes" if e.kind == "too_large" else str(e)
            raise CheckpointError(f"{ref} {what}: a refs file holds one commit hash (40 hex digits)") from None
        if not COMMIT.fullmatch(commit):
            raise CheckpointError(f"{ref} does not hold a commit hash (40 hex digits): the hub cache is damaged")
    snapshot = repo / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


class CheckpointError(Exception):
    """A checkpoint's config.json exists but cannot be read."""


def check_checkpoints(model: str, spec: SpeculativeConfig, path: str = "speculative",
                      env: Mapping[str, str] | None = None) -> list[Problem]:
    """Reads the target's and the draft's config.json where they are local or, with the pod's `env`, in its
    hub cache, and checks them."""
    p: list[Problem] = []
    found: list[tuple[Path, dict[str, Any]] | None] = []
    revision = spec.extra.get("revision")
    for where, name, rev in (("model", model, None),
                             (f"{path}.draftModel", spec.model, revision if isinstance(revision, str) else None)):
        try:
            found.append(read_config(name, env, rev) if name else None)
        except CheckpointError as e:
            p.append(Problem(where, str(e)))
            found.append(None)
    target, draft = found
    files = (str(draft[0]) if draft else "config.json", str(target[0]) if target else "config.json")
    return p + draft_problems(spec, draft[1] if draft else None, target[1] if target else None, path, files)
