"""What closing a sending plain-scheme socket (zpush, zrpush, zpub, zrpub over tcp or ipc) promises,
and how it keeps the promise.

    outlet = Outlet(sock, endpoints, addresses, lossy=False)  # before the socket binds or connects
    outlet.sent("batch" | "marker", nbytes, times)  # after each send
    outlet.peers()                                  # connections open now (end_epoch's marker count)
    delivery = outlet.finish(sock, linger, sndhwm)  # closes the socket (see below)
    delivery.check(url)                             # Undelivered when something may not have arrived

The promise: `finish` returns a clean Delivery only when every peer connected at close read
everything this socket had sent it, and (unless `lossy`: PUB, which drops for slow subscribers by
design) no peer went away during the stream with messages on their way to it. However slow a peer
is, finish waits for it while it is connected, unless `linger` seconds (None: no limit) pass first.
Otherwise the Delivery names each such peer, why (it went away, or `linger` passed), and an upper
bound on the batches that did not reach it.

How (libzmq 4.3 offers no queue length and no delivery receipt):
1. The socket monitor reports each connection with its descriptor; the Outlet duplicates it at once
   (after checking that its local or peer address is one of the socket's endpoints), so the
   connection outlives ZeroMQ's close of it. It never reads a duplicate while ZeroMQ may.
2. When ZeroMQ reports a connection's end, its duplicate tells how it ended: the peer closed cleanly
   with everything acknowledged (fine), or reset it, or left data unacknowledged (a loss).
3. At close, the socket is closed with linger -1 (or `linger`): ZeroMQ writes what it queued (only
   for connected peers: ZMQ_IMMEDIATE) and the monitor then reports MONITOR_STOPPED. On each open
   duplicate, shutdown(SHUT_WR) then sends the end of stream after the last byte, and what the peer
   sends back (its answers to ZMTP heartbeats) is read and discarded until the peer's ZeroMQ, having
   read everything, closes its side (2. decides). Closing a connection with unread heartbeat answers
   would reset it, and a peer's libzmq whose queue is full then discards what its socket received:
   hence the duplicates, and the reading.
The bound, per peer that did not read everything: its share of ZeroMQ's queue (at most sndhwm + 1
messages) plus the batches its unacknowledged socket buffer can hold (ceil(bytes / smallest batch
sent) + 1), capped by the batches sent. What a peer had received but not yet read is not counted.
"""

from __future__ import annotations

import math
import os
import select
import socket
import time
from dataclasses import dataclass, field

import zmq

from tensorcom.errors import Undelivered
from tensorcom.transport import _sockets as sockets

POLL = 0.1  # seconds between looks at the monitor and the connections while closing
STOP_GRACE = 1.0  # seconds past `linger` to wait for ZeroMQ's MONITOR_STOPPED


@dataclass
class Delivery:
    """The outcome of closing a sending socket: `peers` connected at close, `troubled` (peer -> what
    happened, for those that did not get everything), `counts` (peer -> at most that many batches
    did not reach it), `undelivered` (at most that many in all), `marker` (the last message sent was
    an end-of-epoch marker: it is among what did not arrive)."""

    peers: int = 0
    troubled: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    undelivered: int = 0
    marker: bool = False

    def check(self, url: str) -> None:
        """Undelivered (counts per peer; `.undelivered` the total bound) when some peer did not get
        everything, saying who, why and how much."""
        if not self.troubled:
            return
        tail = " and the end-of-epoch marker after them" if self.marker else ""
        who = "; ".join(f"{peer} {why}" for peer, why in self.troubled.items())
        error = Undelivered(
            f"close: {len(self.troubled)} peer(s) did not get everything ({who}; {self.peers} connected at "
            f"close): up to {self.undelivered} batch(es){tail} did not reach them (a bound: what ZeroMQ still "
            "held for them and what their hosts had not acknowledged; what a peer had received but not read "
            "is not counted)", url, counts=self.counts)
        error.undelivered = self.undelivered
        raise error


