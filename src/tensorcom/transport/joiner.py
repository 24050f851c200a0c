"""The consumer side of the sharing schemes: `zjoin://` to one or several zshare / zsplit servers.

    joiner = Joiner(endpoints, context=ctx, name="job-1", credit=4)
    item = joiner.next()      # a wire.Message (a batch), or PASS_END when the pass ended
    joiner.close()            # says "leave" to every server

One DEALER socket per server (brace expansion joins several). On connecting (and on every reconnect)
the consumer sends `join` with its credit (prefetch depth); the server answers `welcome` (its id, the
mode, the epoch and position the consumer starts at: `joined_at`), then sends at most `credit`
unacknowledged batches; the consumer acknowledges each batch when it hands it to its caller (with
`batch_size`, when it enters the rebatching buffer, which holds fewer than `batch_size` samples more). A pass ends when every server that
took part in it (had a session during it) has sent its epoch's `end`; a server whose end came first
is not read from meanwhile, so its next epoch waits in its queue.

Liveness: ZMTP heartbeats on each socket and a socket monitor. When a server's connection closes
(killed, host vanished, network dropped), what it had sent is still read; then its session is over
(a new session starts with the next welcome: a restarted server, or a reconnect). When the pass is waiting only on servers whose session ended,
`next()` raises PeerLost naming them; a restarted server is a new session (a new id) in the next
pass. Between passes, a consumer that had servers and has none alive for `liveness` seconds raises
PeerLost too; one that never had a server waits (a job started before its server). A server that
finished its stream (`bye`) ends the consumer's iteration with PeerLost saying so. `detached`
raises Detached with the server's reason.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from tensorcom import wire
from tensorcom.errors import Detached, PeerLost, RecvTimeout
from tensorcom.transport import envelope
from tensorcom.transport._heartbeats import apply_heartbeats
from tensorcom.transport._sockets import translated
from tensorcom.transport.rebatch import Rebatcher

PASS_END = object()
POLL_MS = 100
_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


class _Link:
    """One server: the DEALER socket, its monitor, and the current session's state."""

    def __init__(self, endpoint: Any, sock: Any, monitor: Any):
        self.url, self.sock, self.monitor = endpoint.url, sock, monitor
        self.server: str | None = None  # id of the current session's server
        self.connected = False
        self.connects = 0
        self.in_pass = False  # had a session during the current pass
        self.ended = False  # its end of the current pass arrived
        self.lost: str | None = None  # id of a server whose session ended during the pass
        self.finished = False  # the server said bye
        self.joined_at: tuple[int, int] | None = None
        self.received = 0  # the last delivery number received in this session

    def send(self, kind: str, **fields: Any) -> None:
        try:
            self.sock.send(envelope.encode(kind, **fields), zmq.NOBLOCK)
        except zmq.Again:
            pass  # no connection now: a new session starts with a join anyway


