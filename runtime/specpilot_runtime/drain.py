"""The drain in force, set without a restart: the contract between the operator and the serving pod's runtime.

With spec.engine.drainSeconds left out the operator measures how long requests take and writes the drain it
wants into `drain.json` (`{"seconds": S}`, the `<name>-drain` ConfigMap, mounted at DRAIN_DIR on every track's
pods; no pod template hashes it). vLLM was started with `--shutdown-timeout` at engine.json's
`shutdown_timeout_s` (the automatic maximum); when SIGTERM arrives the runtime reads the file and kills vLLM's
process group S + TEARDOWN_S seconds later, so vLLM drains for S at most. The file is hostile: bounded read,
one key, a whole number, clamped to [0, shutdown_timeout_s]; a missing or bad file leaves shutdown_timeout_s.
"""

from __future__ import annotations

from pathlib import Path

from .files import FileProblem, parse_json, read_bounded

DRAIN_DIR = "/etc/specpilot/drain"
DRAIN_FILE = "drain.json"
DRAIN_PATH = f"{DRAIN_DIR}/{DRAIN_FILE}"
DRAIN_KEY = "seconds"
# `{"seconds": 3600}` is 17 bytes; room for whitespace, nothing more.
MAX_DRAIN_BYTES = 256


def drain_json(seconds: int) -> str:
    """drain.json's text for a drain of `seconds`."""
    return f'{{"{DRAIN_KEY}": {int(seconds)}}}'


def parse_drain(data: bytes) -> int:
    """drain.json's seconds: a JSON object holding exactly `seconds`, a whole number >= 0. ValueError (its message
    says what is wrong) otherwise."""
    if len(data) > MAX_DRAIN_BYTES:
        raise ValueError(f"is larger than {MAX_DRAIN_BYTES} bytes")
    value = parse_json(data, 1, finite=True)
    if not isinstance(value, dict) or set(value) != {DRAIN_KEY}:
        raise ValueError(f'must be an object with one key, "{DRAIN_KEY}"')
    seconds = value[DRAIN_KEY]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise ValueError(f'"{DRAIN_KEY}" must be a whole number >= 0, not {str(seconds)[:32]!r}')
    return seconds


def read_drain(path: str | Path, ceiling: int) -> tuple[int, str | None]:
    """The drain drain.json at `path` sets, clamped to [0, `ceiling`], and None; or `ceiling` and why the file
    was not used (missing, unreadable, bad)."""
    try:
        seconds = parse_drain(read_bounded(path, MAX_DRAIN_BYTES))
    except OSError as e:
        return ceiling, f"{path}: cannot read: {e.strerror or e}"
    except (FileProblem, ValueError) as e:
        return ceiling, f"{path}: {e}"
    if seconds > ceiling:
        return ceiling, f"{path}: {seconds} s is above shutdown_timeout_s, {ceiling} s used"
    return seconds, None
