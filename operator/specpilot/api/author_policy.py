"""What a SpeculativeDeployment's author may obtain through the pods the operator makes for them, beyond what
the CRD allows: the cluster's policy, set by the operator's administrator (`specpilot run` flags, chart values
operator.policy.*). docs/threat-model.md says what each rule protects; validate.py applies them.

- Secrets: a spec may name only Secrets labelled SECRET_OPT_IN_LABEL=true (default), since the pod hands the
  token to whatever hub the process talks to: without the label, anyone who may create SpeculativeDeployments
  could read any Secret of the namespace.
- Environment: RESERVED_ENV names change what code the engine loads or where it sends credentials; refused
  unless the policy allows the name.
- Images: with allowed registries set, spec.image must come from one of them.
- Security: AMD's recommended profile (SYS_PTRACE, seccomp Unconfined) only where the policy grants it.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Literal

from specpilot_runtime.speculative import Problem

SECRET_OPT_IN_LABEL = "specpilot.io/allow-reference"
SecretRefs = Literal["labelled", "any"]

# Loader and interpreter hooks (code of the author's choosing runs in the engine), and where the model hub
# client sends the HF token or which CA it trusts (the token goes to the author's server).
LOADER_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
              "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONBREAKPOINT", "VLLM_PLUGINS")
HUB_ENV = ("HF_ENDPOINT", "HF_HUB_ENDPOINT", "HUGGINGFACE_CO_URL_HOME", "HF_TOKEN_PATH", "HF_HOME",
           "MODELSCOPE_DOMAIN", "MODELSCOPE_ENDPOINT", "VLLM_USE_MODELSCOPE", "HTTP_PROXY", "HTTPS_PROXY",
           "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE",
           "SSL_CERT_DIR", "CURL_CA_BUNDLE")
RESERVED_ENV = LOADER_ENV + HUB_ENV
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
# A registry host[:port] with an optional path prefix: docker.io/vllm, registry.example.com:5000/team.
REGISTRY_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([-._a-z0-9]*[a-z0-9])?)*")
DOCKER_HUB = "docker.io"


@dataclass(frozen=True)
class AuthorPolicy:
    secret_refs: SecretRefs = "labelled"
    allowed_env: tuple[str, ...] = ()          # names of RESERVED_ENV the cluster allows
    allowed_registries: tuple[str, ...] = ()   # empty: any registry
    allow_unconfined: bool = False             # AMD's SYS_PTRACE and seccomp Unconfined


def _env_name(text: str) -> str:
    if text not in RESERVED_ENV:
        raise argparse.ArgumentTypeError(f"{text!r} is not a reserved variable; reserved: {', '.join(RESERVED_ENV)}")
    return text


def _registry(text: str) -> str:
    if len(text) > 255 or not REGISTRY_PREFIX.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a registry like registry.example.com or docker.io/vllm")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--secret-references", dest="secret_refs", choices=("labelled", "any"), default="labelled",
                        help=f"which Secrets spec.engine.hfTokenSecretRef may name: labelled (default: only Secrets "
                             f"labelled {SECRET_OPT_IN_LABEL}=true) or any Secret of the namespace")
    parser.add_argument("--allow-env", action="append", dest="allowed_env", default=[], type=_env_name,
                        metavar="NAME", help="allow the reserved variable NAME in spec.engine.env (repeatable); "
                                             f"reserved: {', '.join(RESERVED_ENV)}")
    parser.add_argument("--allow-registry", action="append", dest="allowed_registries", default=[], type=_registry,
                        metavar="PREFIX", help="allow spec.image only from PREFIX (registry host[:port][/path], "
                                               "repeatable); default: any registry")
    parser.add_argument("--allow-unconfined", action="store_true",
                        help="allow accelerator.securityProfile recommended on AMD (SYS_PTRACE, seccomp Unconfined, "
                             "AMD's ROCm guidance); default: refused")


def from_args(args: argparse.Namespace) -> AuthorPolicy:
    return AuthorPolicy(secret_refs=args.secret_refs, allowed_env=tuple(args.allowed_env),
                        allowed_registries=tuple(args.allowed_registries), allow_unconfined=args.allow_unconfined)


def image_registry_path(image: str) -> str:
    """`image` as host/path without tag or digest (docker.io for an image without a registry host)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1]) + last[-1].index(":")]
    first = name.split("/", 1)[0]
    if "." in first or ":" in first or first == "localhost":
        return name
    return f"{DOCKER_HUB}/{name}" if "/" in name else f"{DOCKER_HUB}/library/{name}"


def registry_allowed(image: str, prefixes: tuple[str, ...]) -> bool:
    full = image_registry_path(image)
    return not prefixes or any(full == p or full.startswith(p.rstrip("/") + "/") for p in prefixes)


def problems(env_names: list[str], image: str | None, vendor: str, profile: str,
             policy: AuthorPolicy) -> list[Problem]:
    """What the policy refuses in a spec (Secrets are checked against the cluster, by secret_problem)."""
    found = [Problem(f"spec.engine.env[{i}].name",
                     f"{name} is reserved (it changes what code the engine loads or where it sends credentials); "
                     "the operator allows it only with --allow-env (chart value operator.policy.allowedEnv)")
             for i, name in enumerate(env_names) if name in RESERVED_ENV and name not in policy.allowed_env]
    if image is not None and not registry_allowed(image, policy.allowed_registries):
        found.append(Problem("spec.image", f"{image_registry_path(image)} is not from a registry this operator allows "
                                           f"({', '.join(policy.allowed_registries)})"))
    if vendor == "amd" and profile == "recommended" and not policy.allow_unconfined:
        found.append(Problem("spec.accelerator.securityProfile",
                             "recommended adds SYS_PTRACE and seccomp Unconfined (AMD's ROCm guidance), which this "
                             "operator does not grant (--allow-unconfined, chart value operator.policy.allowUnconfined)"
                             ": use baseline (vLLM runs without them) or restricted"))
    return found


def secret_problem(name: str, labels: dict[str, str] | None, policy: AuthorPolicy) -> Problem | None:
    """A Secret named by spec.engine.hfTokenSecretRef, with its labels (None: it does not exist)."""
    where = "spec.engine.hfTokenSecretRef.name"
    if policy.secret_refs == "any":
        return None
    if labels is None:
        return Problem(where, f"Secret {name} does not exist (or the operator cannot read its labels)")
    if labels.get(SECRET_OPT_IN_LABEL) != "true":
        return Problem(where, f"Secret {name} is not labelled {SECRET_OPT_IN_LABEL}=true: its owner must opt in "
                              "before a SpeculativeDeployment may hand it to a pod")
    return None
