"""Reading a small file someone else wrote (engine.json, a checkpoint's config.json) without trusting it.

`--config /dev/zero` read until MemoryError, a FIFO blocked forever waiting for a writer, a 100 MB file was
read whole; 200,000 nested brackets raised RecursionError out of the JSON parser. Here the file is opened
without blocking, must be a regular file, is read up to a byte bound, and its JSON up to a depth bound;
everything else is a `FileProblem` saying what is wrong and what is allowed, in one line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
_CHUNK = 1 << 20


class FileProblem(ValueError):
    """The file is there but is not what may be read: `kind` is "not_regular", "too_large", "not_utf8",
    "not_json" or "too_deep"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def kib(size: int) -> str:
    return f"{size // 1024} KiB"


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them.

    Raises OSError when it cannot be opened or read (the caller words strerror), FileProblem when it is not
    a regular file (a directory, a device, a FIFO: opened without blocking, never read) or holds more than
    `limit` bytes (at most `limit` + 1 are read to find out, whatever its size says)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd)
        if not stat.S_ISREG(mode.st_mode):
            kind = _KINDS.get(stat.S_IFMT(mode.st_mode), "not a regular file")
            raise FileProblem("not_regular", f"is {kind}, not a regular file")
        if mode.st_size > limit:
            raise FileProblem("too_large", f"is larger than {kib(limit)} ({mode.st_size} bytes)")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # grew since fstat, or a file system that does not report sizes
            raise FileProblem("too_large", f"is larger than {kib(limit)}")
        return b"".join(chunks)
    finally:
        os.close(fd)


def depth(value: Any) -> int:
    """How deeply `value` (parsed JSON) nests: 0 for a scalar, 1 for a flat list or object. Iterative, so any
    depth the parser produced is measured without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            level += 1
            deepest = max(deepest, level)
            stack.extend((child, level) for child in item if isinstance(child, (dict, list)))
    return deepest


def _no_constant(name: str) -> Any:
    raise FileProblem("not_json", f"holds {name}, which is not a JSON number (every number must be finite)")


def parse_json(data: bytes, max_depth: int, finite: bool = False) -> Any:
    """JSON text (UTF-8) nested at most `max_depth` levels; FileProblem saying why not. With `finite`, Python's
    extensions NaN, Infinity and -Infinity are refused too."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FileProblem("not_utf8", f"is not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant) if finite else json.loads(text)
    except FileProblem:
        raise
    except RecursionError:  # deeper than the parser's stack: far past max_depth
        raise FileProblem("too_deep", f"is nested deeper than {max_depth} levels") from None
    except ValueError as err:
        raise FileProblem("not_json", f"is not JSON: {err}") from None
    if depth(value) > max_depth:
        raise FileProblem("too_deep", f"is nested deeper than {max_depth} levels")
    return value
