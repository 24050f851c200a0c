"""ZeroMQ CURVE on a Connection's sockets (a mixin of Connection; the keys and options themselves are
tensorcom.transport.security's): each socket is secured before its first bind or connect, as the
server when it sends batches and as the client when it receives them, with the Connection's `curve`
or else the $TENSORCOM_CURVE_* variables; a bind to all interfaces without CURVE warns once."""

from __future__ import annotations

from typing import Any

from tensorcom.transport import security


class SecuredSockets:
    """Connection's CURVE methods; the Connection provides `curve` and `_releases` (a list)."""

    _effective_curve: Any = None  # the Curve the last socket got (None: not secured)

    def _secure(self, sock: Any, serving: bool) -> None:
        """Apply CURVE (the `curve` option, else $TENSORCOM_CURVE_*) to a fresh socket; remember what
        to release after it closes."""
        curve = self.curve if self.curve is not None else security.curve_from(serving=serving)
        self._effective_curve = curve
        self._releases.append(security.secure(sock, curve, serving=serving))

    def _warn_if_exposed(self, endpoint: Any) -> None:
        if endpoint.bind:
            security.warn_if_exposed(endpoint, self._effective_curve, stacklevel=4)

    def _release_security(self) -> None:
        releases, self._releases = self._releases, []
        for release in releases:
            release()
