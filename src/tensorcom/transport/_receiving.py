"""The receiving side of a Connection: `ReceivingSide` (a mixin of Connection: recv(), iteration over
a pass; each message taken, decoded, run through the epoch book and accounted for) and `Inlet`, a
plain-scheme socket's waits with liveness: what `Connection.recv()` does when nothing is readable.

    inlet = Inlet(sock, url, liveness, book)    # before the socket binds or connects (it opens a monitor)
    frames = inlet.receive(hint)                # the next message's frames; RecvTimeout, PeerLost
    inlet.heard(sender)                         # the decoded sender of that message
    inlet.close()                               # before the socket closes

The socket is polled together with its monitor in steps of at most POLL seconds, so the socket's
receive timeout (RCVTIMEO, which the Connection's `timeout` sets) still ends a wait with RecvTimeout.
Connection events and each message's source descriptor (ZMQ_SRCFD: the value of the monitor's
events for its connection) feed a `liveness.PeerWatch`; between steps it applies the PeerLost rules
to the pass of the `epochs.EpochBook` it is given. On PeerLost the book abandons the pass (the lost
senders are forgotten through the epoch they were in) and the watch forgets them, so iterating again
goes on with the senders that are left. Everything runs in the caller's thread: no thread, no lock.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, Iterator

import zmq

from tensorcom import wire
from tensorcom.errors import DecodeError, PeerLost, RecvTimeout
from tensorcom.transport import _sockets as sockets
from tensorcom.transport.batches import transform_with
from tensorcom.transport.epochs import EpochBook, Verdict
from tensorcom.transport.liveness import PeerWatch

POLL = 0.1  # seconds between liveness checks while a receive waits
EPOCH_END = object()  # what _next_batch returns when a marker completes the epoch


class Inlet:
    """Liveness-aware receiving for one socket (module docstring); `url` names it in errors."""

    def __init__(self, sock: zmq.Socket, url: str, liveness: float, book: EpochBook):
        self.sock, self.url, self.book = sock, url, book
        self.watch = PeerWatch(liveness, grace=2 * sockets.HEARTBEAT_IVL)
        self.monitor = sockets.open_monitor(sock)
        self.poller = zmq.Poller()
        self.poller.register(sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        self.source = -1  # descriptor of the connection the last message came over

    def receive(self, hint: str = "") -> list:
        """The frames of the next message (zmq.Frame, not copied). Waits in steps while applying the
        liveness rules; RecvTimeout after the socket's RCVTIMEO, PeerLost by the rules."""
        try:
            frames = self.sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            frames = self._wait(hint)
        self._events()
        self.source = frames[0].get(zmq.SRCFD)
        return frames

    def heard(self, sender: str | None) -> None:
        """Place `sender` (of the last message received) on its connection."""
        if sender is not None and self.source >= 0:
            self.watch.heard(sender, self.source, time.monotonic())

    def close(self) -> None:
        """Stop monitoring (call before the socket itself is closed)."""
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)

    def _wait(self, hint: str) -> list:
        """Poll until a message is readable; check liveness between steps."""
        millis = self.sock.getsockopt(zmq.RCVTIMEO)
        start = time.monotonic()
        deadline = None if millis < 0 else start + millis / 1000
        while True:
            step = POLL if deadline is None else max(0.0, min(POLL, deadline - time.monotonic()))
            ready = dict(self.poller.poll(int(step * 1000)))
            if self.monitor in ready:
                self._events()
            if self.sock in ready:
                try:
                    return self.sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise RecvTimeout(f"nothing received within {millis / 1000:g} s{hint}", self.url)
            self._check(now, now - start, hint)

    def _events(self) -> None:
        """Apply the monitor's connection events to the watch."""
        now = time.monotonic()
        for event, fd in sockets.connection_events(self.monitor):
            if event in sockets.OPENED:
                self.watch.opened(fd, now)
            elif event in sockets.ENDED:
                self.watch.closed(fd, now)

    def _check(self, now: float, waited: float, hint: str) -> None:
        """PeerLost when the rules say the pass's senders are gone; the book and watch forget them.
        `hint` is added to the text (a connection may have closed over a frame ZeroMQ refused)."""
        quiet = {fd: sockets.quiet_seconds(fd) for fd in self.watch.open} if waited >= self.watch.grace else {}
        verdict = self.watch.lost(self.book.waiting_on(), self.book.ended, now, quiet, waited)
        if verdict is None:
            return
        senders, why = verdict
        self.book.abandon(senders)
        self.watch.forget(senders, now)
        error = PeerLost(f"the senders of this pass are gone, the pass ends here: {why}{hint}", self.url)
        error.senders = senders
        raise error

    def __repr__(self) -> str:
        return f"<Inlet {self.url} connections={sorted(self.watch.open)}>"


