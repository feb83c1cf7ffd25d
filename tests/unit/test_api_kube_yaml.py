"""The YAML specpilot prints for kubectl reads back as written under YAML 1.1 (kubectl's go-yaml v2)."""

from __future__ import annotations

import re

import pytest
import yaml

from specpilot.api import kube_yaml
from specpilot.render.commands import to_yaml


class Yaml11Loader(yaml.SafeLoader):
    """PyYAML's SafeLoader plus what YAML 1.1 (and go-yaml v2) also reads as a bool: y, Y, n, N."""


Yaml11Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
Yaml11Loader.add_constructor("tag:yaml.org,2002:bool", lambda loader, node: loader.construct_scalar(node)
                             in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"))

WORDS = ["y", "yes", "n", "no", "true", "false", "on", "off", "null", "~"]


def _spellings(word: str) -> set[str]:
    return {word, word.upper(), word.capitalize(), word[:-1] + word[-1].upper()}


@pytest.mark.parametrize("word", WORDS)
def test_bool_and_null_words_are_quoted_in_every_case(word: str) -> None:
    for text in _spellings(word):
        dumped = kube_yaml.dump({"name": text})
        assert dumped == f"name: '{text}'\n"
        assert yaml.load(dumped, Loader=Yaml11Loader) == {"name": text}


def test_other_strings_stay_plain_and_multi_line_ones_are_blocks() -> None:
    # Keys too: go-yaml would read a plain `n:` key as false.
    assert kube_yaml.dump({"name": "Method", "n": "No way"}, sort_keys=False) == "name: Method\n'n': No way\n"
    assert kube_yaml.dump({"json": "{\n  \"a\": 1\n}\n"}) == "json: |\n  {\n    \"a\": 1\n  }\n"
    assert kube_yaml.dump({"flag": True, "none": None}, sort_keys=False) == "flag: true\nnone: null\n"


def test_rendered_manifests_keep_user_strings_strings() -> None:
    # `specpilot render`: a nodeSelector value `n` reached the API server as false ("cannot unmarshal bool
    # into ... nodeSelector of type string").
    objects = [{"kind": "Deployment", "spec": {"nodeSelector": {"gpu": "n"}, "env": [{"name": "A", "value": "Y"}]}}]
    text = to_yaml(objects)
    assert "gpu: 'n'" in text and "value: 'Y'" in text
    assert list(yaml.load_all(text, Loader=Yaml11Loader)) == objects
