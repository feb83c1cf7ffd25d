"""Serving images: vLLM's published images per accelerator vendor, at the version specpilot's rules are
written for, and the cluster-wide defaults an administrator sets (`specpilot run` flags, chart values)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..api.models import IMAGE_PATTERN, MAX_IMAGE_LENGTH, MAX_OBJECT_NAME_LENGTH, SECRET_NAME_PATTERN

# speculative.py describes vLLM 0.33's speculative config; the default images run that version.
VLLM_VERSION = "v0.33.0"
SPECPILOT_VERSION = "0.1.0"

# vLLM's own published images (docs/references.md §6). They lack specpilot: an init container copies
# the runtime in from the operator image (pod.py), so nobody has to build a serving image.
DEFAULT_IMAGES: Mapping[str, str] = {
    "amd": f"vllm/vllm-openai-rocm:{VLLM_VERSION}",
    "nvidia": f"vllm/vllm-openai:{VLLM_VERSION}",
}
# The operator image, which holds the runtime the init container copies (the chart passes its own).
DEFAULT_RUNTIME_IMAGE = f"specpilot/specpilot:{SPECPILOT_VERSION}"

ENV_IMAGE = "SPECPILOT_SERVING_IMAGE_{vendor}"
ENV_PULL_SECRETS = "SPECPILOT_IMAGE_PULL_SECRETS"
ENV_RUNTIME_IMAGE = "SPECPILOT_RUNTIME_IMAGE"
ENV_LISTEN_ADDRESS = "SPECPILOT_SERVING_LISTEN_ADDRESS"
# Where vLLM listens in a serving pod: every IPv4 address. An IPv6 or IPv6-first dual-stack cluster probes
# and scrapes the pod at its IPv6 address, which needs "::" (on Linux a dual-stack socket: IPv4 too).
DEFAULT_LISTEN_ADDRESS = "0.0.0.0"


@dataclass(frozen=True)
class ServingDefaults:
    """Cluster-wide settings of every serving pod; a SpeculativeDeployment's own fields win."""

    images: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGES))
    image_pull_secrets: tuple[str, ...] = ()
    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    listen_address: str = DEFAULT_LISTEN_ADDRESS


DEFAULT_SERVING = ServingDefaults()


def image_for(vendor: str, override: str | None, defaults: ServingDefaults = DEFAULT_SERVING) -> str:
    """The spec's image when given, otherwise the cluster's default for the vendor."""
    return override or defaults.images[vendor]


def image_reference(text: str) -> str:
    """argparse type of an image reference: printable, no whitespace, at most the CRD's length."""
    if not text or len(text) > MAX_IMAGE_LENGTH or not re.fullmatch(IMAGE_PATTERN, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an image reference like vllm/vllm-openai:v0.33.0")
    return text


def listen_address(text: str) -> str:
    """argparse type of the address vLLM listens on: an IPv4 or IPv6 address, written as vLLM's --host
    takes it."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address (0.0.0.0: every IPv4 address; "
                                         f"'::': every address, for IPv6 clusters)") from None


def secret_name(text: str) -> str:
    """argparse type of an imagePullSecrets name: a DNS subdomain, as Kubernetes requires."""
    if len(text) > MAX_OBJECT_NAME_LENGTH or not re.fullmatch(SECRET_NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Secret name (lower-case DNS subdomain)")
    return text


def _vendor_image(text: str) -> tuple[str, str]:
    vendor, sep, image = text.partition("=")
    if not sep or vendor not in DEFAULT_IMAGES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected VENDOR=IMAGE with VENDOR one of "
                                         f"{', '.join(DEFAULT_IMAGES)}")
    return vendor, image_reference(image)


def add_serving_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """The cluster-wide serving flags; each defaults to its environment variable (the chart sets both)."""
    env = os.environ if env is None else env
    parser.add_argument("--serving-image", action="append", dest="serving_images", default=[],
                        type=_vendor_image, metavar="VENDOR=IMAGE",
                        help=f"serving image for a vendor's pods unless spec.image is set (repeatable; env "
                             f"{ENV_IMAGE.format(vendor='AMD')}, ..._NVIDIA); default: "
                             + ", ".join(f"{v}={i}" for v, i in DEFAULT_IMAGES.items()))
    parser.add_argument("--image-pull-secret", action="append", dest="image_pull_secrets", default=[],
                        type=secret_name, metavar="NAME",
                        help=f"imagePullSecrets of serving pods unless spec.imagePullSecrets is set "
                             f"(repeatable; env {ENV_PULL_SECRETS}, comma-separated)")
    parser.add_argument("--runtime-image", type=image_reference, default=None, metavar="IMAGE",
                        help=f"image the init container copies the runtime from: the operator's own "
                             f"(env {ENV_RUNTIME_IMAGE}; default {DEFAULT_RUNTIME_IMAGE})")
    parser.add_argument("--serving-listen-address", type=listen_address, default=None, metavar="ADDRESS",
                        help=f"address vLLM listens on in serving pods: '::' on an IPv6 or IPv6-first "
                             f"dual-stack cluster (env {ENV_LISTEN_ADDRESS}; default {DEFAULT_LISTEN_ADDRESS}; a "
                             f"change rolls every serving pod)")
    parser.set_defaults(serving_env=dict(env))


def serving_defaults_from(args: argparse.Namespace) -> ServingDefaults:
    """Flags first, then the environment, then the built-in defaults; environment values are checked as
    strictly as flags (SystemExit naming the variable)."""
    env: Mapping[str, str] = args.serving_env
    images = dict(DEFAULT_IMAGES)
    for vendor in DEFAULT_IMAGES:
        value = env.get(ENV_IMAGE.format(vendor=vendor.upper()))
        if value:
            images[vendor] = _checked(image_reference, value, ENV_IMAGE.format(vendor=vendor.upper()))
    images.update(dict(args.serving_images))
    secrets = args.image_pull_secrets or [_checked(secret_name, s.strip(), ENV_PULL_SECRETS)
                                          for s in env.get(ENV_PULL_SECRETS, "").split(",") if s.strip()]
    runtime = args.runtime_image or (_checked(image_reference, env[ENV_RUNTIME_IMAGE], ENV_RUNTIME_IMAGE)
                                     if env.get(ENV_RUNTIME_IMAGE) else DEFAULT_RUNTIME_IMAGE)
    listen = args.serving_listen_address or (
        _checked(listen_address, env[ENV_LISTEN_ADDRESS], ENV_LISTEN_ADDRESS) if env.get(ENV_LISTEN_ADDRESS)
        else DEFAULT_LISTEN_ADDRESS)
    return ServingDefaults(images, tuple(dict.fromkeys(secrets)), runtime, listen)


def _checked(check: Callable[[str], str], value: str, variable: str) -> str:
    try:
        return check(value)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"${variable}: {exc}") from None
