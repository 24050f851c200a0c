"""The sharing server of `zshare://` and `zsplit://`: one thread that owns a ROUTER socket bound to
the URLs, takes the stream it serves from an input socket, and hands each item to the consumers that
joined (`zjoin://`) as the books (`books`) decide (share: everyone, split: one each).

    server = ShareServer(endpoints, "share", input_address, min_consumers=2)
    server.start()                        # the thread runs until the stream ends and is consumed
    ... producers send wire messages to input_address (a PUSH socket), then the control frame "finish" ...
    result = server.wait(timeout=None)    # {"undelivered": {...}, "consumers": [...], ...}

Input: protocol-2 wire messages from one in-process producer (a Connection on `inproc://`), from the
serving workers of `tensorcom.serve` (`ipc://`) or from Ray actors (`tcp://`, tensorcom.ray); how they
become the served stream (epochs, handover of a restarted worker's portion, `finish`) is in
`_input`. Batches are forwarded as the frames received, so one encoding reaches every consumer
(zero-copy fan-out); a consumer on the server's host that accepted the shared-memory handoff gets a
reference to one copy in shared memory instead (`handoff`).

Sessions and liveness: a consumer's session outlives its connection. Its DEALER names itself with a
stable routing id (its session) and the ROUTER hands that id over to a new connection
(ROUTER_HANDOVER), so a consumer that reconnects is the same peer; its `join` then names this server
and the last delivery it has, and the session goes on: what it had not acknowledged is sent again
with the same numbers (it drops what it already has). ZMTP heartbeats on the ROUTER (answered by
ZeroMQ's I/O thread while Python is busy) and a socket monitor tell when a connection closed: nothing
is sent to that consumer then, and only when it stays away for the liveness window is it removed
(split mode: its unacknowledged batches go to others; HOLD_WINDOWS windows later when it had gone
quiet before its connection closed, unless it comes back first and says which it used; the book
remembers it, should it come back).
Restarted consumers: a join that carries a consumer state (`record`) starts a new session that
catches up first (tensorcom.transport.sharing.catch_up; split: the rule in books): what the record
lacks comes from the replay buffer, or is made again by the serving layer's hook `catch_up([Regenerate, ...])`,
whose worker sends the batches to a second input (`catch_up_address`, beside the input; read at
every round, so it never waits behind a stream that the book does not take); without a hook they
are given up.
A consumer's message that is not the protocol (bad magic, bad fields) is counted in `rejected` and
ignored; a malformed input message stops the thread (wait() raises DecodeError naming the input).
"""

from __future__ import annotations

import math
import secrets
import threading
import time
import warnings
from typing import Any, Iterable

import zmq
from zmq.utils.monitor import recv_monitor_message

from tensorcom import settings
from tensorcom.errors import DecodeError, Undelivered
from tensorcom.rates import Throttle
from tensorcom.transport._sockets import make_socket, open_monitor, sharing_router, translate, translated
from tensorcom.transport.epochs import EpochBook
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing._input import StreamInput
from tensorcom.transport.sharing._session import check_liveness
from tensorcom.transport.sharing.books import Send, Welcome, make_book
from tensorcom.transport.sharing.handoff import Arena

POLL_MS = 50
BYE_LINGER = 2.0  # seconds the last messages to live consumers get to leave after the stream ended
STATUS_INTERVAL = 1.0  # seconds between status messages to observers
HOLD_WINDOWS = 3  # split: a departed quiet consumer's batches stay its own this many liveness windows more
_GONE = zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


def check_delivered(result: dict, url: str) -> None:
    """Undelivered naming the consumers and counts of a wait() result's "undelivered", if any."""
    undelivered = result.get("undelivered") or {}
    if undelivered:
        what = ", ".join(f"{name}: {count}" for name, count in sorted(undelivered.items()))
        raise Undelivered(f"{sum(undelivered.values())} batches were not delivered ({what})", url, undelivered)


