"""Read Kubernetes objects from YAML files (multi-document; `-` is stdin) for the CLI commands.

Files come from users and from wherever a pipeline found them, so reading is bounded: size, UTF-8,
nesting depth, what aliases expand to, and the number of documents. A file past any bound is one
`FILE: -: problem` line, never a traceback or a minute of work.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import yaml
from yaml._yaml import CParser  # libyaml's event parser (PyYAML's wheels ship it): several times faster
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode
from yaml.resolver import Resolver

# A SpeculativeDeployment is about 1 KiB and the whole plain install manifest about 100 KiB.
MAX_FILE_BYTES = 512 * 1024
MAX_DOCUMENTS = 1000
# Kubernetes objects nest a dozen levels at most.
MAX_DEPTH = 64
# Nodes of one document with every alias expanded: a 700-byte alias bomb expands to billions.
MAX_NODES = 100_000


class LimitExceeded(yaml.YAMLError):
    """A document is past one of the bounds above."""


class _BoundedLoader(Composer, CParser, SafeConstructor, Resolver):
    """SafeLoader's behaviour, with the composer (pure Python, so it can count) checking depth and the
    expanded size of every node as it builds it."""

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its size with aliases expanded

    def compose_document(self) -> Node | None:
        self._sizes = {}
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            node = self.anchors.get(cast(AliasEvent, self.peek_event()).anchor)
            if node is not None and id(node) not in self._sizes:
                raise LimitExceeded("an alias refers to a node that contains it (a recursive structure)")
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise LimitExceeded(f"nested deeper than {MAX_DEPTH} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) not in self._sizes:
            self._sizes[id(node)] = 1 + sum(self._sizes[id(child)] for child in _children(node))
            if self._sizes[id(node)] > MAX_NODES:
                raise LimitExceeded(f"expands to more than {MAX_NODES} values (aliases repeat what they refer to)")
        return node


def _children(node: Node | None) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


@dataclass(frozen=True)
class Document:
    """One YAML document: where it came from and what it holds (or why it could not be read)."""

    file: str
    index: int  # 1-based position in the file
    obj: Any = None
    error: str | None = None

    @property
    def name(self) -> str:
        """metadata.name, or the document's position when it has none."""
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        if isinstance(meta, dict) and meta.get("name"):
            return str(meta["name"])
        return f"document {self.index}"


def problem_line(doc: Document, path: str, message: str) -> str:
    """`FILE: NAME: field: message`, the one-line form every CLI command prints."""
    return f"{doc.file}: {doc.name}: {path or '(object)'}: {message}"


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _read_bytes(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    with open(path, "rb") as fh:
        return fh.read(MAX_FILE_BYTES + 1)


def parse(data: bytes) -> list[Any]:
    """The non-empty documents of a file's bytes; raises ValueError saying why they cannot be read."""
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES // 1024} KiB; a SpeculativeDeployment is about 1 KiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})") from None
    loader = _BoundedLoader(text)
    docs: list[Any] = []
    try:
        while loader.check_data():
            obj = loader.get_data()
            if obj is not None:
                docs.append(obj)
            if len(docs) > MAX_DOCUMENTS:
                raise LimitExceeded(f"more than {MAX_DOCUMENTS} documents")
    except LimitExceeded as err:
        raise ValueError(f"refused: {err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"not valid YAML: {_one_line(str(err))}") from None
    finally:
        loader.dispose()
    return docs


def read(path: str) -> Iterator[Document]:
    """Every non-empty document of one file; a file that cannot be read or parsed yields one error."""
    try:
        docs = parse(_read_bytes(path))
    except OSError as err:
        yield Document(path, 0, error=f"cannot read: {err.strerror}")
        return
    except ValueError as err:
        yield Document(path, 0, error=str(err))
        return
    for i, obj in enumerate(docs, start=1):
        yield Document(path, i, obj=obj)
