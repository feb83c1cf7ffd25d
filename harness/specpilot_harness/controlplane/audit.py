"""kube-apiserver's audit log, for tests that must know which requests an identity really made and what the
server answered (tests/chart/rbac_audit.py: the chart's RBAC against the operator's calls).

`ControlPlane.start(..., audit_log=True)` writes `policy` below to the work directory and passes
`apiserver_flags`: every request (or only some users' requests: `audit_users`) at Metadata level (who, verb, resource, namespace, response code; no bodies), each event once
the response started (watches) and once it completed, never at RequestReceived (nothing is known then that
the later stages lack). The log backend runs in blocking mode, so a request's event is in the file before
its response reaches the client. `read` turns the JSON lines back into one `AuditRecord` per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# Rotation bounds: a test cluster logs a few MB; rotated files (audit-<timestamp>.log) are read back too.
MAX_SIZE_MB = 200
MAX_BACKUPS = 5
# When one request has several events, the last stage reached tells its outcome.
_STAGE_ORDER = {"ResponseStarted": 1, "ResponseComplete": 2, "Panic": 3}


@dataclass(frozen=True)
class AuditRecord:
    """One request as the apiserver authorized and answered it. `resource` is None for a non-resource URL
    (discovery, /version, /healthz), whose path is then in `uri`; `api_group` is "" for the core group."""

    user: str
    verb: str
    api_group: str
    resource: str | None
    subresource: str | None
    namespace: str | None
    response_code: int | None
    uri: str = ""
    user_agent: str = ""
    message: str = ""  # the response's Status message, on a failure ("... cannot create resource ...")

    @property
    def forbidden(self) -> bool:
        return self.response_code == 403


def policy(users: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every request at Metadata level; with `users`, only theirs: writing each event costs the apiserver CPU
    of its own (blocking mode), which a benchmark counting one client's requests should not pay for all."""
    rules: list[dict[str, Any]] = [{"level": "Metadata", **({"users": list(users)} if users else {})}]
    if users:
        rules.append({"level": "None"})
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": rules}


def write_policy(path: Path, users: tuple[str, ...] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(policy(users), sort_keys=False))
    return path


def apiserver_flags(policy: Path, log: Path) -> list[str]:
    """kube-apiserver's flags for `policy`, JSON lines to `log`."""
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        f"--audit-log-maxsize={MAX_SIZE_MB}",
        f"--audit-log-maxbackup={MAX_BACKUPS}",
    ]


def log_files(log: Path) -> list[Path]:
    """The log's rotated backups, oldest first (their names carry the rotation time), then the log."""
    backups = sorted(log.parent.glob(f"{log.stem}-*{log.suffix}"))
    return [*backups, *([log] if log.exists() else [])]


def _record(event: dict[str, Any]) -> AuditRecord:
    ref = event.get("objectRef") or {}
    status = event.get("responseStatus") or {}
    return AuditRecord(
        user=(event.get("user") or {}).get("username", ""),
        verb=event.get("verb", ""),
        api_group=ref.get("apiGroup", ""),
        resource=ref.get("resource"),
        subresource=ref.get("subresource"),
        namespace=ref.get("namespace"),
        response_code=status.get("code"),
        uri=event.get("requestURI", ""),
        user_agent=event.get("userAgent", ""),
        message=status.get("message", ""),
    )


def _stage(event: dict[str, Any]) -> int:
    return _STAGE_ORDER.get(event.get("stage", ""), 0)


def read(log: Path, user: str | None = None) -> list[AuditRecord]:
    """Every request in the log (and its backups), in the order they were received, one record each (from
    its last stage); only `user`'s when given. A line still being written (no newline yet) is skipped."""
    events: dict[str, dict[str, Any]] = {}
    for path in log_files(log):
        text = path.read_text(errors="replace")
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n") or not line.strip():
                continue
            event = json.loads(line)
            if user is not None and (event.get("user") or {}).get("username") != user:
                continue
            seen = events.get(event["auditID"])
            if seen is None or _stage(event) >= _stage(seen):
                events[event["auditID"]] = event
    ordered = sorted(events.values(), key=lambda e: e.get("requestReceivedTimestamp", ""))
    return [_record(e) for e in ordered]
