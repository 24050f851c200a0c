"""`Attached`: what the plain ends share: one socket, the endpoints it is bound or connected to, and
the URL they make for error messages."""

from __future__ import annotations

from typing import Any

from tensorcom import urls
from tensorcom.errors import TransportError


def url_of(endpoints: list[urls.Endpoint]) -> str:
    """The endpoints' URLs, comma-separated; "<not connected>" for none."""
    return ",".join(e.url for e in endpoints) or "<not connected>"


class Attached:
    """A socket (None once closed) and its `endpoints`."""

    def __init__(self, sock: Any, endpoints: list[urls.Endpoint] | None = None):
        self.socket = sock
        self.endpoints: list[urls.Endpoint] = list(endpoints or [])

    @property
    def url(self) -> str:
        return url_of(self.endpoints)

    def live_socket(self) -> Any:
        """The socket; TransportError naming the URL once it is closed."""
        if self.socket is None:
            raise TransportError("Connection is closed or not connected", self.url)
        return self.socket
