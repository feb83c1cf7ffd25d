"""Decoding of the Kubernetes protobuf bodies kubectl's imperative commands send (`kubectl create
namespace`, `create configmap`, `create secret generic`, `create serviceaccount`). The wire format
needs each type's field numbers; these few types are the ones covered. Everything else is JSON."""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"

# A message schema: field number -> (JSON name, value kind, sub-schema for nested messages).
Schema = dict[int, tuple[str, str, Any]]


def _fields(buf: bytes) -> list[tuple[int, Any]]:
    out, pos = [], 0
    value: int | bytes  # a varint's number, or the bytes of a length-delimited or fixed-width field
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((num, value))
    return out


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _string_map(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for entry in entries:
        kv = dict(_fields(entry))
        out[kv.get(1, b"").decode()] = kv.get(2, b"").decode()
    return out


def _bytes_map(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for entry in entries:
        kv = dict(_fields(entry))
        out[kv.get(1, b"").decode()] = base64.b64encode(kv.get(2, b"")).decode()
    return out


def _message(buf: bytes, schema: Schema) -> dict[str, Any]:
    grouped: dict[int, list[Any]] = {}
    for num, value in _fields(buf):
        grouped.setdefault(num, []).append(value)
    out: dict[str, Any] = {}
    for num, values in grouped.items():
        if num not in schema:
            continue
        name, kind, sub = schema[num]
        if kind == "str":
            out[name] = values[-1].decode()
        elif kind == "strs":
            out[name] = [v.decode() for v in values]
        elif kind == "int":
            out[name] = values[-1]
        elif kind == "bool":
            out[name] = bool(values[-1])
        elif kind == "map":
            out[name] = _string_map(values)
        elif kind == "bytesmap":
            out[name] = _bytes_map(values)
        elif kind == "msg":
            out[name] = _message(values[-1], sub)
        elif kind == "msgs":
            out[name] = [_message(v, sub) for v in values]
    # Go's generated marshallers write empty strings and false; JSON omits them (omitempty).
    return {k: v for k, v in out.items() if v not in ("", False, {}, [])}


OWNER_REF: Schema = {1: ("kind", "str", None), 3: ("name", "str", None), 4: ("uid", "str", None),
             5: ("apiVersion", "str", None), 6: ("controller", "bool", None), 7: ("blockOwnerDeletion", "bool", None)}
OBJECT_META: Schema = {1: ("name", "str", None), 2: ("generateName", "str", None), 3: ("namespace", "str", None),
               11: ("labels", "map", None), 12: ("annotations", "map", None), 13: ("ownerReferences", "msgs", OWNER_REF),
               14: ("finalizers", "strs", None)}
TYPES: dict[str, Schema] = {
    "Namespace": {1: ("metadata", "msg", OBJECT_META), 2: ("spec", "msg", {1: ("finalizers", "strs", None)})},
    "ConfigMap": {1: ("metadata", "msg", OBJECT_META), 2: ("data", "map", None), 3: ("binaryData", "bytesmap", None),
                  4: ("immutable", "bool", None)},
    "Secret": {1: ("metadata", "msg", OBJECT_META), 2: ("data", "bytesmap", None), 3: ("type", "str", None),
               4: ("stringData", "map", None), 5: ("immutable", "bool", None)},
    "ServiceAccount": {1: ("metadata", "msg", OBJECT_META)},
}


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded object as its JSON form; ValueError for types this module does not know."""
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf object (missing k8s magic)")
    unknown = dict(_fields(body[len(MAGIC):]))
    type_meta = dict(_fields(unknown.get(1, b"")))
    api_version, kind = type_meta.get(1, b"").decode(), type_meta.get(2, b"").decode()
    if kind not in TYPES:
        raise ValueError(f"protobuf bodies of kind {kind or 'unknown'} are not supported by the sandbox; "
                         "send JSON (kubectl apply -f / create -f)")
    obj = _message(unknown.get(2, b""), TYPES[kind])
    return {"apiVersion": api_version, "kind": kind, **obj}

