"""A plain-scheme receiving socket's sessions: confirming what it took to each sender, dropping
duplicates (a sender's resends of what came after all), and waiting with liveness.

    inbound = Inbound(sock, url, liveness, book, context=ctx, name=receiver_id, secure=fn)
    frames = inbound.receive(hint)      # the next message's frames; RecvTimeout, PeerLost
    fresh = inbound.arrived(message)    # after decoding: False for a duplicate (skip it)
    inbound.close()                     # says bye to every sender, closes the link socket

A sharing server's input (`tensorcom.transport.sharing._input`) polls its socket itself: it calls
arrived() for each message it reads, tend() between reads (link events, confirmations owed, held
messages released), and forget(sender) for a sender whose portion another took over.

Links: the first message of a sender that names a `reply` (wire.Reply) makes this side connect its
link socket, one ROUTER for all senders (its routing id is this receiver's name; each sender's link is
addressed by its token), to the sender's acknowledgement socket. Over it go `ack` messages: the
transmissions taken since the last ack and the highest seen (`tensorcom.transport.session`), sent
every ACK_EVERY messages or ACK_DELAY seconds, with every marker, when nothing more is readable, and
whenever a receive is about to wait; ZeroMQ reconnects the link as it
reconnects data connections. ZMTP heartbeats on the link, and its socket monitor, say whether each
sender is reachable (`liveness.PeerWatch`); the data socket itself needs no monitor.

The socket is polled together with the link's monitor in steps of at most POLL seconds, so the data
socket's receive timeout (RCVTIMEO, which the Connection's `timeout` sets) still ends a wait with
RecvTimeout. On PeerLost the book ends the pass; the senders keep their sessions. Everything runs in
the caller's thread.
"""

from __future__ import annotations

import collections
import time
from types import SimpleNamespace
from typing import Any, Callable

import msgpack
import zmq

from tensorcom import wire
from tensorcom.errors import PeerLost, RecvTimeout
from tensorcom.transport import _sockets as sockets
from tensorcom.transport.epochs import EpochBook
from tensorcom.transport.liveness import PeerWatch
from tensorcom.transport.session import Arrivals

POLL = 0.1  # seconds between liveness checks while a receive waits
ACK_EVERY = 8  # messages taken before an ack goes out even if the receive does not wait
ACK_DELAY = 0.02  # seconds after which a message taken is confirmed with the next one
_POLLIN = int(zmq.POLLIN)
GAP_LIMIT = 4096  # a marker further than this past its sender's floor is not checked seq by seq
LINK_EVENTS = (zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
               | zmq.EVENT_MONITOR_STOPPED)


def pick_address(addresses: tuple, data_url: str) -> str | None:
    """The sender's acknowledgement address this receiver should use: the one of the same transport
    as its data endpoint (for tcp, one on the same host when there are several; `*`, a sender bound
    on every interface, becomes the host this receiver reached it at), else None."""
    transport = "ipc" if "+ipc://" in data_url else "tcp" if "+inproc://" not in data_url else "inproc"
    same = [a for a in addresses if a.startswith(transport + "://")]
    if transport != "tcp" or not same:
        return same[0] if same else None
    host = data_url.split("://", 1)[1].rsplit(":", 1)[0]
    if len(same) > 1:
        same = [a for a in same if a[6:].rsplit(":", 1)[0] == host] or same
    if same[0].startswith("tcp://*:"):  # bound on every interface: the host this receiver reached
        return f"tcp://{host}:{same[0].rsplit(':', 1)[1]}"
    return same[0]


class _Sender:
    """One sender's session as this receiver sees it."""

    def __init__(self, sender: str, token: str, address: str):
        self.name, self.token, self.address = sender, token, address
        self.rid = token.encode()
        self.arrivals = Arrivals()
        self.held: list = []  # a marker that lacks earlier batches, and what came after it
        self.linked: bool | None = None  # its link is up (None: not yet)
        self.retired = False  # forget(): unlinked once its link is down


