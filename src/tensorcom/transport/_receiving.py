"""The receiving side of a Connection: `ReceivingSide`, a mixin of Connection: recv(), iteration over a
pass; each message taken (through the plain-scheme socket's `_inbound.Inbound`, which confirms it to its
sender, drops duplicates and waits with liveness), decoded, run through the epoch book and accounted for.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Iterator

import zmq

from tensorcom import wire
from tensorcom.errors import DecodeError
from tensorcom.transport import _sockets as sockets
from tensorcom.transport.batches import transform_with
from tensorcom.transport.epochs import Verdict

EPOCH_END = object()  # what _next_batch returns when a marker completes the epoch


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
        waiting raises PeerLost when the pass's senders are gone (tensorcom.transport.liveness);
        a batch taken before (a sender's resend) is skipped and counted in stats.duplicates, a tick
        (tensorcom.transport.session) is confirmed and skipped; a marker that overtook lost batches
        waits for their resends (`_inbound`), and so does what its sender sent after it."""
        while True:
            released = None if self._inlet is None else self._inlet.next_ready()
            if released is not None:
                return released
            message = self._take_message()
            if message is None:  # a held marker (and what followed it) was released
                continue
            fresh = self.raw or self._inlet is None or self._inlet.arrived(message)
            if fresh and (self.raw or message.kind != "tick"):
                return message
            self.stats.duplicates = self._inlet.duplicates

    def _take_message(self) -> Any:
        """The next message from the socket, decoded unless `raw`."""
        sock = self._live_socket()
        try:
            frames = sock.recv_multipart(copy=False) if self._inlet is None else self._inlet.receive(self._timeout_hint)
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "receive", self._timeout_hint)
        if frames is None:
            return None
        buffers = [frame.buffer for frame in frames]
        if self.endpoints[0].topic:
            buffers = buffers[1:]
        self._received += 1
        if self.raw:
            self.stats.add(sum(b.nbytes for b in buffers), 1)
            return buffers
        try:
            return wire.decode_message(buffers, max_size=self.max_message_size,
                                       max_plain_values=self._max_plain_values)
        except DecodeError as exc:  # name the URL and the message; keep the class and the frame index
            if self._inlet is not None:
                self._inlet.refused(buffers)
            error = type(exc)(f"{self.url}: message {self._received}: {exc}")
            error.index = exc.index
            raise error from exc

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
