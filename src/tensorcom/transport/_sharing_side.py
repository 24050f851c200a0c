"""What a `Connection` does with the sharing schemes (a mixin of Connection; the protocol itself is the
sharing/ sub-package: server, joiner, books).

  * `zshare://` / `zsplit://` (send): the Connection starts a ShareServer thread bound to the URLs and
    sends its encoded messages to it over `inproc://` (a PUSH socket, so send(), end_epoch() and
    serve() work as for every scheme); close() ends the stream (an open epoch gets its end), waits
    until every consumer has everything (at most `linger` seconds when given) and raises
    TransportError saying how many batches were not delivered, and to whom, when some were not.
  * `zjoin://` (receive): a Joiner; `for batch in conn` is one pass (an epoch of the servers joined).
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from tensorcom.transport import _sockets as sockets
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing.hub import sharing_mode
from tensorcom.transport.sharing.joiner import PASS_END, Joiner
from tensorcom.transport.sharing.server import ShareServer, check_delivered

SHARING_OPTIONS = ("min_consumers", "replay", "policy", "credit", "batch_size", "observe", "shm")
CONSUMER_OPTIONS = ("credit", "batch_size", "observe", "shm")  # what a zjoin Connection passes on
SERVER_OPTIONS = ("min_consumers", "replay", "policy", "shm")  # what a zshare/zsplit Connection passes on


class SharingSide:
    """Connection's sharing-scheme methods; the Connection provides socket, endpoints, addresses,
    sharing (the keyword options of SHARING_OPTIONS), liveness, timeout, max_message_size, sender."""

    _server: ShareServer | None = None
    _joiner: Joiner | None = None

    def _connect_sharing(self, endpoints: list) -> None:
        """Start the server thread (zshare/zsplit) or the consumer (zjoin) for `endpoints`."""
        if self.endpoints or self._server or self._joiner:
            raise ValueError("a sharing Connection is connected once, to all its URLs in one call")
        if any(not e.sharing for e in endpoints) or len({e.sends for e in endpoints}) != 1:
            raise ValueError(f"zshare/zsplit/zjoin URLs cannot be mixed with others: {[e.url for e in endpoints]}")
        options = dict(self.sharing)
        self._context = sockets.acquire_context()
        try:
            if endpoints[0].sends:
                self._start_server(endpoints, options)
            else:
                self._joiner = Joiner(endpoints, context=self._context, name=self.sender, liveness=self.liveness,
                                      timeout=self.timeout, max_message_size=self.max_message_size,
                                      secure=self._secure_socket(False),
                                      **{k: options[k] for k in CONSUMER_OPTIONS if k in options})
        except BaseException:
            self._abandon_sharing()
            raise
        for endpoint in endpoints:
            self._warn_if_exposed(endpoint)
        self.endpoints.extend(endpoints)
        self.addresses.extend(self._server.addresses if self._server else [e.zmq_address for e in endpoints])

    def _start_server(self, endpoints: list, options: dict) -> None:
        address = f"inproc://tensorcom-share-{secrets.token_hex(8)}"
        self._server = ShareServer(endpoints, sharing_mode(endpoints), address, context=self._context,
                                   liveness=self.liveness, secure=self._secure_socket(True),
                                   **{k: options[k] for k in SERVER_OPTIONS if k in options})
        self._server.start()
        self.socket = sockets.make_socket(self._context, "PUSH", sndhwm=max(self.sndhwm, 1), rcvhwm=self.rcvhwm,
                                          timeout=None, max_message_size=None)
        self.socket.connect(address)

    def _abandon_sharing(self) -> None:
        """Undo a failed _connect_sharing: stop what started, release the context."""
        if self._server is not None:
            self._server.abort()
            self._server = None
        if self.socket is not None:
            self.socket.close(linger=0)
            self.socket = None
        if self._joiner is not None:
            self._joiner.close(leave=False)
            self._joiner = None
        self._release_security()
        sockets.release_context()
        self._context = None

    def _drop_sharing(self) -> None:
        """A Connection collected without close(): abort the server (nothing more is delivered) or
        leave the servers, without lingering, and release the context (_abandon_sharing); from the
        server's own thread (a collection can run there) in a new thread, as no thread can wait for
        itself."""
        thread = getattr(self._server, "_thread", None)
        if thread is not None and thread is threading.current_thread():
            threading.Thread(target=self._abandon_sharing, name="tensorcom-drop", daemon=True).start()
        else:
            self._abandon_sharing()

    def _secure_socket(self, serving: bool) -> Any:
        """A function applying this Connection's CURVE settings to a socket (as server or client)."""
        return lambda sock: self._secure(sock, serving)

    @property
    def consumers(self) -> list[dict]:
        """A sharing server's consumers: name, epoch, pos, lag, samples_per_s, credit, free (refreshed
        about every second); for a consumer (zjoin), the last status an observer received."""
        if self._server is not None:
            return self._server.status
        return self._joiner.status if self._joiner is not None else []

    def consumer_status(self, wait: float = 1.0) -> list[dict]:
        """A consumer's (zjoin) view of its servers' consumers after reading for `wait` seconds (join
        with observe=True to watch without taking batches); a server's own `consumers` at once."""
        if self._joiner is None:
            return self.consumers
        return self._joiner.refresh(wait)

    @property
    def joined_at(self) -> dict:
        """A consumer's (epoch, position) where its session with each server started (URL -> pair)."""
        return self._joiner.joined_at if self._joiner is not None else {}

    def _next_joined(self, epoch_end: Any) -> Any:
        """The next batch of a zjoin Connection, accepted and converted, or `epoch_end`."""
        message = self._joiner.next()
        if message is PASS_END:
            self.epoch_number += 1
            self._consumed.passes = self.epoch_number  # the resume record counts passes as for every scheme
            return epoch_end
        return self._accept(message, track=False)

    def _close_sharing(self, linger: float | None) -> None:
        """End a server's stream and wait for its consumers (module docstring), or leave the servers."""
        if self._joiner is not None:
            self._joiner.close()
            self._joiner = None
            return
        server, self._server = self._server, None
        try:
            if self.socket is not None:  # the server gives an open epoch its end
                self.socket.send(control.encode("finish"))
            result = server.wait(linger)
        finally:
            if self.socket is not None:
                self.socket.close(linger=0)
                self.socket = None
        self.delivery = result
        check_delivered(result, self.url)
