"""The sharing schemes' ends (the protocol itself is tensorcom.transport.sharing: books, server, joiner).

  * `SharingServerEnd` (zshare:// / zsplit://, sends): a ShareServer thread bound to the URLs, fed
    over `inproc://` by a PUSH socket wrapped in a `PlainSender` (so send(), end_epoch() and serve()
    work as for every scheme); close() ends the stream (an open epoch gets its end), waits until
    every consumer has everything (at most `linger` seconds when given) and raises Undelivered
    saying how many batches were not delivered, and to whom, when some were not.
  * `JoinerEnd` (zjoin://, receives): a Joiner; next_batch() gives its batches, accounted for by
    the `Intake`, and EPOCH_END when a pass of the servers joined ended.

Both are made connected (`open`), to every URL at once; `abandon()` stops without waiting (a
Connection collected without close()).
"""

from __future__ import annotations

import secrets
import threading
from typing import TYPE_CHECKING, Any

import zmq

from tensorcom.transport import _sockets as sockets
from tensorcom.transport.ends.curve import SocketSecurity
from tensorcom.transport.ends.intake import EPOCH_END, Intake
from tensorcom.transport.ends.plain_sender import PlainSender
from tensorcom.transport.options import Encoding, SharingOptions, SocketOptions
from tensorcom.transport.stats import Statistics

if TYPE_CHECKING:  # the sharing protocol (asyncio and zmq.asyncio with it) is imported when an end opens
    from tensorcom.transport.sharing.joiner import Joiner
    from tensorcom.transport.sharing.server import ShareServer


class SharingServerEnd:
    """A sharing server and the PUSH socket feeding it (module docstring). `addresses`: where the
    server bound; `sender`: the PlainSender that encodes and sends batches to it; `delivery`: the
    server's result once closed (ShareServer.wait's)."""

    def __init__(self, server: ShareServer, sender: PlainSender):
        self.server, self.sender = server, sender
        self.endpoints = sender.endpoints
        self.delivery: dict | None = None

    @classmethod
    def open(cls, context: zmq.Context, endpoints: list, *, encoding: Encoding, socket_options: SocketOptions,
             sharing: SharingOptions, security: SocketSecurity, stats: Statistics,
             name: str) -> "SharingServerEnd":
        """Start a server bound to `endpoints` (zshare or zsplit) and connect a PUSH socket to it."""
        from tensorcom.transport.sharing.hub import sharing_mode
        from tensorcom.transport.sharing.server import ShareServer

        address = f"inproc://tensorcom-share-{secrets.token_hex(8)}"
        server = ShareServer(endpoints, sharing_mode(endpoints), address, context=context,
                             liveness=socket_options.liveness, secure=security.for_role(True), **sharing.server())
        sock = None
        try:
            server.start()
            sock = sockets.make_socket(context, "PUSH", sndhwm=max(socket_options.sndhwm, 1),
                                       rcvhwm=socket_options.rcvhwm, timeout=None, max_message_size=None)
            sock.connect(address)
        except BaseException:
            server.abort()
            if sock is not None:
                sock.close(linger=0)
            raise
        sender = PlainSender(sock, encoding=encoding, timeout=socket_options.timeout, stats=stats, name=name,
                             endpoints=endpoints)
        return cls(server, sender)

    @property
    def socket(self) -> Any:
        return self.sender.socket

    @socket.setter
    def socket(self, sock: Any) -> None:
        self.sender.socket = sock

    @property
    def addresses(self) -> list[str]:
        return self.server.addresses

    @property
    def url(self) -> str:
        return self.sender.url

    @property
    def consumers(self) -> list[dict]:
        """The server's consumers: name, epoch, pos, lag, samples_per_s, credit, free."""
        return self.server.status

    def close(self, linger: float | None) -> dict:
        """End the stream and wait (at most `linger` s; None: until done) for every consumer to have
        everything; the server's result (also kept in `delivery`); Undelivered, naming the consumers,
        when something was not delivered."""
        from tensorcom.transport.sharing import control
        from tensorcom.transport.sharing.server import check_delivered

        sock = self.sender.socket
        try:
            if sock is not None:  # the server gives an open epoch its end
                sock.send(control.encode("finish"))
            result = self.server.wait(linger)
        finally:
            if sock is not None:
                sock.close(linger=0)
                self.sender.socket = None
        self.delivery = result
        check_delivered(result, self.url)
        return result

    def in_server_thread(self) -> bool:
        """True when called from the server's own thread (where no one can wait for the server)."""
        thread = self.server.__dict__.get("_thread")  # ShareServer has no public accessor for it
        return thread is not None and thread is threading.current_thread()

    def abandon(self) -> None:
        """Stop the server at once (nothing more is delivered) and close the socket."""
        self.server.abort()
        sock, self.sender.socket = self.sender.socket, None
        if sock is not None:
            sock.close(linger=0)


class JoinerEnd:
    """A consumer of sharing servers (module docstring): `joiner` (the protocol), `intake` (accounting)."""

    socket = None  # the joiner's sockets are its own

    def __init__(self, joiner: Joiner, intake: Intake, endpoints: list):
        self.joiner, self.intake, self.endpoints = joiner, intake, list(endpoints)
        self.started = False  # a batch or a pass end was handed over

    @classmethod
    def open(cls, context: zmq.Context, endpoints: list, *, intake: Intake, encoding: Encoding,
             socket_options: SocketOptions, sharing: SharingOptions, security: SocketSecurity,
             name: str) -> "JoinerEnd":
        """Join the servers at `endpoints` (zjoin)."""
        from tensorcom.transport.sharing.joiner import Joiner

        joiner = Joiner(endpoints, context=context, name=name, liveness=socket_options.liveness,
                        timeout=socket_options.timeout, max_message_size=encoding.max_message_size,
                        secure=security.for_role(False), waits=intake.stats.waits, **sharing.consumer())
        return cls(joiner, intake, endpoints)

    @property
    def addresses(self) -> list[str]:
        return [e.zmq_address for e in self.endpoints]

    def next_batch(self) -> Any:
        """The next batch, accepted and converted, or EPOCH_END when the pass ended. A consumer whose
        record was loaded before (a restarted job: Connection.load_state_dict) first starts over
        with its servers, carrying the record, so that it gets what the record lacks."""
        from tensorcom.transport.sharing.joiner import PASS_END  # loaded with the Joiner: a lookup

        if not self.started and self.intake.consumed.streams:
            from tensorcom.transport.sharing.catch_up import latest

            self.joiner.restart(latest(self.intake.consumed.state_dict()))
        self.started = True
        message = self.joiner.next()
        if message is PASS_END:
            self.intake.pass_ended()
            return EPOCH_END
        return self.intake.accept(message)

    @property
    def consumers(self) -> list[dict]:
        """The last status an observer received."""
        return self.joiner.status

    def consumer_status(self, wait: float) -> list[dict]:
        """The servers' consumers after reading for `wait` seconds."""
        return self.joiner.refresh(wait)

    @property
    def server_report(self) -> dict | None:
        """The serving process's report record of the last status (rates, "stages", "verdict"), if any."""
        return self.joiner.server_report

    @property
    def joined_at(self) -> dict:
        """Where the session with each server started (URL -> (epoch, position))."""
        return self.joiner.joined_at

    def close(self, linger: float | None = None) -> None:
        """Leave the servers (they are told); `linger` is not used (nothing to deliver)."""
        self.joiner.close()

    def abandon(self) -> None:
        """Leave without telling the servers or waiting."""
        self.joiner.close(leave=False)