class _Link:
    """One connection: ZeroMQ's descriptor, our duplicate, the peer's name, how it ended."""

    def __init__(self, fd: int, dup: socket.socket, name: str):
        self.fd, self.dup, self.name = fd, dup, name
        self.state = "open"  # "done" (it read everything), "lost", "late"
        self.why = ""
        self.queued = False  # ZeroMQ may have dropped messages it queued for it
        self.unacked = 0

    def settle(self) -> bool:
        """Read what the peer sent (heartbeat answers, discarded) once ZeroMQ no longer does; True
        when the connection has ended: done if the peer closed it cleanly with everything
        acknowledged, lost if it reset it or left data unacknowledged."""
        try:
            while self.dup.recv(65536):
                pass
        except BlockingIOError:
            return False
        except OSError:
            self.end("lost", "went away before it had read everything")
            return True
        self.end_unless_unacknowledged("closed before it had read everything")
        return True

    def end_unless_unacknowledged(self, why: str) -> None:
        """End it: done when the peer acknowledged every byte, else lost (`why`)."""
        self.unacked = sockets.unacknowledged_bytes(self.dup.fileno()) or 0
        self.end("lost" if self.unacked else "done", why)

    def end(self, state: str, why: str = "") -> None:
        if self.state == "open":
            self.state, self.why = state, why
        self.dup.close()