class Inbound:
    """Sessions, acknowledgements and liveness of one receiving socket (module docstring). `book`: the
    Connection's epoch book; `liveness`: seconds, or None (no PeerLost); `name`: this receiver's id;
    `secure(socket)`: security options for the link socket (before it connects)."""

    def __init__(self, sock: zmq.Socket, url: str, liveness: float | None, book: EpochBook, *,
                 context: zmq.Context, name: str, secure: Callable | None = None):
        self.sock, self.url, self.book, self.liveness = sock, url, book, liveness
        self.context, self.name, self.secure = context, name, secure
        self.watch = PeerWatch(liveness) if liveness is not None else None
        self.senders: dict[str, _Sender] = {}
        self.by_address: dict[str, _Sender] = {}
        self.link: zmq.Socket | None = None
        self.monitor: zmq.Socket | None = None
        self.unacked = 0  # messages taken since the last ack
        self.ready: collections.deque = collections.deque()  # held messages released, in order
        self.flushed = 0.0  # when acks last went out
        self.duplicates = 0

    # ---- messages ---------------------------------------------------------------------------

    def receive(self, hint: str = "") -> list | None:
        """The frames of the next message (zmq.Frame, not copied), or None when a held message was
        released instead (next_ready() has it): waits in steps, confirming what was taken and
        applying the liveness rules; RecvTimeout after the socket's RCVTIMEO, PeerLost."""
        if self.ready:
            return None
        try:
            return self.sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
        except zmq.Again:
            self.flush()
            return self._wait(hint)

    def refused(self, frames: list) -> None:
        """A message that could not be decoded was handed to the caller as an error: confirm it
        (when its metadata can still be read), so that its sender does not send it again."""
        peeked = wire.peek_session(frames)
        if peeked is not None:
            sender, seq, kind, reply = peeked
            self.arrived(SimpleNamespace(sender=sender, seq=seq, kind=kind, reply=reply))

    def arrived(self, message: Any) -> bool:
        """Account for a decoded message: its sender's session, its confirmation; False when it is a
        batch this receiver already took (drop it)."""
        sender, reply = message.sender, message.reply
        if sender is None:
            return True
        now = time.monotonic()
        if reply is None:
            if self.watch is not None:
                self.watch.heard(sender, now)
            return True
        session = self.senders.get(sender) or self._open_session(sender, reply, now)
        if self.watch is not None:
            self.watch.heard(sender, now)
        seq = message.seq if message.kind == "batch" else None
        fresh = session.arrivals.arrive(seq, reply.floor, reply.tx)
        self.duplicates += not fresh
        self.unacked += 1
        if (self.unacked >= ACK_EVERY or seq is None or now - self.flushed >= ACK_DELAY
                or not zmq.zmq_poll([(self.sock, _POLLIN)], 0)):
            self.flush()  # caught up, or a marker: the caller may not come back for a while
        return fresh and not self._hold(session, message, now)

    # ---- markers that overtook lost batches ---------------------------------------------------

    def _hold(self, session: _Sender, message: Any, now: float) -> bool:
        """True when `message` waits: a marker whose epoch lacks batches this receiver may still get
        (resent after a dropped connection), or anything of its sender behind such a marker. A
        resent batch of the held epoch passes; the hold ends when the gap is filled or the sender's
        floor passes it (later transmissions and ticks tell). Meanwhile the pass waits on the sender
        as on any sender midway through its epoch (PeerLost while it is unreachable)."""
        if session.held:
            if message.kind == "batch" and message.epoch <= session.held[0].epoch:
                self._release(session, now)
                return False
            session.held.append(message)
        elif message.kind == "end_of_epoch" and self._lacks(session, message):
            session.held = [message]
        else:
            return False
        self._release(session, now)
        return True

    @staticmethod
    def _lacks(session: _Sender, marker: Any) -> bool:
        """Some batch before `marker` (seq below its seq) is neither taken here nor confirmed."""
        arrivals = session.arrivals
        if arrivals.floor >= marker.seq:
            return False
        if marker.seq - arrivals.floor > GAP_LIMIT:
            return True
        return any(seq not in arrivals.seen for seq in range(arrivals.floor, marker.seq))

    def _release(self, session: _Sender, now: float) -> None:
        if session.held and not self._lacks(session, session.held[0]):
            self.ready.extend(session.held)
            session.held = []

    def _release_due(self) -> None:
        now = time.monotonic()
        for session in self.senders.values():
            self._release(session, now)

    def next_ready(self) -> Any:
        """A held message released (its turn has come), or None."""
        return self.ready.popleft() if self.ready else None

    def flush(self) -> None:
        """Send each sender the confirmations it is owed (kept for later if its link is down)."""
        self.unacked, self.flushed = 0, time.monotonic()
        for session in self.senders.values():
            if session.arrivals.owed:
                self._send(session, "ack")

    def _send(self, session: _Sender, kind: str) -> None:
        txs, high = session.arrivals.take()
        body = msgpack.packb({"kind": kind, "token": session.token, "receiver": self.name, "txs": txs,
                              "high": high})
        try:
            self.link.send_multipart([session.rid, body], flags=zmq.NOBLOCK)
        except zmq.ZMQError:  # not connected now: confirm them with the next ack
            session.arrivals.keep(txs)

    # ---- links ------------------------------------------------------------------------------

    def _open_session(self, sender: str, reply: Any, now: float) -> _Sender:
        address = pick_address(reply.addresses, self.url)
        session = _Sender(sender, reply.token, address or "")
        self.senders[sender] = session
        if address is None:
            return session
        if self.link is None:
            self._open_link()
        self.link.setsockopt(zmq.CONNECT_ROUTING_ID, session.rid)
        with sockets.translated(address, action="connect"):
            self.link.connect(address)
        self.by_address[address] = session
        if self.watch is not None:
            self.watch.track(sender, now)
        return session

    def _open_link(self) -> None:
        self.link, self.monitor = sockets.make_link(
            self.context, self.name.encode(), self.liveness if self.liveness is not None else 10.0, LINK_EVENTS,
            secure=self.secure, ROUTER_MANDATORY=1)

    def _link_events(self) -> None:
        """Apply the link monitor's events to the watch, and the floors senders told over it."""
        if self.monitor is None:
            return
        now = time.monotonic()
        while zmq.zmq_poll([(self.link, _POLLIN)], 0):
            self._told(self.link.recv_multipart(), now)
        for event, _, address in sockets.monitor_events(self.monitor):
            session = self.by_address.get(address)
            if session is None:
                continue
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                session.linked = True
            elif event in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                session.linked = False
                if session.retired:
                    self._unlink(session)
            if self.watch is None:
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._send(session, "ack")
                continue
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.watch.linked(session.name, True, now)
                self._send(session, "ack")  # (re)attach at once: the sender may wait for word of us
            elif event in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                self.watch.linked(session.name, False, now)

    def _told(self, frames: list, now: float) -> None:
        """A message from a sender over the link: `floor` (its floor rose while it sent nothing: a
        marker held for batches below it is released); anything else is ignored."""
        try:
            body = msgpack.unpackb(frames[-1], raw=False)
            kind, token, floor = body["kind"], body["token"], body["floor"]
        except (ValueError, KeyError, TypeError, IndexError, msgpack.UnpackException):
            return
        session = next((s for s in self.senders.values() if s.token == token), None)
        if kind == "floor" and session is not None and isinstance(floor, int):
            session.arrivals.lift(floor)
            self._release(session, now)

    # ---- waiting ----------------------------------------------------------------------------

    def tend(self) -> None:
        """For a caller that polls the socket itself (a sharing server's input, which never raises
        PeerLost): apply the link's events, send the confirmations owed (at most every ACK_DELAY s:
        arrived() sends them sooner when it has reason to), and release held messages whose gap has
        filled (next_ready() has them)."""
        self._link_events()
        if time.monotonic() - self.flushed >= ACK_DELAY:
            self.flush()
        self._release_due()

    def forget(self, sender: str) -> None:
        """A sharing server's input: `sender` was retired (another sender took its portion over).
        Its session stays, so that what still comes from it is confirmed while its link is up and
        never opens a new link; once the link, having been up, is down (the sender closed or died)
        it is disconnected, so ZeroMQ stops reconnecting to a sender that is gone."""
        session = self.senders.get(sender)
        if session is not None:
            session.retired = True
            self._link_events()
            if session.linked is False:
                self._unlink(session)

    def _unlink(self, session: _Sender) -> None:
        if session.address and self.link is not None:
            self.by_address.pop(session.address, None)
            try:
                self.link.disconnect(session.address)
            except zmq.ZMQError:  # not connected (any more)
                pass
            session.address = ""

    def _wait(self, hint: str) -> list | None:
        """Poll until a message is readable; check liveness between steps."""
        millis = self.sock.getsockopt(zmq.RCVTIMEO)
        start = time.monotonic()
        deadline = None if millis < 0 else start + millis / 1000
        while True:
            step = POLL if deadline is None else max(0.0, min(POLL, deadline - time.monotonic()))
            if self.sock.poll(int(step * 1000), zmq.POLLIN):
                try:
                    return self.sock.recv_multipart(copy=False, flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
            self._link_events()
            self.flush()
            self._release_due()
            if self.ready:
                return None
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise RecvTimeout(f"nothing received within {millis / 1000:g} s{hint}", self.url)
            self._check(now, hint)

    def _check(self, now: float, hint: str) -> None:
        """PeerLost when the rules say the pass's senders are gone; the book ends the pass."""
        if self.watch is None:
            return
        verdict = self.watch.lost(self.book.waiting_on(), self.book.ended, now)
        if verdict is None:
            return
        senders, why = verdict
        self.book.abandon(senders)
        self.watch.excused(now)
        error = PeerLost(f"the senders of this pass are gone, the pass ends here: {why}{hint}", self.url)
        error.senders = senders
        raise error

    def close(self) -> None:
        """Say bye to every sender (what was taken is confirmed with it) and close the link socket."""
        if self.link is None:
            return
        for session in self.senders.values():
            if session.address:
                self._send(session, "bye")
        self.monitor.close()
        self.link.close(linger=200)
        self.link = self.monitor = None

    def __repr__(self) -> str:
        return f"<Inbound {self.url} senders={sorted(self.senders)}>"
