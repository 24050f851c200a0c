"""The ZAP authenticator that restricts a CURVE server to its clients' keys (tensorcom.transport.security
secures the sockets; this module admits their clients).

    release = admit(sock, clients)   # a CURVE server socket, before bind/connect; clients: keys or None
    ...                              # close the socket, then
    release()                        # drops its use of the authenticator

Servers restricted to a set of client keys share one ZAP authenticator per zmq Context
(zmq.auth.thread.ThreadAuthenticator): started by the first, stopped by the last one's `Release`. Each
client set has its own ZAP domain; a restricted socket sets ZAP_ENFORCE_DOMAIN, so it refuses every
client (fails closed) if no authenticator answers. Unrestricted servers use ANY_CLIENT_DOMAIN, which
a running authenticator answers for any key, and need none running.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from typing import Any

import zmq

from tensorcom.errors import TransportError

ANY_CLIENT_DOMAIN = "tensorcom-curve-any"  # ZAP domain of servers that accept any client key


class Release:
    """What `admit` gives back: call it once, after the socket is closed and before its context is
    terminated; it drops the socket's use of the context's ZAP authenticator (a no-op when it has none).
    Calling it again does nothing."""

    def __init__(self, shared: _Shared | None = None):
        self._shared = shared

    def __call__(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            _drop_authenticator(shared)


def admit(sock: zmq.Socket, clients: frozenset[bytes] | None) -> Release:
    """Put CURVE server `sock` in the ZAP domain of `clients` (z85 public keys; None: any client that
    knows the server's key); a restricted one joins its context's authenticator."""
    domain = ANY_CLIENT_DOMAIN if clients is None else _domain(clients)
    sock.zap_domain = domain.encode()
    if clients is None:
        return Release()
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no authenticator answering: refuse, never admit
    return Release(_use_authenticator(sock.context, domain, clients))


def authenticator_users(context: zmq.Context) -> int:
    """How many secured sockets use `context`'s authenticator now (0: none is running)."""
    with _auth_lock:
        shared = _authenticators.get(id(context))
        return shared.users if shared is not None and shared.context is context else 0


def _domain(keys: frozenset[bytes]) -> str:
    """The ZAP domain of a set of client keys (equal sets share one)."""
    return "tensorcom-curve-" + hashlib.sha256(b"\n".join(sorted(keys))).hexdigest()[:24]


class _ClientKeys:
    """A pyzmq credentials provider: admits the z85 keys in `keys`, or any key when `keys` is None."""

    def __init__(self, keys: frozenset[bytes] | None):
        self.keys = keys

    def callback(self, domain: str, key: bytes) -> bool:
        return self.keys is None or key in self.keys


@dataclasses.dataclass(eq=False)
class _Shared:
    """One context's running authenticator and how many secured sockets use it."""

    context: zmq.Context
    authenticator: Any  # zmq.auth.thread.ThreadAuthenticator
    pid: int
    users: int = 0


_auth_lock = threading.Lock()
_authenticators: dict[int, _Shared] = {}  # id(context) -> its authenticator; holds the context alive


def _use_authenticator(context: zmq.Context, domain: str, clients: frozenset[bytes]) -> _Shared:
    """`context`'s authenticator (started on first use) with `domain` admitting `clients`; one more user."""
    with _auth_lock:
        shared = _authenticators.get(id(context))
        if shared is None or shared.pid != os.getpid() or shared.context is not context:
            shared = _Shared(context, _start_authenticator(context), os.getpid())
            _authenticators[id(context)] = shared
        shared.authenticator.configure_curve_callback(domain, _ClientKeys(clients))
        shared.users += 1
        return shared


def _start_authenticator(context: zmq.Context) -> Any:
    """A started ThreadAuthenticator on `context` that admits any key in ANY_CLIENT_DOMAIN (so the
    unrestricted servers of the context keep working) and denies unknown domains."""
    from zmq.auth.thread import ThreadAuthenticator

    authenticator = ThreadAuthenticator(context)
    try:
        authenticator.start()
    except zmq.ZMQError as exc:
        authenticator.stop()
        raise TransportError(f"cannot start the CURVE authenticator: {exc.strerror or exc} (another ZAP "
                             "handler already serves this zmq context?)", "inproc://zeromq.zap.01") from exc
    authenticator.configure_curve_callback(ANY_CLIENT_DOMAIN, _ClientKeys(None))
    return authenticator


def _drop_authenticator(shared: _Shared) -> None:
    """One user fewer; the last one stops the authenticator (in the process that started it)."""
    with _auth_lock:
        shared.users -= 1
        if shared.users > 0:
            return
        if _authenticators.get(id(shared.context)) is shared:
            del _authenticators[id(shared.context)]
        if shared.pid == os.getpid():
            shared.authenticator.stop()
