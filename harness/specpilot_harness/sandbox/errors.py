"""API errors in the shape of a Kubernetes `Status`, which kubectl, Kopf and the client all parse."""

from __future__ import annotations

from typing import Any

from specpilot_harness.sandbox.resources import ResourceType


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def _gr(rtype: ResourceType) -> str:
    return f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_gr(rtype)} "{name}" not found',
                    {"name": name, "group": rtype.group, "kind": rtype.plural})


def namespace_not_found(name: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{name}" not found', {"name": name, "kind": "namespaces"})


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_gr(rtype)} "{name}" already exists',
                    {"name": name, "group": rtype.group, "kind": rtype.plural})


def conflict(rtype: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_gr(rtype)} "{name}": {why}',
                    {"name": name, "group": rtype.group, "kind": rtype.plural})


def invalid(rtype: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid, one cause per (field path, message), formatted as the real server does."""
    text = "; ".join(f"{field}: {msg}" if field else msg for field, msg in causes)
    return ApiError(422, "Invalid", f'{rtype.kind}.{rtype.group or "core"} "{name}" is invalid: [{text}]'
                    if len(causes) > 1 else f'{rtype.kind}.{rtype.group or "core"} "{name}" is invalid: {text}',
                    {"name": name, "group": rtype.group, "kind": rtype.kind,
                     "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes]})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)
