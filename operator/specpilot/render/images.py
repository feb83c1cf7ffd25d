"""Serving images per accelerator vendor, at the vLLM version specpilot's rules are written for."""

from __future__ import annotations

# speculative.py describes vLLM 0.33's speculative config; the default images run that version.
VLLM_VERSION = "v0.33.0"

DEFAULT_IMAGES: dict[str, str] = {
    "amd": f"vllm/vllm-openai-rocm:{VLLM_VERSION}",
    "nvidia": f"vllm/vllm-openai:{VLLM_VERSION}",
}

GPU_RESOURCES: dict[str, str] = {"amd": "amd.com/gpu", "nvidia": "nvidia.com/gpu"}


def image_for(vendor: str, override: str | None) -> str:
    """The spec's image when given, otherwise the vendor's default."""
    return override or DEFAULT_IMAGES[vendor]
