"""The sharing server of `zshare://` and `zsplit://`: one thread that owns a ROUTER socket bound to
the URLs, takes the stream it serves from an input socket, and hands each item to the consumers that
joined (`zjoin://`) as `tensorcom.transport.sharing` decides (share: everyone, split: one each).

    server = ShareServer(endpoints, "share", input_address, min_consumers=2)
    server.start()                        # the thread runs until the stream ends and is consumed
    ... producers send wire messages to input_address (a PUSH socket), then envelope "finish" ...
    result = server.wait(timeout=None)    # {"undelivered": {...}, "consumers": [...], ...}

Input: protocol-2 wire messages (batches and end-of-epoch markers) from one in-process producer (a
Connection on `inproc://`), from the serving workers of `tensorcom.serve` (`ipc://`) or from Ray actors
(`tcp://`, tensorcom.ray); their markers are counted with an `EpochBook` (a group of N workers ends an
epoch after N markers), and each epoch's end becomes one item of the served stream. The batches taken
of each share (stream, epoch, worker) are counted, so that a restarted worker can take its share over
where its predecessor stopped (`handover`). Batches are forwarded as the frames received, so one
encoding reaches every consumer (zero-copy fan-out). The control frame `finish` (optionally with
"ends": epochs to wait for first) ends the stream; batches sent after the last marker get an end.

Liveness: ZMTP heartbeats on the ROUTER (ZeroMQ's I/O thread answers them while Python is busy), and
a socket monitor: when a consumer's connection closes (killed, vanished, network dropped) it is
removed within the liveness timeout, and in split mode its unacknowledged batches go to others.
A message that is not the protocol (bad magic, bad fields) is counted in `rejected` and ignored.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any, Iterable

import zmq
from zmq.utils.monitor import recv_monitor_message

from tensorcom import wire
from tensorcom.errors import DecodeError, TransportError, Undelivered
from tensorcom.transport import envelope
from tensorcom.transport._heartbeats import apply_heartbeats
from tensorcom.transport._sockets import translated
from tensorcom.transport.batches import batch_size
from tensorcom.transport.epochs import EpochBook, Verdict
from tensorcom.transport.resume import ResumePlan
from tensorcom.transport.sharing import Item, Send, make_book

POLL_MS = 50
BYE_LINGER = 2.0  # seconds the last messages to live consumers get to leave after the stream ended
STATUS_INTERVAL = 1.0  # seconds between status messages to observers
_GONE = zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


def _samples(batch: Any) -> int:
    try:
        return batch_size(batch)
    except TypeError:
        return 0


def check_delivered(result: dict, url: str) -> None:
    """Undelivered naming the consumers and counts of a wait() result's "undelivered", if any."""
    undelivered = result.get("undelivered") or {}
    if undelivered:
        what = ", ".join(f"{name}: {count}" for name, count in sorted(undelivered.items()))
        raise Undelivered(f"{sum(undelivered.values())} batches were not delivered ({what})", url, undelivered)


