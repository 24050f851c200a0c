"""`PlainReceiver`: the receiving end of the plain schemes (zpull, zrpull, zsub, zrsub): one PULL or
SUB socket, its sessions (`_inbound.Inbound`: confirmations to each sender, duplicates dropped,
markers that overtook lost batches held, liveness), the epoch book (`epochs.EpochBook`: when a pass
ends, a fast sender's next epoch held back, lost markers made up for), the sequence tracker (what a
lossy stream dropped) and the accounting every receiver shares (`Intake`).

    end = PlainReceiver.open(context, endpoint, intake=..., encoding=..., socket_options=..., ...)
    end.attach(endpoint)     # bind or connect (every endpoint of the connection, the first included)
    item = end.next_batch()  # a batch (raw frames when `raw`), or EPOCH_END when a pass completed
    end.close()

A raw receiver (`Decoding.raw`) has no sessions and no epochs: every message is a batch. A stream
without markers (tensorcom 0.1) never completes a pass.
"""

from __future__ import annotations

import warnings
from typing import Any

import zmq

from tensorcom import settings, urls, wire
from tensorcom.errors import DecodeError
from tensorcom.transport import _sockets as sockets
from tensorcom.transport._inbound import Inbound
from tensorcom.transport.ends.attached import Attached
from tensorcom.transport.ends.curve import SocketSecurity
from tensorcom.transport.ends.intake import EPOCH_END, Intake
from tensorcom.transport.ends.plain_sender import make_plain_socket
from tensorcom.transport.epochs import EpochBook, Verdict, expected_groups
from tensorcom.transport.options import Encoding, SocketOptions
from tensorcom.transport.stats import SequenceTracker


