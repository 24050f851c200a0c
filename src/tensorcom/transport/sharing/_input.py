"""The input side of a sharing server (a mixin of ShareServer): the stream it serves, taken from
its input socket. Protocol-2 wire messages (batches and end-of-epoch markers) come from one producer
or a group of serving workers; their markers are counted with an `EpochBook` (a group of N workers
ends an epoch after N markers), and each epoch's end becomes one item of the served stream. The
batches taken of each portion (stream, epoch, worker) are counted, so that a restarted worker can take
its portion over where its predecessor stopped (`handover`). The control frame `finish` (optionally
with "ends": epochs to wait for first) ends the stream; batches sent after the last marker get an end.

Sessions: an input that is a tcp or ipc socket (a Hub's, fed by serving workers or tensorcom.ray's
actors) takes its messages through an `Inbound`, as a plain receiving Connection does: it links to
each sender's acknowledgement socket and confirms what it took, drops a sender's resends of what it
already has, and holds a marker until the batches a dropped connection lost before it are resent;
`InputOrder` then passes each sender's messages on in the order they were sent. So a connection
between a sender and the server that drops or stalls loses, repeats and reorders nothing, and the
sender's close() knows what arrived. The input never ends an epoch for an unreachable sender (no
PeerLost here): a worker's owner (tensorcom.serve's parent, the Ray driver) watches it and hands a
dead one's portion to its successor (`handover`). An inproc input (a zshare Connection's own server
thread) has no connection to drop and takes its messages as they come.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable

import zmq

from tensorcom import wire
from tensorcom.batch import batch_size
from tensorcom.errors import DecodeError
from tensorcom.transport._inbound import Inbound
from tensorcom.transport.epochs import Verdict
from tensorcom.transport.resume import ResumePlan
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing._order import InputOrder
from tensorcom.transport.sharing.books import Item


class StreamInput:
    """ShareServer's input methods; the server provides book, input, input_address, max_plain_values,
    and the counters its __init__ sets (_input_epochs, _input_lock, received, _epoch, _pos, _items,
    _ends, _finish_after, input_batches, input_samples, _ahead: the input message read ahead);
    `_open_sessions` sets inlet, order and _ordered."""

    inlet: Inbound | None = None  # the input's sessions (tcp, ipc)

    def _open_sessions(self, context: zmq.Context, liveness: float | None) -> None:
        """The input's sessions (module docstring), once the input is bound: an Inbound unless the
        input is inproc; `_ordered`: messages in their senders' order, waiting for the book."""
        self._ordered: collections.deque = collections.deque()
        self.order = InputOrder()
        self._forgotten: set[str] = set()  # retired senders whose sessions are closed
        self.inlet: Inbound | None = None
        if not self.input_address.startswith("inproc://"):
            self.inlet = Inbound(self.input, "zpull+" + self.input_address, liveness, self._input_epochs,
                                 context=context, name=f"share-{self.server_id}")

    def _input_pending(self) -> bool:
        """Confirm what the input took, and take the messages its sessions released; True when
        messages taken earlier wait for the book."""
        if self.inlet is not None:
            self.inlet.tend()
            released = self.inlet.next_ready()
            while released is not None:
                self._ordered.extend(self.order.arrive(released))
                released = self.inlet.next_ready()
        if len(self._input_epochs.retired) > len(self._forgotten):
            with self._input_lock:  # handover() retires senders from the caller's thread
                self._forget_retired()
        return bool(self._input_epochs.backlog or self._ordered)

    def _forget_retired(self) -> None:
        """Close the sessions of the senders retired since the last call (a restarted worker's
        predecessor, or the sender of a worker's earlier run): what of them waits is dropped."""
        for sender in self._input_epochs.retired - self._forgotten:
            self.order.forget(sender)
            if self.inlet is not None:
                self.inlet.forget(sender)
        self._forgotten |= self._input_epochs.retired

    def _close_sessions(self) -> None:
        """Say bye to the input's senders (confirming what was taken) and close the link socket."""
        if self.inlet is not None:
            self.inlet.close()
            self.inlet = None

    @property
    def input_epoch(self) -> int | None:
        """The epoch the input is in (its earlier epochs have ended); None before the first message."""
        return self._epoch

    def handover(self, stream: str, worker: int, workers: int, *, first_epoch: int = 0,
                 retire: Iterable[str] = ()) -> ResumePlan:
        """Give portion `worker` of `workers` of `stream` to a new sender (a restarted worker): the sender
        that sent it so far and the senders `retire` (which may not have been heard from yet) are
        retired, so whatever still arrives from them is dropped; returns the new sender's plan: from
        the input's current epoch (`first_epoch` before any input) on, skip the batches of the portion
        taken so far, and end each of those epochs again (the retired sender's markers are forgotten).
        Safe from any thread: every input message is either counted here or dropped."""
        with self._input_lock:
            current = self._input_epochs.slots.get((stream, worker))
            for sender in {*retire, current} - {None}:
                self._input_epochs.retire(sender)
            epoch = first_epoch if self._epoch is None else self._epoch
            skips = {(e, w): n for (s, e, w), n in self.received.items() if s == stream and w == worker and e >= epoch}
            return ResumePlan(stream, workers, epoch, skips)

    def _on_input(self) -> None:
        """Take input messages while the book takes items: first those the input's epoch book
        released (they arrived earlier), then new ones. While the book takes nothing, messages are
        still read until one waits: a `finish` is acted on at once (a stream whose consumers all
        left, with a full replay buffer, must still end); a wire message is confirmed (its sender
        may be waiting for that to close; ticks and duplicates end there) and a batch or marker
        waits in `_ordered`, the next message in `_ahead`, until the book takes again."""
        while True:
            if self._ahead is None:
                try:
                    self._ahead = self.input.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    pass
            ahead = self._ahead
            if ahead is not None and not self._input_epochs.backlog and not self._ordered and (
                    control.is_control(ahead[0].buffer) or not self.book.can_take()):
                self._ahead = None
                with self._input_lock:
                    self._take(ahead)
                continue
            if not self.book.can_take():
                return
            with self._input_lock:
                held = self._input_epochs.release()
                if held is not None:
                    self._admit(held)
                    continue
                if self._ordered:
                    self._admit(self._ordered.popleft())
                    continue
                if ahead is None:
                    return
                self._ahead = None
                self._take(ahead)

    def _take(self, frames: list) -> None:
        """One message read from the input: the producer's `finish`, or a wire message, which goes
        through the sessions (confirmed; a duplicate dropped; held until its turn) to `_ordered`."""
        try:
            if control.is_control(frames[0].buffer):
                self._on_finish(control.decode(frames[0].buffer))
                return
            views = [f.buffer for f in frames]
            message = _Input.of(frames, wire.decode_message(views, max_plain_values=self.max_plain_values))
        except DecodeError as exc:
            raise control.located(exc, f"{self.input_address}: input message") from exc
        if self.inlet is None:
            self._ordered.append(message)
        elif self.inlet.arrived(message):
            self._ordered.extend(self.order.arrive(message))

    def _admit(self, message: _Input) -> None:
        """One input message through the input's epoch book: batches become items, a completed
        epoch becomes an end item. A batch that shows its sender's marker was lost ends that epoch
        first (the epoch book gives the batch back through release())."""
        verdict = self._input_epochs.admit(message)
        if len(self._input_epochs.retired) > len(self._forgotten):  # it took over another sender's portion
            self._forget_retired()
        if verdict in (Verdict.HOLD, Verdict.DROP):
            return
        if verdict is Verdict.LOST_MARKER:
            message = self._input_epochs.stand_in
        if self._epoch is None:
            self._epoch = message.epoch or 0
        if message.kind == "batch":
            samples = batch_size(message.batch)
            self._add(Item(self._items, self._epoch, self._pos, message.frames, samples, message.nbytes,
                           self._portion_of(message)))
            self._pos += 1
            self._input_epochs.delivered(message)
            self._count(message, samples)
        elif self._input_epochs.marker(message):
            self._end_epoch()

    def _portion_of(self, message: Any) -> tuple | None:
        """(stream, v, V, index) of a batch of a served stream: its index within (epoch, portion) is
        the one it carries, else the next after those taken (None: a batch without a portion)."""
        portion = message.portion
        if portion is None or message.epoch is None:
            return None
        index = getattr(message, "index", None)
        if index is None:
            index = self.received.get((portion.stream, message.epoch, portion.worker), 0)
        return (portion.stream, portion.worker, portion.workers, index)

    def _on_regenerated(self) -> None:
        """Take the batches the catch-up worker made again (on their own socket, so that they never
        wait behind the stream's input while the book takes nothing): each a control `regenerated`
        and its wire frames, to the book, for the consumers catching up."""
        while True:
            try:
                frames = self.regenerated_input.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                meta = control.decode(frames[0].buffer)
                if meta["k"] != "regenerated":
                    raise DecodeError(f"unexpected control {meta['k']!r} on the catch-up input", 0, "frame")
                self._regenerated(meta, frames[1:])
            except DecodeError as exc:
                raise control.located(exc, f"{self.catch_up_address}: catch-up message") from exc

    def _regenerated(self, meta: dict, frames: list) -> None:
        message = wire.decode_message([f.buffer for f in frames], max_plain_values=self.max_plain_values)
        portion = (meta["stream"], meta["worker"], meta["workers"], meta["index"])
        item = Item(-1, meta["epoch"], meta["index"], frames, batch_size(message.batch), message.nbytes, portion)
        self.book.regenerated(item)

    def _count(self, message: Any, samples: int) -> None:
        """Count a batch taken from the input, per portion when it has one (for handover)."""
        self.input_batches, self.input_samples = self.input_batches + 1, self.input_samples + samples
        if message.portion is not None and message.epoch is not None:
            key = (message.portion.stream, message.epoch, message.portion.worker)
            self.received[key] = self.received.get(key, 0) + 1

    def _add(self, item: Item) -> None:
        self.book.add(item)
        self._items += 1

    def _end_epoch(self) -> None:
        self._add(Item(self._items, self._epoch or 0, self._pos))
        self._ends += 1
        self._epoch, self._pos = (self._epoch or 0) + 1, 0
        self.received = {key: n for key, n in self.received.items() if key[1] >= self._epoch}
        if self._finish_after is not None and self._ends >= self._finish_after:
            self.book.end_stream()

    def _on_finish(self, meta: dict) -> None:
        """The producer's `finish`: end the stream now (an open epoch gets its end first), or once
        meta["ends"] epochs have ended."""
        if meta["k"] != "finish":
            raise DecodeError(f"unexpected control {meta['k']!r} on the input", 0, "frame")
        ends = meta.get("ends")
        if isinstance(ends, int) and self._ends < ends:
            self._finish_after = ends
            return
        if self._pos:
            self._end_epoch()
        self.book.end_stream()


@dataclasses.dataclass(frozen=True)
class _Input(wire.Message):
    """A decoded input message, as the input's EpochBook sees it, with the `frames` it came in (what
    the consumers are sent)."""

    frames: Any = None

    @classmethod
    def of(cls, frames: list, message: wire.Message) -> _Input:
        return cls(**vars(message), frames=frames)