class ShareServer:
    """A sharing server thread (module docstring). `endpoints`: the binding zshare/zsplit Endpoints;
    `mode`: "share" or "split"; `input_address`: where the thread binds its PULL input (inproc or
    ipc); book options: min_consumers, replay, policy; `liveness`: seconds (heartbeat timeout);
    `context`: the zmq Context; `secure(socket)`: applies security options before binding."""

    def __init__(self, endpoints: list, mode: str, input_address: str, *, context: zmq.Context,
                 min_consumers: int = 1, replay: int = 16, policy: str = "pace", liveness: float | None = 10.0,
                 input_hwm: int = 2, secure: Any = None):
        self.book = make_book(mode, min_consumers=min_consumers, replay=replay, policy=policy)
        self.url = ",".join(e.url for e in endpoints)
        self.server_id = secrets.token_hex(6)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rejected = 0  # messages from peers that were not the protocol
        self.lost = 0  # consumers removed because their connection closed
        self.status: list[dict] = []  # the consumers' reports, refreshed by the thread
        self.addresses: list[str] = []
        self._fds: dict[Any, int] = {}  # peer -> the fd its messages came from
        self._observers: set = set()
        self._input_epochs = EpochBook(1)
        self._input_lock = threading.Lock()  # the input's book and counts: the thread and handover()
        self.received: dict[tuple[str, int, int], int] = {}  # (stream, epoch, worker) -> batches taken
        self.input_batches = self.input_samples = 0  # taken from the input in all
        self._epoch: int | None = None  # the served stream's epoch (the first input message's)
        self._pos = 0
        self._finish_after: int | None = None  # ends to wait for before the stream ends
        self._ends = 0
        self._items = 0  # items added to the served stream
        self._next_status = 0.0
        self._thread: threading.Thread | None = None
        self._sockets: list = []
        try:
            self.router = self._own(context.socket(zmq.ROUTER))
            self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.router.sndhwm = self.router.rcvhwm = 0  # credit bounds what is queued
            apply_heartbeats(self.router, liveness)
            if secure is not None:
                secure(self.router)
            self.monitor = self._own(self.router.get_monitor_socket(_GONE))
            for e in endpoints:
                with translated(e.url, action="bind"):
                    self.router.bind(e.zmq_address)
                    self.addresses.append(self.router.getsockopt_string(zmq.LAST_ENDPOINT))
            self.input = self._own(context.socket(zmq.PULL))
            self.input.rcvhwm = input_hwm
            with translated(input_address, action="bind"):
                self.input.bind(input_address)
            self.input_address = self.input.getsockopt_string(zmq.LAST_ENDPOINT)  # with the port "*" chose
        except BaseException:
            self._close_sockets()
            raise

    def _own(self, sock: Any) -> Any:
        sock.linger = 0
        self._sockets.append(sock)
        return sock

    # ---- the caller's side ------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; from now on only it touches the sockets."""
        self._thread = threading.Thread(target=self._run, name=f"tensorcom-share-{self.server_id}", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> dict:
        """Wait for the thread to deliver everything (at most `timeout` seconds, then stop it); returns
        {"undelivered": {consumer: batches}, "consumers": reports, "lost": n, "rejected": n,
        "reassigned": n}. Re-raises an error of the thread."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.stop.set()
                self._thread.join()
        else:
            self._close_sockets()
        if self.error is not None:
            raise self.error
        return self.result

    def abort(self) -> dict:
        """Stop now (whatever is not delivered is counted in the result)."""
        self.stop.set()
        return self.wait()

    @property
    def input_epoch(self) -> int | None:
        """The epoch the input is in (its earlier epochs have ended); None before the first message."""
        return self._epoch

    def handover(self, stream: str, worker: int, workers: int, *, first_epoch: int = 0,
                 retire: Iterable[str] = ()) -> ResumePlan:
        """Give share `worker` of `workers` of `stream` to a new sender (a restarted worker): the sender
        that sent it so far and the senders `retire` (which may not have been heard from yet) are
        retired, so whatever still arrives from them is dropped; returns the new sender's plan: from
        the input's current epoch (`first_epoch` before any input) on, skip the batches of the share
        taken so far, and end each of those epochs again (the retired sender's markers are forgotten).
        Safe from any thread: every input message is either counted here or dropped."""
        with self._input_lock:
            current = self._input_epochs.slots.get((stream, worker))
            for sender in {*retire, current} - {None}:
                self._input_epochs.retire(sender)
            epoch = first_epoch if self._epoch is None else self._epoch
            skips = {(e, w): n for (s, e, w), n in self.received.items() if s == stream and w == worker and e >= epoch}
            return ResumePlan(stream, workers, epoch, skips)

    # ---- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.stop.is_set() and not (self.book.ended and self.book.done()):
                self._step()
            if self.book.ended and self.book.done():
                self._broadcast(envelope.encode("bye"))
                # stop the monitor first: a lingering socket whose monitor socket is closed under it
                # (as _close_sockets does next) may never send what it still holds, ends and byes included
                self.router.disable_monitor()
                self.router.close(linger=int(BYE_LINGER * 1000))  # the last ends and byes leave
        except BaseException as exc:  # reported to the caller by wait()
            self.error = exc
        finally:
            self.result = {"undelivered": self.book.undelivered(), "consumers": self.book.reports(),
                           "lost": self.lost, "rejected": self.rejected,
                           "reassigned": getattr(self.book, "reassigned", 0)}
            self._close_sockets()

    def _step(self) -> None:
        """One round: poll, take what arrived, send what the book allows."""
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.monitor, zmq.POLLIN)
        if self.book.can_take():
            poller.register(self.input, zmq.POLLIN)
        for peer, why in getattr(self.book, "take_detached", list)():
            self._send(peer, [envelope.encode("detached", why=why)])
        ready = dict(poller.poll(POLL_MS))
        if self.monitor in ready:
            self._on_monitor()
        if self.router in ready:
            self._on_consumer()
        if self.input in ready:
            self._on_input()
        self._deliver()
        self._maybe_status()

    def _deliver(self) -> None:
        for send in self.book.sends():
            self._send(send.peer, self._frames(send))

    def _frames(self, send: Send) -> list:
        item = send.item
        if item.is_end:
            return [envelope.encode("end", epoch=item.epoch, batches=item.pos)]
        return [envelope.encode("batch", n=send.number, epoch=item.epoch, pos=item.pos), *item.frames]

    def _send(self, peer: Any, frames: list) -> None:
        """Send to one consumer; a consumer that is gone (EHOSTUNREACH) is removed."""
        try:
            self.router.send_multipart([peer, *frames], copy=False)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise TransportError(f"send to a consumer failed: {exc.strerror}", self.url) from exc
            self._forget(peer, lost=True)

    def _broadcast(self, frame: bytes) -> None:
        for peer in list(self.book.consumers) + list(self._observers):
            self._send(peer, [frame])

    def _forget(self, peer: Any, lost: bool) -> None:
        if peer in self.book.consumers:
            self.book.remove(peer)
            self.lost += lost
        self._observers.discard(peer)
        self._fds.pop(peer, None)

    def _on_monitor(self) -> None:
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            gone = [peer for peer, fd in self._fds.items() if fd == event["value"]]
            for peer in gone:
                self._forget(peer, lost=True)

    def _on_consumer(self) -> None:
        while self.router.poll(0):
            frames = self.router.recv_multipart(copy=False)
            peer = frames[0].bytes
            try:
                self._handle(peer, frames[1], envelope.decode(frames[1].buffer) if len(frames) == 2 else None)
            except DecodeError:
                self.rejected += 1

    def _handle(self, peer: bytes, frame: Any, meta: dict | None) -> None:
        if meta is None:
            raise DecodeError("a consumer message has exactly one frame", 0, "frame")
        kind = meta["k"]
        if kind == "join" and peer not in self.book.consumers and peer not in self._observers:
            self._fds[peer] = frame.get(zmq.SRCFD)
            if meta.get("observe"):
                self._observers.add(peer)
                welcome = (self.book.mode, self.book.epoch, self.book.pos)
            else:
                joined = self.book.join(peer, meta["name"], meta["credit"])
                welcome = (joined.mode, joined.epoch, joined.pos)
            self._send(peer, [envelope.encode("welcome", server=self.server_id, mode=welcome[0],
                                              epoch=welcome[1], pos=welcome[2])])
        elif kind == "ack":
            self.book.ack(peer, meta["upto"])
        elif kind == "leave":
            self._forget(peer, lost=False)
        elif kind not in ("join",):
            raise DecodeError(f"a consumer may not send {kind!r}", 0, "frame")

    def _on_input(self) -> None:
        while self.book.can_take() and self.input.poll(0):
            frames = self.input.recv_multipart(copy=False)
            with self._input_lock:
                if envelope.is_control(frames[0].buffer):
                    self._on_finish(envelope.decode(frames[0].buffer))
                    continue
                self._admit(frames, wire.decode_message([f.buffer for f in frames]))
                while self.book.can_take() and (held := self._input_epochs.release()) is not None:
                    self._admit(held[0], held[1])

    def _admit(self, frames: list, message: Any) -> None:
        """One input message through the input's epoch book: batches become items, a completed
        epoch becomes an end item."""
        verdict = self._input_epochs.admit(_Input(frames, message))
        if verdict in (Verdict.HOLD, Verdict.DROP):
            return
        if self._epoch is None:
            self._epoch = message.epoch or 0
        if message.kind == "batch":
            samples = _samples(message.batch)
            self._add(Item(self._items, self._epoch, self._pos, frames, samples, message.nbytes))
            self._pos += 1
            self._input_epochs.delivered(message)
            self._count(message, samples)
        elif self._input_epochs.marker(message):
            self._end_epoch()

    def _count(self, message: Any, samples: int) -> None:
        """Count a batch taken from the input, per share when it has one (for handover)."""
        self.input_batches, self.input_samples = self.input_batches + 1, self.input_samples + samples
        if message.share is not None and message.epoch is not None:
            key = (message.share.stream, message.epoch, message.share.worker)
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

    def _maybe_status(self) -> None:
        now = time.monotonic()
        if now < self._next_status:
            return
        self._next_status = now + STATUS_INTERVAL
        self.status = self.book.reports()
        if self._observers:
            frame = envelope.encode("status", consumers=self.status)
            for peer in list(self._observers):
                self._send(peer, [frame])

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close(linger=0)
        self._sockets = []


class _Input:
    """An input message as the input's EpochBook sees it (sender, share, kind...), with its frames."""

    def __init__(self, frames: list, message: Any):
        self.frames, self.message = frames, message

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)

    def __getitem__(self, index: int) -> Any:
        return (self.frames, self.message)[index]
