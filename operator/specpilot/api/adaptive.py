"""DSpark's adaptive verification (speculative-config key enable_adaptive_verification): where vLLM 0.33
runs it, and the tournament contender specpilot adds for it. Pure; validate, `for_contender` and the
tuner's contenders all read it from here (docs/api.md, "Adaptive verification").

vLLM runs the confidence head only on its GPU model runner (V2) with full CUDA graphs, without LoRA and
without pipeline parallelism; elsewhere it refuses to start. The V1 runner is what a method such as suffix
forces, never dspark, so no spec field selects it.
"""

from __future__ import annotations

from specpilot_runtime.speculative import ADAPTIVE_VERIFICATION_KEY, ADAPTIVE_VERIFICATION_METHODS, Problem

from .models import Alternative, MAX_ALTERNATIVES, Speculative, SpeculativeDeploymentSpec
from .switchback import user_capture

ARGS_PATH = "spec.engine.args"
# cudagraph_mode values that capture full graphs (vLLM's CUDAGraphMode; 2 is FULL by number).
FULL_GRAPH_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "2")


def blockers(spec: SpeculativeDeploymentSpec) -> list[tuple[str, str]]:
    """(field path, why) for each setting of the deployment under which vLLM would not run adaptive
    verification; empty where it would."""
    found: list[tuple[str, str]] = []
    # No vendor check: spec.accelerator.vendor admits only GPUs (amd, nvidia); cpu is the runtime's, for tests.
    user = user_capture(spec.engine.args)
    if user.eager_index is not None:
        found.append((f"{ARGS_PATH}[{user.eager_index}]",
                      "runs without CUDA graphs (--enforce-eager or cudagraph_mode NONE): remove it"))
    if user.graph_mode is not None and user.eager_index != user.graph_mode[0] \
            and user.graph_mode[1].strip().upper() not in FULL_GRAPH_MODES:
        found.append((f"{ARGS_PATH}[{user.graph_mode[0]}]",
                      f"cudagraph_mode {user.graph_mode[1][:40]!r} captures no full graphs: use one of "
                      f"{', '.join(FULL_GRAPH_MODES[:3])} or leave it unset"))
    if user.lora is not None:
        found.append((f"{ARGS_PATH}[{user.lora}]", "enables LoRA: remove it"))
    pp = user.pipeline_parallel
    if pp is not None and (pp.value is None or pp.value > 1):
        found.append((f"{ARGS_PATH}[{pp.index}]", "sets pipeline parallelism: use a pipeline-parallel size of 1"))
    return found


def wants_adaptive(speculative: Speculative) -> bool:
    """Whether this speculative config (spec.speculative or an alternative) turns adaptive verification on."""
    return speculative.extra.get(ADAPTIVE_VERIFICATION_KEY) is True


def problems(spec: SpeculativeDeploymentSpec) -> list[Problem]:
    """Each contender asking for adaptive verification where vLLM would not run it, at the key's path and
    naming the setting in the way. A non-boolean value is refused too: vLLM reads only true or false."""
    where = [("spec.speculative", spec.speculative)]
    where += [(f"spec.tuning.alternatives[{i}]", a) for i, a in enumerate(spec.tuning.alternatives or ())]
    found: list[Problem] = []
    in_the_way = blockers(spec)
    for path, speculative in where:
        key = f"{path}.extra.{ADAPTIVE_VERIFICATION_KEY}"
        value = speculative.extra.get(ADAPTIVE_VERIFICATION_KEY)
        if value is not None and not isinstance(value, bool):
            found.append(Problem(key, f"must be true or false, got {str(value)[:40]!r}"))
        if value is not True or speculative.method not in ADAPTIVE_VERIFICATION_METHODS:
            continue  # a non-dspark method is refused by the speculative config's own rules
        found += [Problem(key, f"vLLM runs adaptive verification only on GPUs with full CUDA graphs, without "
                               f"LoRA or pipeline parallelism: {field} {why}, or remove this key")
                  for field, why in in_the_way]
    return found


def implicit_alternative(spec: SpeculativeDeploymentSpec) -> Alternative | None:
    """The contender specpilot adds by itself: spec.speculative with adaptive verification on (same draft,
    same candidates), for a tuned dspark deployment whose settings let vLLM run it, unless
    spec.tuning.adaptiveVerification is off, spec.speculative or an alternative already runs it, or the
    alternatives are full. None otherwise, never an error: the user did not ask for it."""
    tuning, s = spec.tuning, spec.speculative
    alternatives = tuning.alternatives or []
    if not tuning.enabled or tuning.adaptive_verification == "off" or s.method not in ADAPTIVE_VERIFICATION_METHODS \
            or wants_adaptive(s) or len(alternatives) >= MAX_ALTERNATIVES or blockers(spec):
        return None
    if any(a.method == s.method and a.draft_model == s.draft_model and wants_adaptive(a) for a in alternatives):
        return None
    extra = {**s.extra, ADAPTIVE_VERIFICATION_KEY: True}
    return Alternative.model_validate({**s.model_dump(), "extra": extra})


def contender_alternatives(spec: SpeculativeDeploymentSpec) -> list[Alternative]:
    """The alternatives the tournament runs: spec.tuning.alternatives, then the implicit one if any (its
    contender index is the last)."""
    implicit = implicit_alternative(spec)
    return [*(spec.tuning.alternatives or ()), *([implicit] if implicit else [])]