class Outlet:
    """A sending socket's connections and sent messages, for a close that keeps the module's promise.

    `endpoints` and `addresses`: the Connection's lists (filled as it attaches), to tell this
    socket's connections from other descriptors; `lossy`: peers that leave during the stream are not
    reported (PUB)."""

    def __init__(self, sock: zmq.Socket, endpoints: list, addresses: list, lossy: bool = False):
        self.monitor = sockets.open_monitor(sock)
        self.endpoints, self.addresses, self.lossy = endpoints, addresses, lossy
        self.links: dict[int, _Link] = {}  # open connections by ZeroMQ's descriptor
        self.departed: list[_Link] = []  # connections that ended during the stream with a loss
        self.batches = self.markers = 0
        self.smallest = 0  # bytes of the smallest batch sent
        self.last_was_marker = False

    def sent(self, kind: str, nbytes: int, times: int = 1) -> None:
        """Count messages sent; keep up with the monitor (its queue is bounded)."""
        if kind == "batch":
            self.batches += times
            self.smallest = nbytes if not self.smallest else min(self.smallest, nbytes)
        else:
            self.markers += times
        self.last_was_marker = kind != "batch"
        self._drain()

    def peers(self) -> int:
        """Connections open now."""
        self._drain()
        return len(self.links)

    def finish(self, sock: zmq.Socket, linger: float | None, sndhwm: int) -> Delivery:
        """Close `sock` keeping the promise (module docstring), waiting at most `linger` s (None: as
        long as peers are connected; 0: discard what is queued, without a report)."""
        self._drain()
        if linger is not None and linger <= 0:
            sock.close(linger=0)
            self._release()
            return Delivery()
        deadline = None if linger is None else time.monotonic() + linger
        links = list(self.links.values())
        try:
            sock.close(linger=-1 if linger is None else int(linger * 1000))
            flushed = self._await_flush(deadline)
            self._await_ends(deadline, linger)
        finally:
            self._release()
        return self._delivery(links, flushed, sndhwm)

    def _drain(self) -> None:
        for event, fd in sockets.connection_events(self.monitor):
            self._event(event, fd)

    def _event(self, event: int, fd: int) -> None:
        """Follow one monitor event: a connection opened (duplicate it) or ended (see how)."""
        if event in sockets.OPENED:
            self._open(fd)
        elif event in sockets.ENDED and fd in self.links:
            link = self.links.pop(fd)
            if not link.settle():  # ZeroMQ closed it, the peer did not: end it here too
                link.end_unless_unacknowledged("was disconnected before it had read everything")
            if link.state == "lost" and not self.lossy:
                link.queued = True
                self.departed.append(link)

    def _open(self, fd: int) -> None:
        """Duplicate connection `fd` if it is one of this socket's (module docstring, 1.)."""
        try:
            copy = os.dup(fd)
        except OSError:
            return
        try:
            dup = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)
            return
        name = self._peer_name(dup)
        if name is None:
            dup.close()
            return
        dup.setblocking(False)
        stale = self.links.pop(fd, None)
        if stale is not None:
            stale.end("done")
        self.links[fd] = _Link(fd, dup, name)

    def _peer_name(self, dup: socket.socket) -> str | None:
        """The peer's address when `dup` is a connection of one of the socket's endpoints, else None."""
        try:
            local, peer = dup.getsockname(), dup.getpeername()
        except OSError:
            return None
        for endpoint, address in zip(self.endpoints, self.addresses):
            mine = local if endpoint.bind else peer
            if dup.family == socket.AF_UNIX:
                if isinstance(mine, str) and address == f"ipc://{mine}":
                    return f"ipc://{mine}"
            elif dup.family in (socket.AF_INET, socket.AF_INET6) and address.rsplit(":", 1)[-1] == str(mine[1]):
                return f"{peer[0]}:{peer[1]}"
        return None

    def _await_flush(self, deadline: float | None) -> bool:
        """Wait for ZeroMQ to be done with the closed socket (MONITOR_STOPPED), following the
        connections that end meanwhile (what ZeroMQ still had for them is dropped). False when it
        was not done by the deadline."""
        while True:
            remaining = None if deadline is None else deadline + STOP_GRACE - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            step = POLL if remaining is None else min(POLL, remaining)
            for event, fd in sockets.connection_events(self.monitor, step):
                if event == zmq.EVENT_MONITOR_STOPPED:
                    return deadline is None or time.monotonic() < deadline
                link = self.links.get(fd) if event in sockets.ENDED else None
                self._event(event, fd)
                if link is not None:
                    link.queued = True

    def _await_ends(self, deadline: float | None, linger: float | None) -> None:
        """Send each open connection's end of stream, then read until each peer has closed its side."""
        poller = select.poll()
        waiting = {}
        for link in self.links.values():
            try:
                link.dup.shutdown(socket.SHUT_WR)
            except OSError:
                link.end("lost", "went away")
                continue
            poller.register(link.dup.fileno(), select.POLLIN)
            waiting[link.dup.fileno()] = link
        while waiting and (deadline is None or time.monotonic() < deadline):
            for fd, _ in poller.poll(int(POLL * 1000)):
                if waiting[fd].settle():
                    poller.unregister(fd)
                    del waiting[fd]
            for link in waiting.values():
                link.unacked = sockets.unacknowledged_bytes(link.dup.fileno()) or link.unacked
        for link in waiting.values():
            if not link.settle():  # read its heartbeat answers first: closing over them would reset it
                link.end("late", f"had not read everything after {linger:g} s")

    def _release(self) -> None:
        """Close the monitor and every duplicate left."""
        self.monitor.close(linger=0)
        for link in self.links.values():
            link.end("done")
        self.links.clear()

    def _delivery(self, links: list[_Link], flushed: bool, sndhwm: int) -> Delivery:
        """The Delivery of a finished close (bound: module docstring)."""
        troubled = [link for link in self.departed + links if link.state not in ("open", "done")]
        counts: dict[str, int] = {}
        for link in troubled:
            bound = 0
            if link.queued or not flushed:
                bound = sndhwm + 1 if sndhwm > 0 else self.batches
            if link.unacked and self.smallest:
                bound += math.ceil(link.unacked / self.smallest) + 1
            counts[link.name] = min(counts.get(link.name, 0) + bound, self.batches)
        return Delivery(peers=len(links), troubled={link.name: link.why for link in troubled}, counts=counts,
                        undelivered=min(sum(counts.values()), self.batches),
                        marker=bool(troubled) and self.last_was_marker)
