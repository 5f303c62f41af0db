"""A free TCP port on 127.0.0.1 for a server a test starts (the one definition the tests share)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; a race with another process is possible but
    rare, and every server start checks that it listens)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
