"""The consumer side of the sharing schemes: `zjoin://` to one or several zshare / zsplit servers.

    joiner = Joiner(endpoints, context=ctx, name="job-1", credit=4)
    item = joiner.next()      # a wire.Message (a batch), or PASS_END when the pass ended
    joiner.close()            # says "leave" to every server

One DEALER socket per server (brace expansion joins several), named by a routing id that is this
consumer's session (random per Joiner). On connecting the consumer sends `join` with its credit
(prefetch depth); the server answers `welcome` (its id, the mode, the epoch and position the consumer
starts at: `joined_at`), then sends at most `credit` unacknowledged batches, numbered; the consumer
acknowledges each batch when it hands it to its caller (with `batch_size`, when it enters the
rebatching buffer, which holds fewer than `batch_size` samples more); a malformed one too, handing
its caller a DecodeError naming the server's URL; and each epoch end when it reads it. Each ack
carries the caller's data-wait totals (`waits`, docs/monitoring.md). A pass ends
when every server that took part in it (had a session during it) has sent its epoch's `end`; a
server whose end came first is not read from meanwhile, so its next epoch waits in its queue.

Reconnects: a session outlives its connection (the rules: `_session`). After ZeroMQ
reconnects, the consumer joins again naming the server and the last delivery it took; the server
goes on with the session and sends again what was not acknowledged; duplicates are dropped by
number, so the caller gets every batch once, in order. Liveness: ZMTP heartbeats on each socket and
a socket monitor. When the pass waits only on servers whose connection is down and that gave no
sign of life (a message, or the connection before its heartbeat timeout) for the whole `liveness`
window (killed, host gone, a long partition), `next()` raises PeerLost naming them; the pass is not
over: a server that comes back goes on with its session, and the next call continues
(the one after waits another window). A server that answers a reconnect with a new session (a
restarted server: a new id, or one that gave this consumer up) ends the pass with PeerLost; the new
session belongs to the next pass. Between passes the same holds for the servers the consumer has
sessions with; one that never had a server waits (a job started before its server). A server that
finished its stream (`bye`) ends the consumer's iteration with PeerLost saying so. `detached`
raises Detached with the server's reason.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from tensorcom import settings, wire
from tensorcom.errors import DecodeError, Detached, PeerLost, RecvTimeout
from tensorcom.transport._sockets import joining_dealer, open_monitor, translated
from tensorcom.transport.rebatch import Rebatcher
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing._session import CONTINUED, ServerSession, check_liveness
from tensorcom.checks import positive
from tensorcom.transport.sharing.handoff import Reader, wants_handoff

PASS_END = object()
POLL_MS = 100
PAUSE_LIMIT = 5.0  # seconds without running the joiner after which it joins its servers again (at most liveness/2)
RECONNECT_MS = 1000  # a connect attempt lost in a partition is given up and retried after this
_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


class _Link:
    """One server: the DEALER socket, its monitor, the session (`_session`) and the pass."""

    def __init__(self, endpoint: Any, sock: Any, monitor: Any):
        self.url, self.sock, self.monitor = endpoint.url, sock, monitor
        self.session = ServerSession()
        self.in_pass = False  # had a session during the current pass
        self.ended = False  # its end of the current pass arrived
        self.finished: str | None = None  # the id of a server that said bye
        self.joined_at: tuple[int, int] | None = None
        self.shm_wanted = False  # ask for the shared-memory handoff in `join`
        self.shm_prefix: str | None = None  # the session's server hands batches over in shared memory
        self.record: dict | None = None  # the consumer state the next join carries (restart())

    @property
    def server(self) -> str | None:
        """The id of the server the current session is with."""
        return self.session.server

    def send(self, kind: str, **fields: Any) -> None:
        try:
            self.sock.send(control.encode(kind, **fields), zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection now: a new session starts with a join anyway


class Joiner:
    """A consumer of sharing servers (module docstring). `endpoints`: zjoin Endpoints; `context`: the
    zmq Context; `credit`: prefetch depth; `batch_size`: rebatch to this many samples (None: as
    sent); `liveness`: seconds; `timeout`: RecvTimeout after that long without a batch (None: wait);
    `max_message_size`: bytes; `observe`: join as an observer (status reports only, no batches);
    `secure(socket)`: applies security options before connecting; `waits`: the receiving loop's
    tensorcom.transport.data_wait.DataWait, whose totals go with each acknowledgement."""

    def __init__(self, endpoints: list, *, context: zmq.Context, name: str, credit: int = 4,
                 batch_size: int | None = None, liveness: float | None = 10.0, timeout: float | None = None,
                 max_message_size: int | None = None, observe: bool = False, secure: Any = None,
                 shm: bool | None = None, waits: Any = None):
        self.name, self.credit, self.observe = name, positive("credit", credit), observe
        check_liveness(liveness)
        self.session_id = secrets.token_hex(8)  # this consumer's routing id at every server
        self.liveness, self.timeout, self.max_message_size = liveness, timeout, max_message_size
        self.max_plain_values = settings.max_plain_values()  # read once, not per batch
        self.rebatcher = None if batch_size is None else Rebatcher(batch_size)
        self.status: list[dict] = []  # the last status report (observers)
        self.server_report: dict | None = None  # the server record of the last status, when it had one
        self.links: list[_Link] = []
        self._poller = zmq.Poller()  # every link's monitor; its socket while its pass has not ended
        self._ready: list = []  # rebatched batches waiting to be handed out
        self._template: Any = None  # the last received message, for rebatched ones' metadata
        self._shm_choice = shm  # None: ask servers on this host (loopback, ipc) unless $TENSORCOM_SHM says no
        self._reader = Reader()
        self._beat = time.monotonic()  # when this thread last ran the joiner (a pause shows as a gap)
        self.waits = waits  # the caller's DataWait, whose totals each ack reports
        try:
            for endpoint in endpoints:
                self._open(endpoint, context, secure)
        except BaseException:
            self.close(leave=False)
            raise

    def _open(self, endpoint: Any, context: zmq.Context, secure: Any) -> None:
        """Add a link to `endpoint`: a DEALER socket and its monitor (closed by close() from the
        moment they exist), connected, with a join on its way."""
        sock = joining_dealer(context, self.session_id, self.liveness, RECONNECT_MS)
        self._silence = max(0.0, sock.getsockopt(zmq.HEARTBEAT_TIMEOUT) / 1000)  # a dead connection goes then
        if secure is not None:
            secure(sock)
        monitor = open_monitor(sock, _EVENTS)
        link = _Link(endpoint, sock, monitor)
        link.shm_wanted = not self.observe and wants_handoff(self._shm_choice, endpoint)
        self.links.append(link)
        self._poller.register(monitor, zmq.POLLIN)
        with translated(endpoint.url, action="connect"):
            sock.connect(endpoint.zmq_address)
        self._join(link)

    def _join(self, link: _Link) -> None:
        offer = {"shm": True} if link.shm_wanted else {}
        record = {"record": link.record} if link.record is not None else {}
        link.send("join", name=self.name, credit=self.credit, observe=self.observe, session=self.session_id,
                  j=link.session.joining(), **link.session.join_fields(), **offer, **record)

    def restart(self, record: dict) -> None:
        """Start over with every server, carrying `record` (the consumer state a restarted job loaded,
        before its first pass): a zshare server that serves a stream it names sends first what the
        record lacks (tensorcom.transport.sharing.catch_up), then the live stream. What came of
        the sessions so far is dropped."""
        self._ready.clear()
        if self.rebatcher is not None:
            self.rebatcher = Rebatcher(self.rebatcher.size)
        for link in self.links:
            link.record, link.in_pass, link.ended, link.joined_at = record, False, False, None
            link.session.restart()
            self._join(link)

    @property
    def joined_at(self) -> dict[str, tuple[int, int] | None]:
        """Per server URL: (epoch, position) its current session started at."""
        return {link.url: link.joined_at for link in self.links}

    # ---- the next batch ---------------------------------------------------------------------

    def next(self) -> Any:
        """The next batch (a wire.Message) or PASS_END; PeerLost / RecvTimeout / TransportError."""
        if self._ready:
            return self._ready.pop(0)
        if self.rebatcher is not None and (batch := self._rebatched(self.rebatcher.pop()[0])) is not None:
            return batch
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            if self._pass_complete():
                return self._end_pass()
            self._check_lost()
            result = self._poll_once(deadline)
            if result is not None:
                return result

    def _poll_once(self, deadline: float | None) -> Any:
        """Wait (at most POLL_MS) for the links; apply connection events, then read one message of
        the first link that has one (a link with events is read in the next round): a batch, or None."""
        for link in self.links:
            self._poller.register(link.sock, 0 if link.ended else zmq.POLLIN)  # 0: unregistered
        wait = POLL_MS if deadline is None else max(0, min(POLL_MS, int((deadline - time.monotonic()) * 1000)))
        before = time.monotonic()
        ready = dict(self._poller.poll(wait))
        after = time.monotonic()
        if self._paused(before) or after - before > wait / 1000 + self._pause_limit():
            self._rejoin()
        self._beat = after
        result = None
        for link in self.links:
            if link.monitor in ready:
                self._watch(link)
            elif result is None and link.sock in ready:
                result = self._take(link)
        if result is None and deadline is not None and time.monotonic() >= deadline:
            raise RecvTimeout(f"nothing received within {self.timeout} s", self.url)
        return result

    @property
    def url(self) -> str:
        return ",".join(link.url for link in self.links)

    def _take(self, link: _Link) -> Any:
        """Read one message of `link`; a batch ready for the caller, or None. DecodeError naming the
        server's URL for a malformed message."""
        frames = link.sock.recv_multipart(copy=False)
        link.session.heard(time.monotonic())
        if self._paused(time.monotonic()):  # paused since the poll: what was queued waits for the answer
            self._rejoin()
        try:
            meta = control.decode(frames[0].buffer)
        except DecodeError as exc:
            raise control.located(exc, f"{link.url}: server message") from exc
        kind = meta["k"]
        if kind == "welcome":
            return self._welcome(link, meta)
        if kind in ("batch", "end") and not link.session.accept(_number(meta)):
            return None  # a duplicate, a gap the server fills, or a session that is over
        if kind == "batch":
            return self._batch(link, meta, frames[1:])
        if kind == "end":
            link.ended = True
            if "n" in meta:
                self._ack(link, meta["n"])
        elif kind == "status":
            self.status = meta["consumers"]
            self.server_report = meta["server"] if isinstance(meta.get("server"), dict) else None
        elif kind == "bye" and link.session.server is not None:
            link.finished = link.session.server
            link.session.finished()
        elif kind == "detached":
            raise Detached(f"the server detached this consumer: {meta['why']}", link.url)
        return None

    def _welcome(self, link: _Link, meta: dict) -> None:
        """A session that goes on, or a new one: one that replaces a session of this pass ends the
        pass with PeerLost (the new session belongs to the next pass)."""
        if not link.session.answers(meta.get("j")):
            return None  # an earlier join's answer: the latest join's follows
        previous = link.session.server
        n = _number(meta) or 0
        link.finished = None
        link.shm_prefix = None
        if link.shm_wanted and "shm" in meta:  # the server offers the handoff: take it if its probe reads
            link.shm_prefix = Reader.accepts(meta["shm"])
            link.send("shm", ok=link.shm_prefix is not None)
        if link.session.welcome(meta["server"], meta.get("resumed") is True, n) == CONTINUED:
            return
        link.record = None  # a later new session does not start over again
        link.joined_at = (meta["epoch"], meta["pos"])
        if link.in_pass and not link.ended and previous is not None:
            self._raise_replaced(link, previous)
        link.in_pass = True

    def _ack(self, link: _Link, upto: int) -> None:
        """Acknowledge deliveries up to `upto`, with the data-wait totals so far (no clock read)."""
        if self.waits is None:
            link.send("ack", upto=upto)
        else:
            link.send("ack", upto=upto, wait=self.waits.wait_total, step=self.waits.step_total)

    def _batch(self, link: _Link, meta: dict, frames: list) -> Any:
        """Acknowledge batch n (also when it turns out malformed: the error is what the caller gets
        for it, and the server's credit goes on) and decode it. A batch handed over in shared memory
        is copied out first: once acknowledged, its segment may be reused."""
        unreadable = None
        try:
            if "shm" in meta and not frames and link.shm_prefix is not None:
                views = self._reader.read(meta["shm"], link.shm_prefix)
            else:
                views = [f.buffer for f in frames]
        except DecodeError as exc:
            unreadable = exc
        self._ack(link, meta["n"])
        if unreadable is not None:
            where = f"{link.url}: batch {meta['n']}'s shared-memory reference"
            raise control.located(unreadable, where) from unreadable
        try:
            message = wire.decode_message(views, max_size=self.max_message_size, max_plain_values=self.max_plain_values)
        except DecodeError as exc:  # its frames are numbered from the first after the control frame
            raise control.located(exc, f"{link.url}: batch {meta['n']}'s wire message") from exc
        if self.rebatcher is None:
            return message
        try:
            self.rebatcher.push(message.batch)
        except ValueError as exc:  # a batch that cannot be cut into samples: name where it came from
            raise ValueError(f"{link.url}: batch {meta['n']}: {exc}") from exc
        self._template = message
        return self._rebatched(self.rebatcher.pop()[0])

    def _rebatched(self, batch: Any) -> Any:
        return None if batch is None else dataclasses.replace(self._template, batch=batch)

    def refresh(self, seconds: float) -> list[dict]:
        """Read the servers' messages for `seconds` (an observer's loop) and return the last status:
        one report per consumer (name, epoch, pos, lag, samples_per_s, credit, free)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            result = self._poll_once(None)
            if result is not None:  # not an observer after all: keep the batch for next()
                self._ready.append(result)
        return self.status

    # ---- passes and liveness ------------------------------------------------------------------

    def _pause_limit(self) -> float:
        return PAUSE_LIMIT if self.liveness is None else min(PAUSE_LIMIT, self.liveness / 2)

    def _paused(self, now: float) -> bool:
        """Whether this thread has not run the joiner for a while (the caller kept the batch long, or the
        process was stopped): a server may have given the session up meanwhile (split: handed what
        waits in the queue to other consumers)."""
        return now - self._beat > self._pause_limit()

    def _rejoin(self) -> None:
        """After a pause: join every server again and take nothing from the queues before its answer
        (what is still this consumer's comes again; what the server gave away does not)."""
        self._beat = time.monotonic()
        for link in self.links:
            if link.session.server is not None and not link.session.resuming:
                link.session.rejoin()
                self._join(link)

    def _watch(self, link: _Link) -> None:
        """Apply `link`'s connection events: up (handshake done; join again after a reconnect) and down."""
        while True:
            try:
                event = recv_monitor_message(link.monitor, zmq.NOBLOCK)["event"]
            except zmq.Again:
                return
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                if link.session.connected(time.monotonic()):
                    self._join(link)
            elif event in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                link.session.disconnected(time.monotonic(), self._silence)

    def _pass_complete(self) -> bool:
        taking_part = [link for link in self.links if link.in_pass]
        return bool(taking_part) and all(link.ended for link in taking_part)

    def _end_pass(self) -> Any:
        """PASS_END, after the rebatching buffer's last (smaller) batch when there is one."""
        self._reset_pass()
        batch = None if self.rebatcher is None else self.rebatcher.flush()[0]
        if batch is None:
            return PASS_END
        self._ready.append(PASS_END)
        return self._rebatched(batch)

    def _reset_pass(self) -> None:
        for link in self.links:
            link.ended = False
            link.in_pass = link.session.server is not None

    def _check_lost(self) -> None:
        """PeerLost when the pass (between passes: the sessions there are) waits only on servers that
        finished their stream or have been unreachable for the liveness window."""
        waiting = [link for link in self.links if link.in_pass and not link.ended]
        if not waiting:
            waiting = [link for link in self.links if link.session.server is not None or link.finished]
        now = time.monotonic()
        if not waiting or not all(link.finished or link.session.unreachable(now, self.liveness) for link in waiting):
            return
        if all(link.finished for link in waiting):
            what = ", ".join(f"{link.url} (server {link.finished})" for link in waiting)
            self._reset_pass()
            raise PeerLost(f"the server finished its stream: {what}", self.url)
        for link in waiting:
            link.session.excuse(now)
        what = ", ".join(f"{link.url} (server {link.session.server or link.finished})" for link in waiting)
        raise PeerLost(f"the server(s) of this pass unreachable for {self.liveness} s: {what}", self.url)

    def _raise_replaced(self, link: _Link, previous: str) -> None:
        """The server answered with a new session during the pass: the old one is over."""
        self._reset_pass()
        raise PeerLost(f"the server(s) of this pass stopped: {link.url} (server {previous}, now "
                       f"{link.session.server})", self.url)

    def close(self, leave: bool = True) -> None:
        """Say `leave` to every server (so they stop sending at once) and close the sockets."""
        for link in self.links:
            if leave and link.session.server is not None:
                link.send("leave")
            # stop the monitor first (as the server does): a lingering socket whose monitor socket is
            # closed under it may never send what it still holds
            link.sock.disable_monitor()
            link.monitor.close(linger=0)
            link.sock.close(linger=1000 if leave else 0)  # the last acks and the leave get out
        self.links = []
        self._poller = zmq.Poller()
        self._reader.close()


def _number(meta: dict) -> int | None:
    """The delivery number of a server message (None when it has none: an older server's end)."""
    n = meta.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) else None
