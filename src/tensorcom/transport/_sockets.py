"""ZeroMQ plumbing for the transport layer: one shared context, socket setup from an `Endpoint` (and
which endpoints one socket can serve), and the boundary where zmq errors become
`errors.TransportError` naming the URL.

The context is shared by every open socket in the process (so `inproc://` works between two
Connections) and reference-counted: it is terminated, and its I/O thread ends, when the last socket
made here is closed. A forked child gets a fresh context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from typing import Iterator

import zmq

from tensorcom.errors import RecvTimeout, TransportError
from tensorcom.urls import Endpoint

_lock = threading.Lock()
_context: zmq.Context | None = None
_pid = 0
_users = 0


def acquire_context() -> zmq.Context:
    """The process's shared context (created on first use); pair every call with `release_context`."""
    global _context, _pid, _users
    with _lock:
        if _context is None or _pid != os.getpid():
            _context, _pid, _users = zmq.Context(), os.getpid(), 0
        _users += 1
        return _context


def release_context() -> None:
    """Drop one user of the shared context; terminates it when none is left."""
    global _context, _users
    with _lock:
        if _context is None or _pid != os.getpid():
            return
        _users -= 1
        if _users <= 0:
            _context.term()
            _context, _users = None, 0


def make_socket(context: zmq.Context, socket_type: str, *, sndhwm: int, rcvhwm: int,
                timeout: float | None, max_message_size: int | None) -> zmq.Socket:
    """A new socket of ZeroMQ type `socket_type` ("PUSH", ...) with linger 0, the given high-water
    marks, send/receive timeouts (seconds; None waits forever) and per-frame size limit."""
    sock = context.socket(getattr(zmq, socket_type))
    sock.linger = 0
    sock.sndhwm = sndhwm
    sock.rcvhwm = rcvhwm
    millis = -1 if timeout is None else max(0, int(timeout * 1000))
    sock.rcvtimeo = millis
    sock.sndtimeo = millis
    if max_message_size is not None and max_message_size < (1 << 63):
        sock.setsockopt(zmq.MAXMSGSIZE, max_message_size)
    return sock


def endpoint_for(endpoint: Endpoint, topic: str) -> Endpoint:
    """`endpoint` as a Connection's socket uses it: TransportError for the sharing schemes (which
    Connection does not speak); SUB endpoints without a #topic get `topic` (connect()'s)."""
    if endpoint.sharing:
        raise TransportError(f"{endpoint.scheme}:// is the sharing protocol, which Connection "
                             "does not speak; use the sharing API", endpoint.url)
    if topic and endpoint.socket_type == "SUB" and not endpoint.topic:
        return dataclasses.replace(endpoint, topic=topic)
    return endpoint


def check_compatible(endpoint: Endpoint, others: list[Endpoint]) -> None:
    """ValueError unless `endpoint` can share one socket with `others` (the first decides): the same
    socket type and, for PUB/SUB, the same use of topics."""
    first = others[0]
    if endpoint.socket_type != first.socket_type:
        raise ValueError(f"{endpoint.url} ({endpoint.socket_type}) cannot share a Connection with "
                         f"{first.url} ({first.socket_type})")
    same_topic = endpoint.topic == first.topic if first.socket_type == "PUB" else True
    if bool(endpoint.topic) != bool(first.topic) or not same_topic:
        raise ValueError(f"{endpoint.url} and {first.url} must use the same topic setting")


def attach(sock: zmq.Socket, endpoint: Endpoint) -> str:
    """Bind or connect `sock` as `endpoint` says and subscribe SUB sockets; returns the address
    actually used (with the real port when the URL asked for port `*`)."""
    with translated(endpoint.url, action="bind" if endpoint.bind else "connect"):
        if endpoint.bind:
            sock.bind(endpoint.zmq_address)
            address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            sock.connect(endpoint.zmq_address)
            address = endpoint.zmq_address
        if endpoint.socket_type == "SUB":
            sock.setsockopt_string(zmq.SUBSCRIBE, endpoint.topic)
    return address


@contextlib.contextmanager
def translated(url: str, timeout: float | None = None, action: str = "receive", hint: str = "") -> Iterator[None]:
    """Turn zmq errors raised inside the block into TransportError / RecvTimeout naming `url`;
    `hint` is added to a receive timeout's text."""
    try:
        yield
    except zmq.Again:
        if action == "receive":
            raise RecvTimeout(f"nothing received within {timeout} s{hint}", url) from None
        raise TransportError(f"could not {action} within {timeout} s (no peer ready?)", url) from None
    except zmq.ZMQError as exc:
        raise TransportError(f"{action} failed: {exc.strerror or exc}", url) from exc
