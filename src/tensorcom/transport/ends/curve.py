"""`SocketSecurity`: ZeroMQ CURVE for the sockets of one Connection's endpoint (the keys and options
themselves are tensorcom.transport.security's).

    security = SocketSecurity(curve)       # a security.Curve, or None: $TENSORCOM_CURVE_* when set
    security.secure(sock, serving=True)    # before the socket's first bind or connect
    security.warn_if_exposed(endpoint)     # after it: a bind to all interfaces without CURVE warns once
    security.release()                     # after the sockets closed

A socket that sends batches is secured as the CURVE server, one that receives them as the client.
"""

from __future__ import annotations

from typing import Any, Callable

from tensorcom.transport import security


class SocketSecurity:
    """CURVE settings applied to fresh sockets; remembers what to release once they are closed."""

    def __init__(self, curve: Any = None):
        self.curve = curve
        self.effective: Any = None  # the Curve the last socket got (None: not secured)
        self._releases: list = []

    def secure(self, sock: Any, serving: bool) -> None:
        """Apply CURVE (`curve`, else $TENSORCOM_CURVE_*) to `sock`, as server when `serving`."""
        curve = self.curve if self.curve is not None else security.curve_from(serving=serving)
        self.effective = curve
        self._releases.append(security.secure(sock, curve, serving=serving))

    def for_role(self, serving: bool) -> Callable[[Any], None]:
        """A function securing one socket as server (`serving`) or client."""
        return lambda sock: self.secure(sock, serving)

    def warn_if_exposed(self, endpoint: Any, stacklevel: int = 5) -> None:
        """ExposedEndpointWarning (once per process) for a bind to every interface without CURVE."""
        if endpoint.bind:
            security.warn_if_exposed(endpoint, self.effective, stacklevel=stacklevel)

    def release(self) -> None:
        """Release what securing the sockets took (call after they are closed); safe to call twice."""
        releases, self._releases = self._releases, []
        for release in releases:
            release()
