"""YAML that kubectl reads back as it was meant: the dumper for every manifest specpilot prints.

kubectl (sigs.k8s.io/yaml, go-yaml v2) reads YAML 1.1, where a plain `N`, `y`, `off` or `~` is a bool or a
null. PyYAML's SafeDumper quotes most of those words but not `y`/`Y`/`n`/`N`, so a printer column named
`N` reached the API server as `false` ("cannot unmarshal bool into ... name of type string"). `Dumper`
quotes every string a YAML 1.1 reader would take for a bool or a null, in any letter case, and writes
multi-line strings as `|` blocks.
"""

from __future__ import annotations

from typing import Any

import yaml

# YAML 1.1's bool and null words (https://yaml.org/type/bool.html, https://yaml.org/type/null.html),
# compared lower-cased: quoting a spelling no reader resolves costs two characters, missing one a manifest.
YAML11_WORDS = frozenset({"y", "yes", "n", "no", "true", "false", "on", "off", "null", "~", ""})


def needs_quotes(text: str) -> bool:
    """True when a plain scalar `text` would not read back as a string in YAML 1.1."""
    return text.lower() in YAML11_WORDS


class Dumper(yaml.SafeDumper):
    """SafeDumper that quotes YAML 1.1's bool/null words and writes multi-line strings as `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    if "\n" in text:
        style: str | None = "|"
    elif needs_quotes(text):
        style = "'"
    else:
        style = None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


Dumper.add_representer(str, _represent_str)


def dump(document: Any, **options: Any) -> str:
    """One YAML document, as kubectl will read it."""
    return yaml.dump(document, Dumper=Dumper, **options)


def dump_all(documents: list[Any], **options: Any) -> str:
    """Several `---`-separated YAML documents, as kubectl will read them."""
    return yaml.dump_all(documents, Dumper=Dumper, **options)
