"""Serving images per accelerator vendor, at the vLLM version specpilot's rules are written for."""

from __future__ import annotations

# speculative.py describes vLLM 0.33's speculative config; the default images run that version.
VLLM_VERSION = "v0.33.0"
SPECPILOT_VERSION = "0.1.0"

# vLLM's vendor images plus the specpilot runtime (images/Dockerfile builds them): stock vLLM images
# lack `specpilot-runtime`, which the pod's command runs.
DEFAULT_IMAGES: dict[str, str] = {
    "amd": f"specpilot/runtime:{SPECPILOT_VERSION}-rocm-vllm-{VLLM_VERSION}",
    "nvidia": f"specpilot/runtime:{SPECPILOT_VERSION}-cuda-vllm-{VLLM_VERSION}",
}

def image_for(vendor: str, override: str | None) -> str:
    """The spec's image when given, otherwise the vendor's default."""
    return override or DEFAULT_IMAGES[vendor]
