"""Loopback ports for the harness's servers and the tests'."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A free loopback port, found by binding port 0 and releasing it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