class ShareServer(StreamInput):
    """A sharing server thread (module docstring). `endpoints`: the binding zshare/zsplit Endpoints;
    `mode`: "share" or "split"; `input_address`: where the thread binds its PULL input (inproc or
    ipc); book options: min_consumers, replay, policy; `liveness`: seconds (heartbeat timeout);
    `context`: the zmq Context; `secure(socket)`: applies security options before binding."""

    def __init__(self, endpoints: list, mode: str, input_address: str, *, context: zmq.Context,
                 min_consumers: int = 1, replay: int = 16, policy: str = "pace", liveness: float | None = 10.0,
                 input_hwm: int = 2, secure: Any = None, shm: bool | None = None, catch_up: Any = None):
        check_liveness(liveness)
        self.book = make_book(mode, min_consumers=min_consumers, replay=replay, policy=policy)
        self.catch_up = catch_up  # the serving layer's: catch_up([Regenerate, ...]) makes them again; take_failed()
        self.max_plain_values = settings.max_plain_values()  # read once, not per input message
        self.url = ",".join(e.url for e in endpoints)
        self.server_id = secrets.token_hex(6)
        self._offers_shm = settings.shared_memory() if shm is None else shm
        self.arena: Arena | None = None  # made when the first consumer asks for the handoff
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rejected = 0  # messages from peers that were not the protocol
        self.lost = 0  # consumers removed because their connection stayed closed for the liveness window
        self.window = liveness or 0.0  # seconds a consumer whose connection closed keeps its session
        self.status: list[dict] = []  # the consumers' reports, refreshed by the thread
        self.report: dict | None = None  # the serving process's last report record, sent with each status
        self.addresses: list[str] = []
        self._fds: dict[Any, int] = {}  # peer -> the fd its messages came from
        self._heard: dict[Any, float] = {}  # peer -> when its last message was read
        self._observers: set = set()
        self._input_epochs = EpochBook(1)
        self._input_lock = threading.Lock()  # the input's book and counts: the thread and handover()
        self.received: dict[tuple[str, int, int], int] = {}  # (stream, epoch, worker) -> batches taken
        self.input_batches = self.input_samples = 0  # taken from the input in all
        self._epoch: int | None = None  # the served stream's epoch (the first input message's)
        self._pos = 0
        self._finish_after: int | None = None  # ends to wait for before the stream ends
        self._ahead: list | None = None  # an input message read ahead while the book took nothing
        self._ends = 0
        self._items = 0  # items added to the served stream
        self._status_due = Throttle(STATUS_INTERVAL, start=-math.inf)  # the first look reports at once
        self._thread: threading.Thread | None = None
        self._sockets: list = []
        self._poller = zmq.Poller()  # the router and the monitor always; the input while the book takes items
        try:
            self.router = self._own(sharing_router(context, liveness))
            self._silence = max(0.0, self.router.getsockopt(zmq.HEARTBEAT_TIMEOUT) / 1000)  # a dead connection goes then
            if secure is not None:
                secure(self.router)
            self.monitor = self._own(open_monitor(self.router, _GONE))
            for e in endpoints:
                with translated(e.url, action="bind"):
                    self.router.bind(e.zmq_address)
                    self.addresses.append(self.router.getsockopt_string(zmq.LAST_ENDPOINT))
            self.input = self._own(make_socket(context, "PULL", sndhwm=input_hwm, rcvhwm=input_hwm, timeout=None,
                                               max_message_size=None))
            with translated(input_address, action="bind"):
                self.input.bind(input_address)
            self.input_address = self.input.getsockopt_string(zmq.LAST_ENDPOINT)  # with the port "*" chose
            # no receive limit: what the catch-up worker sent before it exited must all reach the queue
            # (ZeroMQ drops what a PULL had not taken in when its sender's connection closes)
            self.regenerated_input = self._own(make_socket(context, "PULL", sndhwm=input_hwm, rcvhwm=0,
                                                           timeout=None, max_message_size=None))
            self.regenerated_input.bind(_beside(input_address))
            self.catch_up_address = self.regenerated_input.getsockopt_string(zmq.LAST_ENDPOINT)
            self._open_sessions(context, liveness)
        except BaseException:
            self._close_sockets()
            raise
        self._poller.register(self.router, zmq.POLLIN)
        self._poller.register(self.monitor, zmq.POLLIN)
        self._poller.register(self.regenerated_input, zmq.POLLIN)

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
        else:  # never started
            self._close_sockets()
            self.result = self._outcome()
        if self.error is not None:
            raise self.error
        return self.result

    def abort(self) -> dict:
        """Stop now (whatever is not delivered is counted in the result)."""
        self.stop.set()
        return self.wait()

    # ---- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.stop.is_set() and not (self.book.ended and self.book.done()):
                self._step()
            if self.book.ended and self.book.done():
                self._broadcast(control.encode("bye"))
                # stop the monitor first: a lingering socket whose monitor socket is closed under it
                # (as _close_sockets does next) may never send what it still holds, ends and byes included
                self.router.disable_monitor()
                self.router.close(linger=int(BYE_LINGER * 1000))  # the last ends and byes leave
        except BaseException as exc:  # reported to the caller by wait()
            self.error = exc
        finally:
            self.result = self._outcome()
            self._close_sockets()

    def _outcome(self) -> dict:
        """wait()'s result, from the book and the counts."""
        return {"undelivered": self.book.undelivered(), "consumers": self.book.reports(), "lost": self.lost,
                "rejected": self.rejected, "reassigned": self.book.reassigned}

    def _step(self) -> None:
        """One round: poll, take what arrived, send what the book allows."""
        taking = self.book.can_take()
        self._poller.register(self.input, zmq.POLLIN if taking or self._ahead is None else 0)  # 0: unregistered
        for peer, why in self.book.take_detached():
            self._send(peer, [control.encode("detached", why=why)])
        ready = dict(self._poller.poll(POLL_MS))
        if self.monitor in ready:
            self._on_monitor()
        if self.router in ready:
            self._on_consumer()
        if self.regenerated_input in ready:
            self._on_regenerated()
        if self._input_pending() or self.input in ready or (taking and self._ahead is not None):
            self._on_input()
        self._deliver()
        self._regenerate()
        for peer in self.book.expire(time.monotonic(), self.window, HOLD_WINDOWS * self.window):
            self._forget(peer, lost=True)
        self._maybe_status()

    def _deliver(self) -> None:
        for send in self.book.sends():
            self._send(send.peer, self._frames(send))

    def _regenerate(self) -> None:
        """Pass the batches that consumers catching up lack and the buffer no longer holds to the
        serving layer's `catch_up` (they come back on the catch-up input as `regenerated`); without
        one, and those its `take_failed()` hands back, they are given up (share: counted as lost)."""
        asks = self.book.take_regenerations()
        if asks and self.catch_up is not None:
            self.catch_up(asks)
        elif asks:
            self.book.give_up(asks)
        failed = self.catch_up.take_failed() if self.catch_up is not None else []
        if failed:
            self.book.give_up(failed)

    def _frames(self, send: Send) -> list:
        item = send.item
        if item.is_end:
            return [control.encode("end", n=send.number, epoch=item.epoch, batches=item.pos)]
        ref = self.arena.ref(send.peer, item) if self.arena is not None else None
        if ref is not None:  # a consumer on this host: the batch lies in shared memory
            return [control.encode("batch", n=send.number, epoch=item.epoch, pos=item.pos, shm=ref)]
        return [control.encode("batch", n=send.number, epoch=item.epoch, pos=item.pos), *item.frames]

    def _send(self, peer: Any, frames: list) -> None:
        """Send to one consumer; one without a connection now (EHOSTUNREACH) is down (a consumer's
        session waits for it to come back, an observer is forgotten)."""
        try:
            self.router.send_multipart([peer, *frames], copy=False)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise translate(exc, self.url, action="send to a consumer")
            self._down(peer)

    def _down(self, peer: Any) -> None:
        """`peer`'s connection closed: its session waits (book.disconnect: `quiet` when nothing came from
        it for the heartbeat timeout before, as when a partition or a pause cut it off, rather than
        when it closed while talking, as a killed process does); an observer is forgotten."""
        now = time.monotonic()
        self.book.disconnect(peer, now, quiet=now - self._heard.get(peer, 0.0) >= self._silence)
        if peer in self._observers:
            self._forget(peer, lost=False)

    def _broadcast(self, frame: bytes) -> None:
        for peer in list(self.book.consumers) + list(self._observers):
            self._send(peer, [frame])

    def _forget(self, peer: Any, lost: bool) -> None:
        """`peer` left (or expired: `lost`): the book and the handoff forget it."""
        self.book.remove(peer)
        self.lost += lost
        self._observers.discard(peer)
        self._fds.pop(peer, None)
        self._heard.pop(peer, None)
        if self.arena is not None:
            self.arena.forget(peer)

    def _on_monitor(self) -> None:
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            if event["event"] not in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                continue
            gone = [peer for peer, fd in self._fds.items() if fd == event["value"]]
            for peer in gone:
                self._fds.pop(peer)
                self._down(peer)

    def _on_consumer(self) -> None:
        now = time.monotonic()
        for frames in _waiting(self.router):
            peer = frames[0].bytes
            self._heard[peer] = now
            try:
                if len(frames) != 2:
                    raise DecodeError("a consumer message has exactly one frame", 0, "frame")
                self._handle(peer, frames[1], control.decode(frames[1].buffer))
            except DecodeError:
                self.rejected += 1

    def _handle(self, peer: bytes, frame: Any, meta: dict) -> None:
        kind = meta["k"]
        if kind == "join":
            self._on_monitor()  # the end of a reconnecting consumer's old connection comes first
            self._welcome(peer, frame.get(zmq.SRCFD), meta)
        elif kind == "ack":
            self.book.ack(peer, meta["upto"], control.data_wait(meta))
        elif kind == "leave":
            self._forget(peer, lost=False)
        elif kind == "shm" and self.arena is not None:
            self.arena.accept(peer, meta["ok"])
        else:
            raise DecodeError(f"a consumer may not send {kind!r}", 0, "frame")

    def _welcome(self, peer: bytes, fd: int, meta: dict) -> None:
        """A consumer (or observer) joined over connection `fd`: its session goes on when it has one
        here (a reconnect), else it starts; tell it where."""
        self._fds[peer] = fd
        if meta.get("observe"):
            self._observers.add(peer)
            joined = Welcome(self.book.mode, self.book.epoch, self.book.pos)
        else:
            if isinstance(meta.get("record"), dict) and "server" not in meta and peer in self.book.consumers:
                self._forget(peer, lost=False)  # it starts over with its record (a restarted job)
            joined = self._resumed(peer, meta) or self._joined(peer, meta)
        echo = {"j": meta["j"]} if isinstance(meta.get("j"), int) else {}  # which join this answers
        offer = {"shm": self.arena.offer()} if meta.get("shm") is True and self._has_arena() else {}
        self._send(peer, [control.encode("welcome", server=self.server_id, mode=joined.mode, epoch=joined.epoch,
                                          pos=joined.pos, resumed=joined.resumed, n=joined.n, **offer, **echo)])

    def _resumed(self, peer: bytes, meta: dict) -> Welcome | None:
        """The Welcome of a session that goes on (the consumer is known, or departed and names this
        server), else None."""
        here = meta.get("server") == self.server_id  # it had a session with this server
        if peer not in self.book.consumers and not here:
            return None
        upto = meta.get("upto", 0) if here else 0
        return self.book.resume(peer, upto if isinstance(upto, int) and not isinstance(upto, bool) else 0)

    def _joined(self, peer: bytes, meta: dict) -> Welcome:
        if self.arena is not None:
            self.arena.forget(peer)  # a new session answers the offer anew
        record = meta.get("record") if isinstance(meta.get("record"), dict) else None
        return self.book.join(peer, meta["name"], meta["credit"], record=record)

    def _maybe_status(self) -> None:
        if not self._status_due.due():
            return
        self.status = self.book.reports()
        if self._observers:
            frame = self._status_frame()
            for peer in list(self._observers):
                self._send(peer, [frame])

    def _status_frame(self) -> bytes:
        """The status for observers, with the serving process's report when it has one (left out when
        it holds what msgpack cannot encode: the report's shape is its owner's)."""
        if self.report is not None:
            try:
                return control.encode("status", consumers=self.status, server=self.report)
            except (TypeError, ValueError, OverflowError):
                pass
        return control.encode("status", consumers=self.status)

    def _has_arena(self) -> bool:
        """Whether the server offers the handoff, making its arena on first use (no shared memory, and
        no resource-tracker process, for a server whose consumers never ask)."""
        if self.arena is None and self._offers_shm:
            try:
                self.arena = Arena(self.server_id)
            except OSError as exc:
                self._offers_shm = False
                warnings.warn(f"sharing server {self.server_id}: shared memory unavailable ({exc}); consumers "
                              "get frames", stacklevel=2)
        return self.arena is not None

    def _close_sockets(self) -> None:
        self._close_sessions()
        for sock in self._sockets:
            sock.close(linger=0)
        self._sockets = []
        if self.arena is not None:
            self.arena.close()


def _beside(address: str) -> str:
    """Where the catch-up input binds, beside the input `address` (ipc, tcp or inproc)."""
    if address.startswith("tcp://"):
        return address.rsplit(":", 1)[0] + ":*"
    return address + "-catch-up"


def _waiting(sock: zmq.Socket) -> Iterable[list]:
    """The messages waiting on `sock` (zmq.Frame lists), without blocking (asking the socket's events
    first: cheaper than the zmq.Again of an empty socket, once per consumer message)."""
    while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
        yield sock.recv_multipart(zmq.NOBLOCK, copy=False)
