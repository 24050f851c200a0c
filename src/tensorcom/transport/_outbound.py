"""A plain-scheme sending socket's sessions: what it keeps until receivers confirm it, what it resends,
and what closing it promises.

    out = Outbound(sock, send_frames, name=..., keeps=True, liveness=10.0, context=ctx, secure=fn)
    out.listen(endpoint, address)          # after each bind/connect of the data socket
    reply = out.reply(seq)                 # before each message: waits for room; the wire.Reply to send
    out.sent(key, frames, nbytes)          # after it
    delivery = out.finish(linger)          # close: waits for confirmations, closes the sockets

The acknowledgement socket is a ROUTER bound beside the data socket: on the host (for tcp) whose
interface reaches the data endpoint, or at an ipc path beside it; inproc streams have none (no
connection there can drop). Receivers connect to it and send `ack` (transmissions taken, highest
seen) and `bye` messages (`_inbound`). The rules of keeping and resending are
`tensorcom.transport.session.SendLog`'s; `keeps` False (PUB/SUB, lossy by design) keeps nothing, and
the socket then only tells receivers that the sender is reachable.

What close promises: with receivers that confirm (every tensorcom receiver), it returns once they
confirmed every message, resending what a dropped connection lost, waiting at most `linger` seconds
(None: while some receiver is attached or a data connection is open: a partitioned receiver
comes back), and raises
Undelivered otherwise, naming the receivers and exactly how many batches were not confirmed. With
only receivers that do not confirm (tensorcom 0.1: none confirmed anything within the liveness
window), it lets ZeroMQ write out its queue within `linger` and cannot say more.
"""

from __future__ import annotations

import collections
import secrets
import socket
import time
from typing import Any, Callable

import msgpack
import zmq

from tensorcom import wire
from tensorcom.errors import TransportError
from tensorcom.transport import _sockets as sockets
from tensorcom.transport._delivery import Delivery
from tensorcom.transport._watch import Watch
from tensorcom.transport.session import SendLog

POLL = 0.1  # seconds between looks at the acknowledgements while waiting
TICK_AFTER = 0.5  # seconds without a transmission before unconfirmed ones are probed with a tick
ACK_WAIT = 0.05  # seconds before a tick tells receivers a floor that rose since the last transmission
_POLLIN = int(zmq.POLLIN)
REJOIN_GRACE = 2.0  # seconds close() waits for a receiver to reconnect once none is attached or connected
UNVOUCHED_KEEP = 64  # messages kept while no receiver ever confirmed anything (tensorcom 0.1 peers)
DATA_EVENTS = sockets.MONITORED
LINK_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_MONITOR_STOPPED


def ack_address(endpoint: Any, address: str, token: str) -> str | None:
    """Where to bind the acknowledgement socket for data endpoint `endpoint` (attached at `address`);
    None for inproc."""
    if endpoint.transport == "inproc":
        return None
    if endpoint.transport == "ipc":
        return f"{address}.ack-{token[:8]}"
    host, port = address.split("://", 1)[1].rsplit(":", 1)
    if not endpoint.bind:
        host = _local_host(host.strip("[]"), int(port))
    return f"tcp://{host}:*" if ":" not in host else f"tcp://[{host}]:*"


def _local_host(host: str, port: int) -> str:
    """The local address this host uses to reach `host`:`port` (a routing look-up; nothing is sent)."""
    try:
        family, _, _, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class _Receiver:
    """A confirming receiver as the sender sees it: its link's descriptor, when it went away, and the
    floor it was told over its link."""

    def __init__(self):
        self.fd = -1
        self.away_since: float | None = None
        self.told = 0