class ReceivingSide:
    """Connection's receiving: batches and passes (recv, items, iteration) over messages taken from
    the socket, decoded, run through the epoch book and accounted for. The Connection provides the
    socket (`_live_socket`), `_inlet` (None: plain receives), `_joiner` and `_next_joined` (zjoin),
    url, timeout, endpoints, raw, stats, max_message_size and `_max_plain_values` (read once), the
    epoch book `_epochs`, the sequence tracker `_tracker`, the resume record `_consumed`, the
    transforms and converters, epoch, total and report, and the counters it updates (count,
    batch_size, epoch_number)."""

    def recv(self) -> Any:
        """The next batch (a list for list/tuple batches, a dict for dict batches), or the raw frames
        when `raw`. End-of-epoch markers are recorded and skipped. Raises RecvTimeout after `timeout`."""
        batch = self._next_batch()
        while batch is EPOCH_END:
            batch = self._next_batch()
        return batch

    def items(self, report: int | None = None) -> Iterator[Any]:
        """Iterate over the batches of one epoch (see the Connection's docstring for when it ends).
        `report` > 0 (default: the constructor's) prints statistics to stderr every `report` samples."""
        report = self.report if report is None else report
        yielded, next_report = 0, report
        while yielded < self.epoch:
            if 0 < self.total <= self.count:
                return
            batch = self._next_batch()
            if batch is EPOCH_END:
                return
            yielded += 1
            if report > 0 and self.count >= next_report:
                print(f"count {self.count} {self.stats.summary()}", file=sys.stderr)
                next_report += report
            yield batch

    def __iter__(self) -> Iterator[Any]:
        return self.items()

    def _next_batch(self) -> Any:
        """The next batch (the raw frames when `raw`), or EPOCH_END when a marker completes the
        epoch; markers that do not complete it are recorded and skipped."""
        if self._joiner is not None:
            return self._next_joined(EPOCH_END)
        while True:
            message = self._next_message()
            if self.raw:
                return message
            if message.kind != "end_of_epoch":
                return self._accept(message)
            if self._note_marker(message):
                return EPOCH_END

    def _recv_message(self) -> Any:
        """The next message: a wire.Message, or the frames themselves when `raw`. With liveness,
        waiting raises PeerLost when the pass's senders are gone (tensorcom.transport.liveness)."""
        sock = self._live_socket()
        try:
            frames = sock.recv_multipart(copy=False) if self._inlet is None else self._inlet.receive(self._timeout_hint)
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "receive", self._timeout_hint)
        buffers = [frame.buffer for frame in frames]
        if self.endpoints[0].topic:
            buffers = buffers[1:]
        self._received += 1
        if self.raw:
            self.stats.add(sum(b.nbytes for b in buffers), 1)
            return buffers
        try:
            message = wire.decode_message(buffers, max_size=self.max_message_size,
                                          max_plain_values=self._max_plain_values)
        except DecodeError as exc:  # name the URL and the message; keep the class and the frame index
            error = type(exc)(f"{self.url}: message {self._received}: {exc}")
            error.index = exc.index
            raise error from exc
        if self._inlet is not None:
            self._inlet.heard(message.sender)
        return message

    def _accept(self, message: Any, track: bool = True) -> Any:
        """Account for a received batch message and return its batch, transformed and converted.
        `track`: count it in the sequence tracker and epoch book (not for zjoin, whose server decides)."""
        if track:
            self._tracker.batch(message.sender, message.seq)
            self.stats.dropped = self._tracker.dropped
            self._epochs.delivered(message)
        batch = message.batch
        if isinstance(batch, tuple):
            batch = list(batch)
        self.batch_size = self.batchsize(batch)
        self.stats.add(message.nbytes, self.batch_size)
        self.count += self.batch_size
        if message.share is not None:
            self._consumed.batch(message.share, message.epoch, self.batch_size)
        batch = transform_with(batch, self.batch_transforms)
        return transform_with(batch, self.converters)

    def _note_marker(self, message: Any) -> bool:
        """Record an end-of-epoch marker (or one standing in for a lost marker); True when it completes
        the epoch (see the module docstring)."""
        self._tracker.marker(message.sender, message.seq)
        self.stats.dropped = self._tracker.dropped
        self.stats.lost_markers, self.stats.implicit_ends = self._epochs.lost_markers, self._epochs.implicit_ends
        if message.share is not None:
            self._consumed.marker(message.share, message.epoch)
        if not self._epochs.marker(message):
            return False
        self.epoch_number += 1
        self._consumed.passes = self.epoch_number
        return True

    def _next_message(self) -> Any:
        """The next message to process: released held-back ones first, then the socket; messages
        the epoch book holds for the next pass or drops (retired senders) are skipped."""
        while True:
            message = self._epochs.release()
            if message is None:
                message = self._recv_message()
            if self.raw:
                return message
            verdict = self._epochs.admit(message)
            if verdict is Verdict.LOST_MARKER:  # the message comes back from release() next
                return self._epochs.stand_in
            if verdict is Verdict.LATE:
                warnings.warn(f"{self.url}: senders are more than {len(self._epochs.held)} messages apart "
                              "in their epochs; later epochs' batches are delivered in this pass",
                              RuntimeWarning, stacklevel=3)
            if verdict in (Verdict.DELIVER, Verdict.LATE):
                return message
