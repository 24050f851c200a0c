"""ZMTP heartbeats: ZeroMQ's own liveness check, answered by its I/O thread (so a peer whose Python
code is busy still answers), which closes a connection whose peer stopped answering."""

from __future__ import annotations

from typing import Any

import zmq


def apply_heartbeats(sock: Any, liveness: float | None) -> None:
    """Set `sock`'s heartbeat options (before bind/connect) so that a silent peer's connection is
    closed within `liveness` seconds: a PING every liveness/5 s, the connection dropped after
    liveness/2 s without an answer, and the peer told to drop it after `liveness`. None: no heartbeats."""
    if liveness is None:
        return
    if not isinstance(liveness, (int, float)) or isinstance(liveness, bool) or liveness <= 0:
        raise ValueError(f"liveness must be a positive number of seconds or None, got {liveness!r}")
    millis = int(liveness * 1000)
    sock.setsockopt(zmq.HEARTBEAT_IVL, max(millis // 5, 10))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(millis // 2, 20))
    sock.setsockopt(zmq.HEARTBEAT_TTL, min(max(millis, 100), 6553500) // 100 * 100)
