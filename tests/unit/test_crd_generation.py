"""The generated CRD: checked-in copy, structure kubectl and the API server rely on, CEL that compiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import yaml

from specpilot.api.cel import evaluate
from specpilot.api.crd import crd, crd_yaml, open_api_schema
from specpilot.api.rules import max_n_expression, number_text
from specpilot.cli import main
from specpilot_runtime.speculative import METHODS, REMOVED_METHODS, max_n

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = ROOT / "crds" / "specpilot.io_speculativedeployments.yaml"
K8S_VERSION = "1.37.0"


def _nodes(node: dict[str, Any], path: str = ""):
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}" if path else name)
    if "items" in node:
        yield from _nodes(node["items"], path + "[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], path + "{}")


def test_checked_in_crd_matches_generator() -> None:
    assert CHECKED_IN.read_text() == crd_yaml(), "crds/ is stale: run `make crd`"


def test_crd_command_prints_the_checked_in_file(capsys) -> None:
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == CHECKED_IN.read_text()


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(crd(), K8S_VERSION, strict=True)


def test_every_field_has_a_type_and_description() -> None:
    for path, node in _nodes(open_api_schema()):
        if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
            continue
        assert node.get("type"), f"{path} has no type"
        if path and not path.endswith(("[]", "{}")) and path != "metadata":
            assert node.get("description"), f"{path} has no description"


def test_root_metadata_only_restricts_the_name() -> None:
    # The API server refuses anything else there, a description included ("must not specify anything other
    # than name and generateName").
    metadata = open_api_schema()["properties"]["metadata"]
    assert set(metadata) == {"type", "properties"} and set(metadata["properties"]) == {"name"}
    assert set(metadata["properties"]["name"]) <= {"type", "maxLength", "pattern", "description"}


def test_free_form_fields_are_only_where_the_models_pass_values_through() -> None:
    free = {path for path, node in _nodes(open_api_schema()) if node.get("x-kubernetes-preserve-unknown-fields")}
    assert free == {"spec.speculative.extra", "spec.tuning.alternatives[].extra", "spec.engine.resources",
                    "spec.engine.tolerations[]", "status.tuning", "status.tournament"}


def test_enums_bounds_and_defaults() -> None:
    spec = open_api_schema()["properties"]["spec"]["properties"]
    method = spec["speculative"]["properties"]["method"]
    assert method["enum"] == list(METHODS)
    assert not set(REMOVED_METHODS) & set(method["enum"])
    assert spec["accelerator"]["properties"]["vendor"]["enum"] == ["amd", "nvidia"]
    assert spec["replicas"]["minimum"] == 0
    assert spec["tuning"]["properties"]["canary"]["properties"]["analysisWindow"]["default"] == "5m"
    confidence = spec["tuning"]["properties"]["confidence"]
    assert confidence["maximum"] == 1.0 and confidence["exclusiveMaximum"] is True
    # Nested sections default to {} so the API server fills in their own defaults.
    assert spec["tuning"]["default"] == {} and spec["accelerator"]["default"] == {}
    assert "default" not in spec["engine"]["properties"]["modelCache"]


def test_names_columns_and_status_subresource() -> None:
    version = crd()["spec"]["versions"][0]
    assert crd()["spec"]["names"]["shortNames"] == ["sd", "specdeploy"]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "Method", "N", "Ready", "Phase", "Accepted length", "Schedule", "Age"]
    assert [c["name"] for c in columns if c.get("priority") == 1] == ["Replicas", "Started N", "Arms", "Canary N", "Tuning"]


def test_every_cel_rule_compiles_and_every_list_it_reads_is_bounded() -> None:
    env = celpy.Environment()
    rules = 0
    for path, node in _nodes(open_api_schema()):
        for rule in node.get("x-kubernetes-validations", ()):
            env.compile(rule["rule"])
            assert rule["message"], f"rule at {path} has no message"
            rules += 1
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path} is unbounded"
    assert rules >= 14


def test_crd_yaml_parses_back_to_the_object() -> None:
    assert yaml.safe_load(crd_yaml()) == crd()


def test_crd_yaml_quotes_what_yaml_1_1_reads_as_a_bool() -> None:
    # kubectl reads YAML 1.1: a plain `name: N` is false, and the API server refused the CRD for it.
    assert "- name: 'N'\n" in crd_yaml()
    assert "- name: N\n" not in crd_yaml()


def test_every_rule_holds_on_the_empty_default_of_its_section() -> None:
    # The API server checks a section's `{}` default against its rules as it is (before the fields' own
    # defaults fill it): a rule reading a field without has() fails there with "no such key".
    checked = 0
    for path, node in _nodes(open_api_schema()):
        if node.get("default") != {}:
            continue
        for rule in node.get("x-kubernetes-validations", ()):
            assert evaluate(rule["rule"], {}), f"{path}: {rule['rule']} fails on the default {{}}"
            checked += 1
    assert checked >= 2


def test_message_expressions_convert_no_number_with_string() -> None:
    # string(int) has no size bound in the API server's cost estimate: every concatenation after it is
    # estimated at the largest request, >100x the budget, and the server refuses the CRD.
    for path, node in _nodes(open_api_schema()):
        for rule in node.get("x-kubernetes-validations", ()):
            assert "string(" not in rule.get("messageExpression", ""), path


def test_number_text_spells_every_limit() -> None:
    for n in (0, 7, 32, 64):
        assert evaluate(f"{number_text(str(n))} == '{n}'", {})


def test_cel_limit_on_n_equals_the_runtime_rule_for_every_method_and_block_size() -> None:
    # Read from the spec (spec.speculative) and from the speculative object itself (an alternative).
    on_spec, on_item = max_n_expression("self.speculative"), max_n_expression("self")
    for method in METHODS:
        for block in (None, 4, 8, 16, 32):
            speculative: dict[str, Any] = {"method": method}
            if block is not None:
                speculative["blockSize"] = block
            limit = max_n(method, block)
            assert evaluate(f"({on_spec}) == {limit}", {"speculative": speculative}), (method, block, limit)
            assert evaluate(f"({on_item}) == {limit}", speculative), (method, block, limit)


def test_draft_model_rules_list_the_methods_speculative_py_names() -> None:
    rules = open_api_schema()["properties"]["spec"]["properties"]["speculative"]["x-kubernetes-validations"]
    required = sorted(m for m, r in METHODS.items() if r.draft_model == "required")
    forbidden = sorted(m for m, r in METHODS.items() if r.draft_model == "forbidden")
    texts = [r["rule"] for r in rules]
    assert f"!(self.method in {required!r}) || has(self.draftModel)".replace('"', "'") in texts
    assert f"!(self.method in {forbidden!r}) || !has(self.draftModel)".replace('"', "'") in texts
