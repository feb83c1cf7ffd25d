"""Read Kubernetes objects from YAML files (multi-document; `-` is stdin) for the CLI commands."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml


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


def read(path: str) -> Iterator[Document]:
    """Every non-empty document of one file; a file that cannot be read or parsed yields one error."""
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as err:
        yield Document(path, 0, error=f"cannot read: {err.strerror}")
        return
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        yield Document(path, 0, error=f"not valid YAML: {err}")
        return
    for i, obj in enumerate(docs, start=1):
        yield Document(path, i, obj=obj)
