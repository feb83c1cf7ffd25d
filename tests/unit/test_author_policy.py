"""What a SpeculativeDeployment's author may obtain is the cluster's policy: reserved environment variables,
image registries, AMD's unconfined profile and Secrets are refused unless the operator's flags allow them, by
`validate` and by the operator alike (docs/threat-model.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpilot.api.author_policy import RESERVED_ENV, AuthorPolicy, image_registry_path
from specpilot.api.validate import Policy, validate_object
from specpilot.cli import build_parser, main

from test_reconcile_child_cache import FakeApi, _reconciler, _sd


def sd(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "q"},
            "spec": {"model": "m", "speculative": {"method": "ngram", "numSpeculativeTokens": 3}, **spec}}


def problems(obj: dict[str, Any], policy: Policy = Policy()) -> dict[str, str]:
    return {p.path: p.message for p in validate_object(obj, policy)}


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "VLLM_PLUGINS",
                                  "HF_ENDPOINT", "HTTPS_PROXY", "REQUESTS_CA_BUNDLE"])
def test_reserved_env_is_refused_unless_the_policy_allows_it(name: str) -> None:
    obj = sd(engine={"env": [{"name": "OK", "value": "1"}, {"name": name, "value": "http://attacker.example"}]})
    assert "is reserved" in problems(obj)["spec.engine.env[1].name"]
    assert problems(obj, Policy(author=AuthorPolicy(allowed_env=(name,)))) == {}


def test_images_come_from_allowed_registries_when_the_policy_names_them() -> None:
    assert image_registry_path("vllm/vllm-openai:v0.33.0") == "docker.io/vllm/vllm-openai"
    assert image_registry_path("ubuntu") == "docker.io/library/ubuntu"
    assert image_registry_path("reg.example.com:5000/team/vllm@sha256:" + "a" * 64) == "reg.example.com:5000/team/vllm"
    policy = Policy(author=AuthorPolicy(allowed_registries=("reg.example.com:5000/team", "docker.io/vllm")))
    assert problems(sd(image="reg.example.com:5000/team/vllm:1"), policy) == {}
    assert problems(sd(image="vllm/vllm-openai:v0.33.0"), policy) == {}
    assert "not from a registry" in problems(sd(image="reg.example.com:5000/teamx/vllm:1"), policy)["spec.image"]
    assert "not from a registry" in problems(sd(image="attacker.example/vllm:1"), policy)["spec.image"]
    assert problems(sd(image="attacker.example/vllm:1")) == {}  # no list: any registry


def test_amds_unconfined_profile_needs_the_grant_and_the_default_has_none() -> None:
    recommended = sd(accelerator={"vendor": "amd", "securityProfile": "recommended"})
    assert "SYS_PTRACE" in problems(recommended)["spec.accelerator.securityProfile"]
    assert problems(recommended, Policy(author=AuthorPolicy(allow_unconfined=True))) == {}
    assert problems(sd(accelerator={"vendor": "nvidia", "securityProfile": "recommended"})) == {}  # adds nothing
    assert problems(sd()) == {}  # the default profile is baseline


def test_the_flags_reach_run_validate_and_render_and_help_lists_what_is_reserved(capsys: Any) -> None:
    for command in ("run", "validate", "render"):
        extra = [] if command == "run" else ["-f", "x.yaml"]
        args = build_parser().parse_args([command, *extra, "--allow-env", "HF_ENDPOINT", "--allow-registry",
                                          "docker.io/vllm", "--allow-unconfined", "--secret-references", "any"])
        assert (args.allowed_env, args.allowed_registries, args.allow_unconfined, args.secret_refs) == \
            (["HF_ENDPOINT"], ["docker.io/vllm"], True, "any")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--allow-env", "PATH"])  # not a reserved name: nothing to allow
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out for name in RESERVED_ENV)


class WithSecrets(FakeApi):
    secrets: dict[str, dict[str, str]] = {}

    def labels_of(self, path: str) -> dict[str, str] | None:
        self.calls.append("labels")
        return self.secrets.get(path.rsplit("/", 1)[1])


@pytest.mark.parametrize(("secrets", "refused"), [
    ({"hf": {"specpilot.io/allow-reference": "true"}}, None),
    ({"hf": {"app": "shop"}}, "is not labelled specpilot.io/allow-reference=true"),
    ({}, "does not exist"),
])
def test_a_secret_is_handed_to_pods_only_when_its_owner_opted_in(secrets: dict[str, Any], refused: str | None) -> None:
    obj = _sd()
    obj["spec"]["engine"] = {"hfTokenSecretRef": {"name": "hf"}}
    api = WithSecrets(obj)
    api.secrets = secrets
    result = _reconciler(api).reconcile("team", "chat")
    if refused is None:
        assert result == "applied" and ("Deployment", "chat") in api.children
        return
    assert result == "invalid" and api.children == {}
    valid = {c["type"]: c for c in api.sd["status"]["conditions"]}["SpecValid"]
    assert valid["status"] == "False" and "spec.engine.hfTokenSecretRef.name" in valid["message"]
    assert refused in valid["message"]


def test_the_charts_values_schema_lists_exactly_the_reserved_names() -> None:
    schema = json.loads((Path(__file__).parents[2] / "charts/specpilot/values.schema.json").read_text())
    policy = schema["properties"]["operator"]["properties"]["policy"]["properties"]
    assert tuple(policy["allowedEnv"]["items"]["enum"]) == RESERVED_ENV
