"""The SpeculativeDeployment CRD on a real kube-apiserver: it applies as generated (crds/), and the server then
judges objects as `specpilot validate` does. Every example is accepted, with the defaults validate fills in;
every invalid sample validate refuses is refused by the server too, on the same field where the CRD can
express the rule. The one rule CEL cannot express (the length of `extra`'s keys) is validate's alone."""

from __future__ import annotations

import importlib.util
import json
import time
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from specpilot.api.admission import admit, defaulted
from specpilot.api.crd import crd
from specpilot.api.rules import MAX_EXTRA_KEY_LENGTH
from specpilot.api.validate import crd_schema, validate_object
from specpilot_harness.controlplane import ControlPlane, binaries
from test_controlplane import BUILD_TIMEOUT_S, CRD, REPO, kubectl

NAMESPACE = "judged"
EXAMPLES = sorted((REPO / "deploy" / "examples").glob("*.yaml"))
CRD_NAME = crd()["metadata"]["name"]


def _unit_module(name: str) -> ModuleType:
    """A module of tests/unit (the samples the offline CEL tests use), whether or not pytest imported it."""
    path = REPO / "tests" / "unit" / f"{name}.py"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(str(loaded.__file__)).resolve() == path:
        return loaded
    spec = importlib.util.spec_from_file_location(f"unit_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CEL_SAMPLES = _unit_module("test_api_cel_rules")
sd = CEL_SAMPLES.sd
MTP = {"method": "mtp", "numSpeculativeTokens": 3}


def named(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {"name": name}}


# (id, object) refused by `specpilot validate`: tests/unit/test_api_cel_rules.py's BAD samples, then more.
INVALID: list[tuple[str, dict[str, Any]]] = [(b[0], b[1]) for b in CEL_SAMPLES.BAD] + [
    ("name-canary", named("chat-canary", sd(MTP))),
    ("name-stable", named("chat-stable", sd(MTP))),
    ("name-upper-case", named("Chat", sd(MTP))),
    ("name-too-long", named("a" * 50, sd(MTP))),
    ("method-unknown", sd({"method": "lookahead", "numSpeculativeTokens": 3})),
    ("method-removed", sd({"method": "medusa", "numSpeculativeTokens": 3})),
    ("n-above-32", sd({"method": "mtp", "numSpeculativeTokens": 33})),
    ("n-above-dspark-block", sd({"method": "dspark", "numSpeculativeTokens": 9, "blockSize": 8})),
    ("n-above-dflash-default-block", sd({"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 16})),
    ("schedule-start", sd({"method": "mtp", "numSpeculativeTokens": 3,
                           "schedule": [{"minBatchSize": 2, "maxBatchSize": 4, "numSpeculativeTokens": 1}]})),
    ("window-short", sd(MTP, tuning={"canary": {"analysisWindow": "1s"}})),
    ("mount-reserved", sd(MTP, engine={"modelCache": {"claimName": "hf", "mountPath": "/etc/specpilot/hf"}})),
    ("mount-dots", sd(MTP, engine={"modelCache": {"claimName": "hf", "mountPath": "/data/../etc"}})),
    ("host-path-baseline", sd(MTP, engine={"modelCache": {"hostPath": "/data/hf"}})),
    ("replace-one-replica", sd(MTP, tuning={"enabled": True, "canary": {"mode": "replace"}})),
    ("suffix-without-image", sd({"method": "suffix", "numSpeculativeTokens": 3})),
    ("alternative-draft-required", sd(MTP, tuning={"alternatives": [{"method": "eagle3", "numSpeculativeTokens": 3}]})),
    ("alternative-candidate", sd(MTP, tuning={"alternatives": [
        {"method": "dflash", "draftModel": "d", "numSpeculativeTokens": 7, "blockSize": 8, "candidates": [3, 8]}]})),
    ("alternative-suffix", sd(MTP, tuning={"alternatives": [{"method": "suffix", "numSpeculativeTokens": 3}]})),
    ("unknown-field", sd(MTP, replica=2)),
]

# Refused by validate only: rules CEL cannot express, kept in validate.py (the operator runs it too).
VALIDATE_ONLY: list[tuple[str, dict[str, Any], str]] = [
    ("extra-key-long", sd({**MTP, "extra": {"k" * (MAX_EXTRA_KEY_LENGTH + 1): 1}}), "spec.speculative.extra"),
    ("alternative-extra-key-long",
     sd(MTP, tuning={"alternatives": [{"method": "ngram", "numSpeculativeTokens": 3,
                                       "extra": {"k" * (MAX_EXTRA_KEY_LENGTH + 1): 1}}]}),
     "spec.tuning.alternatives[0].extra"),
]


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    bin_dir = binaries()
    with ControlPlane.start(tmp_path_factory.mktemp("crd-apiserver"), bin_dir) as plane:
        yield plane.admin_kubeconfig


@pytest.fixture(scope="module")
def applied(admin: Path) -> Path:
    """The CRD applied as checked in, Established, and a namespace to judge objects in."""
    # Each step until it succeeds: a just-started kube-apiserver on a loaded machine may still answer 429
    # ("storage is (re)initializing") or time out for a few seconds after its /readyz.
    for args in (("apply", "-f", str(CRD)), ("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s"),
                 ("apply", "-f", "-")):
        stdin = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}) \
            if args[-1] == "-" else None
        deadline = time.monotonic() + 60
        while (done := kubectl(admin, *args, stdin=stdin, check=False)).returncode != 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
            time.sleep(1)
    return admin


def server_apply(kubeconfig: Path, obj: dict[str, Any]) -> tuple[bool, str]:
    """(accepted, the object as the server would store it as JSON, or its refusal) for a server-side dry run."""
    done = kubectl(kubeconfig, "apply", "--dry-run=server", "-n", NAMESPACE, "-o", "json", "-f", "-",
                   stdin=json.dumps(obj), check=False)
    return done.returncode == 0, done.stdout if done.returncode == 0 else done.stderr.strip()


@pytest.mark.timeout(BUILD_TIMEOUT_S)
def test_the_crd_applies_as_generated(applied: Path) -> None:
    stored = json.loads(kubectl(applied, "get", f"crd/{CRD_NAME}", "-o", "json").stdout)
    assert stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == crd_schema()
    columns = [c["name"] for c in stored["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns[:2] == ["Method", "N"]  # `N` quoted in the YAML: unquoted, kubectl read it as false


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_is_accepted_with_the_defaults_validate_fills_in(applied: Path, example: Path) -> None:
    obj = yaml.safe_load(example.read_text())
    assert validate_object(obj) == []
    accepted, stored = server_apply(applied, obj)
    assert accepted, stored
    served = json.loads(stored)
    assert served["spec"] == defaulted(crd_schema(), obj)["spec"]
    assert validate_object(served) == []  # an object read back validates as the file it came from


@pytest.mark.parametrize("obj", CEL_SAMPLES.GOOD, ids=[f"good-{i}" for i in range(len(CEL_SAMPLES.GOOD))])
def test_what_the_offline_cel_admits_the_server_admits(applied: Path, obj: dict[str, Any]) -> None:
    assert admit(crd_schema(), obj) == []
    accepted, stored = server_apply(applied, obj)
    assert accepted, stored


def _lists(path: str) -> list[str]:
    """The lists `path` names an item of, innermost first: spec.a[0].b[1] -> spec.a[0].b, spec.a."""
    return [path[:m.start()] for m in reversed(list(re.finditer(r"\[\d+\]", path)))]


def _named(path: str, message: str) -> bool:
    return re.search(re.escape(path) + r"[:\"]", message) is not None


def _match(paths: list[str], message: str) -> str:
    """How the server's refusal names what validate named: `path` (a validate path verbatim), `list` (the list
    validate names an item of: spec.tuning.candidates[1] against spec.tuning.candidates), `field` (the field's
    name only), or `` (none)."""
    if any(_named(p, message) for p in paths):
        return "path"
    if any(_named(lst, message) for p in paths for lst in _lists(p)):
        return "list"
    if any(re.sub(r"\[\d+\]", "", p).rsplit(".", 1)[-1] in message for p in paths):
        return "field"
    return ""


def _line(paths: list[str], message: str) -> str:
    """The line of a refusal naming one of `paths` (or a list they are items of), else its first line."""
    lines = [line.lstrip("* ").strip() for line in message.splitlines()]
    named = [line for line in lines if any(_named(p, line) or any(_named(lst, line) for lst in _lists(p))
                                           for p in paths)]
    return (named or lines)[0]


def test_what_validate_refuses_the_server_refuses_on_the_same_field(applied: Path) -> None:
    pairs, wrong = [], []
    for name, obj in INVALID:
        paths = [p.path for p in validate_object(obj)]
        accepted, message = server_apply(applied, obj)
        how = _match(paths, message) if not accepted else ""
        pairs.append((name, how, paths, message))
        if not paths or accepted or not how:
            wrong.append(f"{name}: validate {paths}; server {'accepted' if accepted else message}")
    print("\nvalidate's paths vs the server's refusal:")
    for name, how, paths, message in pairs:
        print(f"  {name:30} {how:5} {', '.join(dict.fromkeys(paths))}  <>  {_line(paths, message)[:150]}")
    assert not wrong, "\n".join(wrong)
    # Named on the same path, or on the same list where validate names the item: never only by the name.
    assert {how for _, how, _, _ in pairs} <= {"path", "list"}


@pytest.mark.parametrize(("obj", "path"), [v[1:] for v in VALIDATE_ONLY], ids=[v[0] for v in VALIDATE_ONLY])
def test_rules_cel_cannot_express_are_validates_alone(applied: Path, obj: dict[str, Any], path: str) -> None:
    assert path in [p.path for p in validate_object(obj)]
    accepted, stored = server_apply(applied, obj)
    assert accepted, "the server enforces it now: move the rule back to rules.py and this sample to INVALID"