class Joiner:
    """A consumer of sharing servers (module docstring). `endpoints`: zjoin Endpoints; `context`: the
    zmq Context; `credit`: prefetch depth; `batch_size`: rebatch to this many samples (None: as
    sent); `liveness`: seconds; `timeout`: RecvTimeout after that long without a batch (None: wait);
    `max_message_size`: bytes; `observe`: join as an observer (status reports only, no batches);
    `secure(socket)`: applies security options before connecting."""

    def __init__(self, endpoints: list, *, context: zmq.Context, name: str, credit: int = 4,
                 batch_size: int | None = None, liveness: float | None = 10.0, timeout: float | None = None,
                 max_message_size: int | None = None, observe: bool = False, secure: Any = None):
        if isinstance(credit, bool) or not isinstance(credit, int) or credit < 1:
            raise ValueError(f"credit must be an int >= 1, got {credit!r}")
        self.name, self.credit, self.observe = name, credit, observe
        self.liveness, self.timeout, self.max_message_size = liveness, timeout, max_message_size
        self.rebatcher = None if batch_size is None else Rebatcher(batch_size)
        self.status: list[dict] = []  # the last status report (observers)
        self.dropped = 0  # messages of ended sessions dropped
        self.links: list[_Link] = []
        self._ready: list = []  # rebatched batches waiting to be handed out
        self._no_server_since: float | None = None
        self._template: Any = None  # the last received message, for rebatched ones' metadata
        try:
            for endpoint in endpoints:
                self.links.append(self._open(endpoint, context, secure))
        except BaseException:
            self.close(leave=False)
            raise

    def _open(self, endpoint: Any, context: zmq.Context, secure: Any) -> _Link:
        sock = context.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = sock.rcvhwm = 0  # the server's credit bounds what is queued
        apply_heartbeats(sock, self.liveness)
        if secure is not None:
            secure(sock)
        monitor = sock.get_monitor_socket(_EVENTS)
        link = _Link(endpoint, sock, monitor)
        with translated(endpoint.url, action="connect"):
            sock.connect(endpoint.zmq_address)
        self._join(link)
        return link

    def _join(self, link: _Link) -> None:
        link.send("join", name=self.name, credit=self.credit, observe=self.observe)

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
            self._watch_links()
            if self._pass_complete():
                return self._end_pass()
            self._check_lost()
            result = self._poll_once(deadline)
            if result is not None:
                return result

    def _poll_once(self, deadline: float | None) -> Any:
        poller = zmq.Poller()
        for link in self.links:
            poller.register(link.monitor, zmq.POLLIN)
            if not link.ended:
                poller.register(link.sock, zmq.POLLIN)
        wait = POLL_MS if deadline is None else max(0, min(POLL_MS, int((deadline - time.monotonic()) * 1000)))
        ready = dict(poller.poll(wait))
        for link in self.links:
            if link.sock in ready and link.monitor not in ready:
                result = self._take(link)
                if result is not None:
                    return result
        if deadline is not None and time.monotonic() >= deadline:
            raise RecvTimeout(f"nothing received within {self.timeout} s", self.url)
        return None

    @property
    def url(self) -> str:
        return ",".join(link.url for link in self.links)

    def _take(self, link: _Link) -> Any:
        """Read one message of `link`; a batch ready for the caller, or None."""
        frames = link.sock.recv_multipart(copy=False)
        meta = envelope.decode(frames[0].buffer)
        kind = meta["k"]
        if kind == "welcome":
            return self._welcome(link, meta)
        if link.server is None:  # from a session that is over
            self.dropped += 1
            return None
        if kind == "batch":
            return self._batch(link, meta, frames[1:])
        if kind == "end":
            link.ended = True
        elif kind == "status":
            self.status = meta["consumers"]
        elif kind == "bye":
            link.finished, link.server = True, None
        elif kind == "detached":
            raise Detached(f"the server detached this consumer: {meta['why']}", link.url)
        return None

    def _welcome(self, link: _Link, meta: dict) -> None:
        previous = link.lost or (link.server if link.server != meta["server"] else None)
        previous_lost = link.in_pass and not link.ended and previous is not None
        link.lost = previous
        link.server, link.received, link.finished = meta["server"], 0, False
        link.joined_at = (meta["epoch"], meta["pos"])
        if previous_lost:
            self._raise_lost([link])
        link.in_pass = True

    def _batch(self, link: _Link, meta: dict, frames: list) -> Any:
        message = wire.decode_message([f.buffer for f in frames], max_size=self.max_message_size)
        link.received = meta["n"]
        link.send("ack", upto=meta["n"])
        if self.rebatcher is None:
            return message
        self.rebatcher.push(message.batch)
        self._template = message
        return self._rebatched(self.rebatcher.pop()[0])

    def _rebatched(self, batch: Any) -> Any:
        return None if batch is None else dataclasses.replace(self._template, batch=batch)

    def refresh(self, seconds: float) -> list[dict]:
        """Read the servers' messages for `seconds` (an observer's loop) and return the last status:
        one report per consumer (name, epoch, pos, lag, samples_per_s, credit, free)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._watch_links()
            result = self._poll_once(None)
            if result is not None:  # not an observer after all: keep the batch for next()
                self._ready.append(result)
        return self.status

    # ---- passes and liveness ------------------------------------------------------------------

    def _watch_links(self) -> None:
        """Apply the monitors' events: connections up and down, re-join after a reconnect."""
        for link in self.links:
            while link.monitor.poll(0):
                event = recv_monitor_message(link.monitor)["event"]
                if event == zmq.EVENT_CONNECTED:
                    link.connected, link.connects = True, link.connects + 1
                    if link.connects > 1:
                        self._join(link)
                else:  # disconnected or closed: the session ends once its queue is read
                    link.connected = False
            if link.server is not None and not link.connected and not link.sock.poll(0):
                link.lost, link.server = link.server, None

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
            link.ended, link.lost = False, None
            link.in_pass = link.server is not None

    def _check_lost(self) -> None:
        """PeerLost when the pass waits only on ended sessions, or (between passes) when servers
        were there and none has been alive for `liveness` seconds."""
        waiting = [link for link in self.links if link.in_pass and not link.ended]
        if waiting and all(link.server is None for link in waiting):
            self._raise_lost(waiting)
        if any(link.server is not None or link.in_pass for link in self.links):
            self._no_server_since = None
            return
        gone = [link for link in self.links if link.lost is not None or link.finished]
        if not gone or self.liveness is None:
            return
        now = time.monotonic()
        self._no_server_since = self._no_server_since or now
        if now - self._no_server_since >= self.liveness:
            self._raise_lost(gone)

    def _raise_lost(self, links: list[_Link]) -> None:
        finished = [link for link in links if link.finished and link.lost is None]
        what = ", ".join(f"{link.url} (server {link.lost or 'gone'})" for link in links)
        self._reset_pass()
        for link in links:
            link.lost = None
        self._no_server_since = None
        if finished and len(finished) == len(links):
            raise PeerLost(f"the server finished its stream: {what}", self.url)
        raise PeerLost(f"the server(s) of this pass stopped: {what}", self.url)

    def close(self, leave: bool = True) -> None:
        """Say `leave` to every server (so they stop sending at once) and close the sockets."""
        for link in self.links:
            if leave and link.server is not None:
                link.send("leave")
            link.monitor.close(linger=0)
            link.sock.close(linger=1000 if leave else 0)  # the last acks and the leave get out
        self.links = []