class PlainReceiver(Attached):
    """One receiving socket (module docstring). `sock`: a PULL or SUB socket; `inbound`: its sessions
    (None: raw, or none wanted); `raw`: hand over undecoded frames; `senders`: groups expected per
    bound endpoint; `timeout`: seconds (RecvTimeout); `max_message_size`: bytes (DecodeError above);
    `hint`: what a timeout adds to its message."""

    def __init__(self, sock: Any, *, intake: Intake, raw: bool, senders: int, timeout: float | None,
                 max_message_size: int, hint: str = "", inbound: Inbound | None = None,
                 book: EpochBook | None = None):
        super().__init__(sock)
        self.intake, self.raw, self.senders = intake, raw, senders
        self.timeout, self.max_message_size, self.hint = timeout, max_message_size, hint
        self.inbound = inbound
        self.book = EpochBook() if book is None else book
        self.tracker = SequenceTracker()
        self.stats = intake.stats
        self.received = 0  # messages taken from the socket, for error messages
        self._max_plain_values = settings.max_plain_values()  # read once, not per message

    @classmethod
    def open(cls, context: zmq.Context, endpoint: urls.Endpoint, *, intake: Intake, encoding: Encoding,
             socket_options: SocketOptions, security: SocketSecurity, name: str) -> "PlainReceiver":
        """A receiver with a fresh socket for `endpoint`'s type (secured as CURVE client, liveness
        options set, not attached yet), with sessions unless raw."""
        sock = make_plain_socket(context, endpoint, socket_options, security, encoding.max_message_size)
        end = cls(sock, intake=intake, raw=intake.decoding.raw, senders=socket_options.senders,
                  timeout=socket_options.timeout, max_message_size=encoding.max_message_size,
                  hint=encoding.timeout_hint)
        if not end.raw:
            with sockets.closed_on_error(sock):
                end.inbound = Inbound(sock, endpoint.url, socket_options.liveness, end.book, context=context,
                                      name=name, secure=security.for_role(False))
        return end

    def attach(self, endpoint: urls.Endpoint) -> str:
        """Bind or connect the socket to `endpoint`; the address it got. The pass now expects one more
        group (a connect) or `senders` more (a bind)."""
        address = sockets.attach(self.live_socket(), endpoint)
        self.endpoints.append(endpoint)
        self.book.expected = expected_groups([e.bind for e in self.endpoints], self.senders)
        self.book.joins_midstream = endpoint.socket_type == "SUB"
        if self.inbound is not None:
            self.inbound.url = self.url
        return address

    def close(self, linger: float | None = None) -> None:
        """Close the sessions and the socket at once; `linger` is not used (nothing to deliver)."""
        sock, self.socket = self.socket, None
        if sock is None:
            return
        try:
            if self.inbound is not None:
                self.inbound.close()
        finally:
            sock.close(linger=0)

    # ---- batches and passes -------------------------------------------------------------------

    def next_batch(self) -> Any:
        """The next batch (the raw frames when `raw`), or EPOCH_END when a marker completes the
        epoch; markers that do not complete it are recorded and skipped."""
        while True:
            message = self._next_message()
            if self.raw:
                return message
            if message.kind != "end_of_epoch":
                self.tracker.batch(message.sender, message.seq)
                self.stats.dropped = self.tracker.dropped
                self.book.delivered(message)
                return self.intake.accept(message)
            if self._note_marker(message):
                return EPOCH_END

    def _note_marker(self, message: Any) -> bool:
        """Record an end-of-epoch marker (or one standing in for a lost marker); True when it completes
        the pass (counted in the intake)."""
        self.tracker.marker(message.sender, message.seq)
        self.stats.dropped = self.tracker.dropped
        self.stats.lost_markers, self.stats.implicit_ends = self.book.lost_markers, self.book.implicit_ends
        self.intake.marker(message)
        if not self.book.marker(message):
            return False
        self.intake.pass_ended()
        return True

    def _next_message(self) -> Any:
        """The next message to process: released held-back ones first, then the socket; messages
        the epoch book holds for the next pass or drops (retired senders) are skipped."""
        while True:
            message = self.book.release()
            if message is None:
                message = self._recv_message()
            if self.raw:
                return message
            verdict = self.book.admit(message)
            if verdict is Verdict.LOST_MARKER:  # the message comes back from release() next
                return self.book.stand_in
            if verdict is Verdict.LATE:
                warnings.warn(f"{self.url}: senders are more than {len(self.book.held)} messages apart "
                              "in their epochs; later epochs' batches are delivered in this pass",
                              RuntimeWarning, stacklevel=3)
            if verdict in (Verdict.DELIVER, Verdict.LATE):
                return message

    def _recv_message(self) -> Any:
        """The next message: a wire.Message, or the frames themselves when `raw`. With sessions,
        waiting raises PeerLost when the pass's senders are gone (tensorcom.transport.liveness); a
        batch taken before (a sender's resend) is skipped and counted in stats.duplicates, a tick is
        confirmed and skipped; a marker that overtook lost batches waits for their resends."""
        while True:
            released = None if self.inbound is None else self.inbound.next_ready()
            if released is not None:
                return released
            message = self._take_message()
            if message is None:  # a held marker (and what followed it) was released
                continue
            fresh = self.raw or self.inbound is None or self.inbound.arrived(message)
            if fresh and (self.raw or message.kind != "tick"):
                return message
            self.stats.duplicates = self.inbound.duplicates

    def _take_message(self) -> Any:
        """The next message from the socket, decoded unless `raw`; None when sessions released a
        held message instead."""
        sock = self.live_socket()
        try:
            frames = sock.recv_multipart(copy=False) if self.inbound is None else self.inbound.receive(self.hint)
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "receive", self.hint)
        if frames is None:
            return None
        buffers = [frame.buffer for frame in frames]
        if self.endpoints[0].topic:
            buffers = buffers[1:]
        self.received += 1
        if self.raw:
            self.stats.add(sum(b.nbytes for b in buffers), 1)
            return buffers
        try:
            return wire.decode_message(buffers, max_size=self.max_message_size,
                                       max_plain_values=self._max_plain_values)
        except DecodeError as exc:  # name the URL and the message; keep the class and the frame index
            if self.inbound is not None:
                self.inbound.refused(buffers)
            error = type(exc)(f"{self.url}: message {self.received}: {exc}")
            error.index = exc.index
            raise error from exc