class Outbound:
    """Sessions of one sending socket (module docstring). `send_frames(frames)` sends one message on
    the data socket if it takes it without waiting (False otherwise); `keeps`: keep messages for resending (False: lossy PUB); `liveness`: seconds a
    receiver may be unreachable before it counts as gone (None: 10)."""

    def __init__(self, sock: zmq.Socket, send_frames: Callable[[list], bool], *, name: str, keeps: bool,
                 liveness: float | None, context: zmq.Context, next_seq: Callable[[], int],
                 secure: Callable | None = None):
        self.sock, self.send_frames, self.name, self.keeps = sock, send_frames, name, keeps
        self.next_seq = next_seq  # the seq the sender's next batch gets (a tick carries it)
        self.last_sent = self.last_tick = 0.0
        self.floor_sent = 0  # the floor every data connection was told (by a tick, or the only one's last message)
        self.probe_soon = False  # a suspect was resent alone: a tick right behind it proves it
        self.connections_seen = 0  # data connections when the resend rule was last applied
        self.unsent = False  # a resend found the queue full
        self.liveness = 10.0 if liveness is None else liveness
        self.context, self.secure = context, secure
        self.token = secrets.token_hex(8)
        self.log = SendLog()
        self.addresses: list[str] = []
        self.urls: list[str] = []  # the data endpoints' URLs, for error messages
        self.receivers: dict[str, _Receiver] = {}
        self.ever_attached = False
        self.marks: collections.deque = collections.deque()  # (time, log.tx) while unsure ones wait to settle
        self.news = False  # acknowledgements or events taken since the resend rule was last applied
        self.watch = Watch(f"tensorcom-floor-{name}")  # after a marker, while the caller is away
        self.open_fds: set[int] = set()
        self.data_monitor = sockets.open_monitor(sock, DATA_EVENTS)
        self.link: zmq.Socket | None = None
        self.link_monitor: zmq.Socket | None = None

    # ---- setup ------------------------------------------------------------------------------

    def listen(self, endpoint: Any, address: str) -> None:
        """Bind the acknowledgement socket for data endpoint `endpoint` (attached at `address`)."""
        self.watch.stop()
        self.urls.append(endpoint.url)
        where = ack_address(endpoint, address, self.token)
        if where is None:
            return
        if self.link is None:
            self._open_link()
        with sockets.translated(where, action="bind"):
            self.link.bind(where)
            bound = self.link.getsockopt_string(zmq.LAST_ENDPOINT)
        if endpoint.bind and bound.startswith("tcp://0.0.0.0:"):
            bound = "tcp://*:" + bound.rsplit(":", 1)[1]  # receivers use the host they reached us at
        self.addresses.append(bound)

    def _open_link(self) -> None:
        self.link, self.link_monitor = sockets.make_link(self.context, self.token.encode(), self.liveness,
                                                         LINK_EVENTS, secure=self.secure, ROUTER_HANDOVER=1)

    # ---- sending ----------------------------------------------------------------------------

    def reply(self, seq: int, deadline: float | None = None) -> wire.Reply | None:
        """The Reply for the next message (None when there is no acknowledgement socket); waits
        first, until `deadline`, while the log is full and every connection has a confirming receiver."""
        if not self.addresses:
            return None
        self.pump()
        while self.keeps and self.log.full:
            if not self.log.vouched:
                self.log.drop_oldest()
                continue
            self._wait_step(deadline, "room for more batches")
        floor = self.log.floor(seq)
        if self.log.connections <= 1:  # (round-robin over several: the others were not told)
            self.floor_sent = floor
        return wire.Reply(tuple(self.addresses), self.token, floor, self.log.tx)

    def sent(self, key: tuple, frames: list, nbytes: int) -> None:
        """Record a message sent with the last reply() (its `key`: ("batch", seq) or ("marker", ...))."""
        if not self.addresses:
            return
        if not self.keeps:
            self.log.tx += 1
            return
        self.log.transmit(key, frames, nbytes)
        self.last_sent = time.monotonic()
        if not self.ever_attached and len(self.log.entries) > UNVOUCHED_KEEP and self.log.connections:
            self.log.drop_oldest()  # receivers that never confirm (tensorcom 0.1): keep only a few
        if key[0] == "marker" and self.link is not None:  # last: the watch owns everything until stopped
            self.watch.start(self._watch_step, ended=(zmq.ZMQError, AttributeError))  # (closed under it)

    def peers(self) -> int:
        """Data connections open now."""
        self.watch.stop()
        self._data_events()
        return len(self.open_fds)

    # ---- acknowledgements ------------------------------------------------------------------

    def pump(self) -> None:
        """Take every waiting acknowledgement and connection event; resend what is lost."""
        self.watch.stop()
        now = self._absorb()
        if now is None:
            return
        if self.news or self.unsent or self.log.connections != self.connections_seen:  # else the proof
            self.connections_seen, self.unsent, self.news = self.log.connections, False, False  # cannot
            for entry in self.log.lost():  # have changed
                self.unsent = not self._resend(entry) or self.unsent
        self._tick_if_stalled(now)

    def _absorb(self) -> float | None:
        """Take every waiting acknowledgement and connection event (sending nothing on the data socket);
        the time it did, None when there is no acknowledgement socket."""
        self._data_events()
        if self.link is None:
            return None
        now = time.monotonic()
        news = self._link_events(now)
        while zmq.zmq_poll([(self.link, _POLLIN)], 0):
            self._take(self.link.recv_multipart(copy=False), now)
            news = True
        self._detach_gone(now)
        self.news = self._settle(now) or news or self.news
        return now

    def _watch_step(self) -> bool:
        """The watch's step after a marker, while the caller sends nothing: take acknowledgements and
        tell receivers the floor as it rises, over their links (a receiver holds a marker until the
        floor passes the batches it lacks: with several receivers, those the others took). True once
        everything is confirmed and told. It never touches the data socket, which stays the caller's."""
        if self.link is None:
            return True
        self._absorb()
        return self._tell_floor() and not self.log.entries

    def _tell_floor(self) -> bool:
        """Send each attached receiver a `floor` message over its link when the floor rose past what
        its link told it; True when every one was told the floor. What the data connections were told
        does not count: a tick or a marker goes to one connection of several, or none when its queue
        is full, so a receiver holding a marker could wait for ever on a floor it was never told. A
        receiver whose link is down is told once it is back (or detached after `liveness`): until then
        this is False, so the watch goes on."""
        floor = self.log.floor(self.next_seq())
        body = None
        for receiver, state in self.receivers.items():
            if state.told >= floor or state.away_since is not None:
                continue
            body = body or msgpack.packb({"kind": "floor", "token": self.token, "floor": floor})
            try:
                self.link.send_multipart([receiver.encode(), body], flags=zmq.NOBLOCK)
                state.told = floor
            except zmq.Again:  # its link's queue is full: it is not reading; the next step tries again
                pass
        return all(state.told >= floor for state in self.receivers.values())

    def _settle(self, now: float) -> bool:
        """Tell the log which transmissions went out a liveness window ago (session.SendLog.settle);
        True when that made some provable."""
        if not self.log.unsure:
            self.marks.clear()
            return False
        if not self.marks or now - self.marks[-1][0] >= POLL:
            self.marks.append((now, self.log.tx))
        settled = None
        while self.marks and now - self.marks[0][0] >= self.liveness:
            settled = self.marks.popleft()[1]
        return settled is not None and self.log.settle(settled)

    def _take(self, frames: list, now: float) -> None:
        """One message from a receiver's link: `ack` or `bye` (anything else is ignored)."""
        try:
            body = msgpack.unpackb(frames[-1].bytes, raw=False)
            kind, receiver, txs, high = body["kind"], body["receiver"], body["txs"], body["high"]
            if body.get("token") != self.token or not isinstance(receiver, str):
                return
        except (ValueError, KeyError, TypeError, msgpack.UnpackException):
            return
        self.ever_attached = True
        state = self.receivers.setdefault(receiver, _Receiver())
        fd = frames[-1].get(zmq.SRCFD)
        if fd != state.fd:  # a new link connection: what the old one was told may have been lost with it
            state.told = 0
        state.fd, state.away_since = fd, None
        self.log.confirm(receiver, [t for t in txs if isinstance(t, int)], high if isinstance(high, int) else -1)
        if kind == "bye":
            self.log.detach(receiver)
            del self.receivers[receiver]

    def _resend(self, entry: Any) -> bool:
        reply = wire.Reply(tuple(self.addresses), self.token, self.log.floor(self.next_seq()), self.log.tx)
        frames = wire.with_reply(entry.frames, reply)
        if not self.send_frames(frames):  # the queue is full: the next pump tries again
            return False
        self.log.transmit(entry.key, frames, entry.nbytes)
        self.last_sent = time.monotonic()
        self.probe_soon = entry.sends > 1
        return True

    def _tick_if_stalled(self, now: float) -> None:
        """Send a tick when transmissions stay unconfirmed and nothing was sent for TICK_AFTER s: if
        they were lost on a dropped connection, no later one would show it."""
        if not self.keeps or not self.log.vouched:
            return
        floor_news = self.log.floor(self.next_seq()) > self.floor_sent  # receivers may hold a marker for it
        if not self.log.entries and not floor_news:
            return
        wait = ACK_WAIT if floor_news or self.probe_soon else TICK_AFTER
        if now - self.last_sent < wait or now - self.last_tick < wait:
            return
        self.last_tick, self.probe_soon = now, False
        reply = wire.Reply(tuple(self.addresses), self.token, self.log.floor(self.next_seq()), self.log.tx)
        self.floor_sent = reply.floor
        tick = wire.encode_tick(seq=self.next_seq(), epoch=0, sender=self.name, reply=reply)
        for _ in range(max(self.log.connections, 1)):  # round-robin: one per connection
            self.send_frames(tick)  # a full queue has a later transmission in it already
        self.log.tx += 1

    def _data_events(self) -> None:
        for event, fd, _ in sockets.monitor_events(self.data_monitor):
            if event in sockets.OPENED:
                self.open_fds.add(fd)
            elif event in sockets.ENDED:
                self.open_fds.discard(fd)
        self.log.connections = len(self.open_fds)

    def _link_events(self, now: float) -> bool:
        """Apply the link monitor's events; True when there were some."""
        events = sockets.monitor_events(self.link_monitor)
        for event, fd, _ in events:
            if event == zmq.EVENT_DISCONNECTED:
                for receiver, state in self.receivers.items():
                    if state.fd == fd:
                        state.away_since, state.told = now, 0  # what went to it may be lost with the link
                        self.log.leave(receiver)  # vouches for no data connection until it is back
        return bool(events)

    def _detach_gone(self, now: float) -> None:
        for receiver, state in list(self.receivers.items()):
            if state.away_since is not None and now - state.away_since >= self.liveness:
                self.log.detach(receiver)
                del self.receivers[receiver]

    def _wait_step(self, deadline: float | None, what: str) -> None:
        """Wait up to POLL s for an acknowledgement, then pump; TransportError past `deadline`."""
        if deadline is not None and time.monotonic() >= deadline:
            raise TransportError(f"no {what} within the timeout (receivers not reading?)", ",".join(self.urls))
        self.link.poll(int(POLL * 1000), zmq.POLLIN)
        self.pump()

    # ---- closing ----------------------------------------------------------------------------

    def finish(self, linger: float | None) -> Delivery:
        """Close the data socket and the acknowledgement socket keeping the module's promise."""
        deadline = None if linger is None else time.monotonic() + linger
        self.watch.stop()
        try:
            if linger is not None and linger <= 0:
                self.sock.close(linger=0)
                return Delivery()
            confirmed = self._await_confirmations(deadline)
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            flush = not self.keeps or (not confirmed and not self.ever_attached)  # PUB, or 0.1 peers
            self.sock.close(linger=0 if not flush else -1 if remaining is None else int(remaining * 1000))
            return Delivery() if (confirmed and not self.log.refused) or not self.ever_attached else self._delivery()
        finally:
            self._close_link()

    def _await_confirmations(self, deadline: float | None) -> bool:
        """Wait until everything kept is confirmed; False when nothing can vouch for it (no receiver
        confirmed anything within the liveness window: tensorcom 0.1 peers) or something stays
        unconfirmed at the deadline or after every receiver is gone."""
        self.pump()
        if not self.keeps:
            return False
        first_word = time.monotonic() + self.liveness
        alone_since = None  # since when no receiver is attached and no data connection open
        while self.log.entries:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            alone = not self.receivers and not self.log.connections
            alone_since = (alone_since or now) if alone else None
            if self.ever_attached and alone and now - alone_since >= min(REJOIN_GRACE, self.liveness):
                return False  # they left (detached after the liveness window) and did not reconnect
            if not self.ever_attached and now >= first_word:
                return False
            self.link.poll(int(POLL * 1000), zmq.POLLIN)
            self.pump()
        return True

    def _delivery(self) -> Delivery:
        batches = self.log.outstanding("batch") + self.log.refused
        marker = self.log.outstanding("marker") > 0
        if not batches and not marker:
            return Delivery(peers=len(self.receivers))
        who = ", ".join(sorted(self.receivers)) or "every receiver left"
        if self.log.outstanding() == 0:
            why = f"refused {self.log.refused} (a frame over its max_message_size?)"
        elif self.receivers:
            why = "did not confirm them in time"
        else:
            why = "went away before confirming them"
        return Delivery(peers=len(self.receivers), troubled={who: why}, counts={who: batches},
                        undelivered=batches, marker=marker)

    def _close_link(self) -> None:
        self.data_monitor.close()
        if self.link is not None:
            self.link_monitor.close()
            self.link.close(linger=0)
            self.link = None

    def __repr__(self) -> str:
        return f"<Outbound {self.name} kept={len(self.log.entries)} receivers={sorted(self.receivers)}>"


def own_frames(frames: list) -> list:
    """`frames` with every frame that views the caller's memory copied (so a kept message stays what
    it was at send time, whatever the caller does with its arrays)."""
    return [f if isinstance(f, bytes) else bytes(f) for f in frames]

