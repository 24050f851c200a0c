"""ZeroMQ plumbing for the transport layer: one shared context, socket setup from an `Endpoint` (and
which endpoints one socket can serve), and the boundary where zmq errors become
`errors.TransportError` naming the URL.

The context is shared by every open socket in the process (so `inproc://` works between two
Connections) and reference-counted: it is terminated, and its I/O thread ends, when the last socket
made here is closed. A forked child gets a fresh context.

Liveness and delivery plumbing: `set_heartbeats` (ZMTP heartbeats, for every scheme's sockets), and
for the plain schemes (the rules are in `tensorcom.transport.liveness` and `_delivery`)
`stream_options` (heartbeats from senders only, TCP keepalive on receivers, ZMQ_IMMEDIATE on
connecting senders), `open_monitor` / `monitor_events` (which connections open and close: their
descriptor and the endpoint each concerns), `make_link` (a session link's ROUTER). Nothing here reads,
duplicates or closes a descriptor of ZeroMQ's: that is how libzmq's I/O thread was made to abort.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import struct
import sys
import threading
import time
from typing import Callable, Iterator

import zmq

from tensorcom.errors import RecvTimeout, TransportError
from tensorcom.urls import Endpoint

_lock = threading.RLock()  # re-entrant: a collection inside a locked section may release a dropped Connection
_context: zmq.Context | None = None
_pid = 0
_users = 0
_stuck = False  # a socket of the context was closed with linger -1 and then left: never term it
_kept: list = []  # such contexts and their parked monitors, kept from garbage collection (destroy() would block)
_parked: list = []  # monitors closed while their socket may still report (Monitor.close), read until it stops
PARKED_WAIT = 10.0  # seconds the last release waits for a parked monitor's socket to stop reporting


def acquire_context() -> zmq.Context:
    """The process's shared context (created on first use); pair every call with `release_context`."""
    global _context, _pid, _users, _stuck
    with _lock:
        if _context is None or _pid != os.getpid():
            _context, _pid, _users, _stuck = zmq.Context(), os.getpid(), 0, False
            _kept.extend(_parked)  # a forked child's copies of the parent's: never touched
            _parked.clear()
        _users += 1
        return _context


def release_context(stuck: bool = False) -> None:
    """Drop one user of the shared context; terminates it when none is left. `stuck`: this user left
    a socket lingering with no limit (an interrupted close): the context is then never terminated
    (that would wait for the socket), only dropped."""
    global _context, _users, _stuck
    with _lock:
        if _context is None or _pid != os.getpid():
            return
        _users -= 1
        _stuck = _stuck or stuck
        _reap_parked(PARKED_WAIT if _users <= 0 else 0.0)
        if _users <= 0:
            if _stuck or _parked:  # terminating would wait for ever
                _kept.extend([_context, *_parked])
                _parked.clear()
            else:
                _context.term()
            _context, _users, _stuck = None, 0, False


def make_socket(context: zmq.Context, socket_type: str, *, sndhwm: int, rcvhwm: int,
                timeout: float | None, max_message_size: int | None) -> zmq.Socket:
    """A new socket of ZeroMQ type `socket_type` ("PUSH", ...) with linger 0, the given high-water
    marks, send/receive timeouts (seconds; None waits forever) and per-frame size limit."""
    sock = context.socket(getattr(zmq, socket_type))
    sock.linger = 0
    sock.sndhwm = sndhwm
    sock.rcvhwm = rcvhwm
    millis = -1 if timeout is None else max(0, int(timeout * 1000))
    sock.rcvtimeo = millis
    sock.sndtimeo = millis
    if max_message_size is not None and max_message_size < (1 << 63):
        sock.setsockopt(zmq.MAXMSGSIZE, max_message_size)
    return sock


def sharing_router(context: zmq.Context, liveness: float | None) -> zmq.Socket:
    """A sharing server's consumer-facing ROUTER: routing is mandatory (a send to a peer that left is an
    error, not a silent drop), a consumer's reconnect under the same routing id takes its place
    (handover), no high-water marks (the consumers' credit bounds what is queued), ZMTP heartbeats
    for `liveness` (`set_heartbeats`)."""
    sock = context.socket(zmq.ROUTER)
    with closed_on_error(sock):
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        sock.sndhwm = sock.rcvhwm = 0
        set_heartbeats(sock, liveness)
    return sock


def joining_dealer(context: zmq.Context, session_id: str, liveness: float | None,
                   reconnect_ms: int) -> zmq.Socket:
    """A zjoin consumer's DEALER towards one server: routing id `session_id` (a reconnect is the same
    peer to the server), linger 0, no high-water marks (the server's credit bounds what is queued),
    ZMTP heartbeats for `liveness`, and with liveness a connect attempt given up and retried after
    `reconnect_ms` (back soon after a healed partition)."""
    sock = context.socket(zmq.DEALER)
    with closed_on_error(sock):
        sock.linger = 0
        sock.sndhwm = sock.rcvhwm = 0
        sock.setsockopt(zmq.ROUTING_ID, session_id.encode())
        set_heartbeats(sock, liveness)
        if liveness is not None:
            sock.setsockopt(zmq.CONNECT_TIMEOUT, reconnect_ms)
    return sock


def endpoint_for(endpoint: Endpoint, topic: str) -> Endpoint:
    """`endpoint` as a Connection's socket uses it: TransportError for the sharing schemes (which
    Connection does not speak); SUB endpoints without a #topic get `topic` (connect()'s)."""
    if endpoint.sharing:
        raise TransportError(f"{endpoint.scheme}:// is the sharing protocol, which Connection "
                             "does not speak; use the sharing API", endpoint.url)
    if topic and endpoint.socket_type == "SUB" and not endpoint.topic:
        return dataclasses.replace(endpoint, topic=topic)
    return endpoint


def check_compatible(endpoint: Endpoint, others: list[Endpoint]) -> None:
    """ValueError unless `endpoint` can share one socket with `others` (the first decides): the same
    socket type and, for PUB/SUB, the same use of topics."""
    first = others[0]
    if endpoint.socket_type != first.socket_type:
        raise ValueError(f"{endpoint.url} ({endpoint.socket_type}) cannot share a Connection with "
                         f"{first.url} ({first.socket_type})")
    same_topic = endpoint.topic == first.topic if first.socket_type == "PUB" else True
    if bool(endpoint.topic) != bool(first.topic) or not same_topic:
        raise ValueError(f"{endpoint.url} and {first.url} must use the same topic setting")


def attach(sock: zmq.Socket, endpoint: Endpoint) -> str:
    """Bind or connect `sock` as `endpoint` says and subscribe SUB sockets; returns the address
    actually used (with the real port when the URL asked for port `*`)."""
    with translated(endpoint.url, action="bind" if endpoint.bind else "connect"):
        if endpoint.bind:
            sock.bind(endpoint.zmq_address)
            address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            sock.connect(endpoint.zmq_address)
            address = endpoint.zmq_address
        if endpoint.socket_type == "SUB":
            sock.setsockopt_string(zmq.SUBSCRIBE, endpoint.topic)
    return address


def translate(exc: zmq.ZMQError, url: str, timeout: float | None = None, action: str = "receive",
              hint: str = "") -> TransportError:
    """The TransportError (RecvTimeout for a receive that timed out) naming `url` for zmq error `exc`
    raised by `action`, to raise; its cause is `exc` (none for a timeout). `hint` is added to a
    receive timeout's text. Hot paths catch zmq.ZMQError and call this, rather than enter
    `translated` (and build its `url`) for every message."""
    timed_out = isinstance(exc, zmq.Again)
    if not timed_out:
        error = TransportError(f"{action} failed: {exc.strerror or exc}", url)
    elif action == "receive":
        error = RecvTimeout(f"nothing received within {timeout} s{hint}", url)
    else:
        error = TransportError(f"could not {action} within {timeout} s (no peer ready?)", url)
    error.__cause__ = None if timed_out else exc
    error.__suppress_context__ = True
    return error


@contextlib.contextmanager
def closed_on_error(sock: zmq.Socket) -> Iterator[zmq.Socket]:
    """Run the block; if it raises (anything, KeyboardInterrupt included), close `sock` at once (linger 0)
    and re-raise: a socket being set up never outlives a failed setup."""
    try:
        yield sock
    except BaseException:
        sock.close(linger=0)
        raise


@contextlib.contextmanager
def translated(url: str, timeout: float | None = None, action: str = "receive", hint: str = "") -> Iterator[None]:
    """Turn zmq errors raised inside the block into `translate`'s TransportError / RecvTimeout."""
    try:
        yield
    except zmq.ZMQError as exc:
        raise translate(exc, url, timeout, action, hint)


# ---- socket monitors ---------------------------------------------------------------------------------
# libzmq sends a socket's events from its I/O thread with a blocking send on an internal PAIR socket:
# a full pipe (its default HWM is 1000), or a reader closed while the socket still reports, stops
# that thread, and with it every socket of the context. Hence: the reader takes events without bound
# (on inproc, a pipe is unbounded when either side's HWM is 0: socket_base.cpp, connect_internal),
# and a reader is closed only once its socket stopped reporting.


class Monitor(zmq.Socket):
    """The PAIR socket reading a socket's events (open_monitor). `watched`: that socket; `stopped`:
    its monitoring has ended (EVENT_MONITOR_STOPPED was read, or close() stopped it)."""

    watched: zmq.Socket | None = None
    stopped = False
    parked = False
    _pid = 0

    def close(self, linger: int | None = None) -> None:
        """Stop the watched socket's monitoring, then close. When that socket is closed already and
        may still report (it lingers), the reader is parked instead: kept open and read until the
        socket stops, then closed (by later open_monitor / release_context calls)."""
        if self.closed or self.parked or self._pid != os.getpid():
            return
        watched, self.watched = self.watched, None
        if watched is not None and not watched.closed:
            with contextlib.suppress(zmq.ZMQError):
                watched.disable_monitor()
            self.stopped = True
        if self.stopped or _drained(self, 0.0):
            super().close(linger=0)
        else:
            with _lock:
                self.parked = True
                _parked.append(self)

    def __del__(self) -> None:
        """Collected unclosed (with what owned it): close() as above, without pyzmq's warning (the
        owner warns, if anyone). Nothing at interpreter exit."""
        if not sys.is_finalizing():
            self.close()


def open_monitor(sock: zmq.Socket, events: int | None = None) -> Monitor:
    """A Monitor receiving `sock`'s `events` (default MONITORED; EVENT_MONITOR_STOPPED is always
    added) that never holds up ZeroMQ's I/O thread, however long nobody reads it; call before
    bind/connect. Closing the Monitor stops the monitoring (close it before `sock`, or after `sock`
    stopped reporting)."""
    address = f"inproc://tensorcom-monitor-{secrets.token_hex(8)}"
    sock.monitor(address, (MONITORED if events is None else events) | zmq.EVENT_MONITOR_STOPPED)
    try:
        monitor = sock.context.socket(zmq.PAIR, socket_class=Monitor)
    except BaseException:
        sock.disable_monitor()
        raise
    monitor.linger = 0
    monitor.rcvhwm = 0  # unbounded: the I/O thread's blocking send never waits
    monitor.watched, monitor._pid = sock, os.getpid()
    monitor.connect(address)
    with _lock:
        _reap_parked(0.0)
    return monitor


def _drained(monitor: Monitor, timeout: float) -> bool:
    """Read and drop what waits on `monitor`, waiting up to `timeout` s for its MONITOR_STOPPED; True
    once it came (now or before)."""
    deadline = time.monotonic() + timeout
    while not monitor.stopped and monitor.poll(max(0, int((deadline - time.monotonic()) * 1000))):
        frames = monitor.recv_multipart()
        monitor.stopped = struct.unpack("=h", frames[0][:2])[0] == _STOPPED
    return monitor.stopped


def _reap_parked(timeout: float) -> None:
    """Close the parked monitors whose socket stopped reporting (waiting up to `timeout` s for
    each); call with _lock held."""
    for monitor in list(_parked):
        if _drained(monitor, timeout):
            _parked.remove(monitor)
            zmq.Socket.close(monitor, linger=0)


# ---- liveness and delivery plumbing -----------------------------------------------------------------

HEARTBEAT_IVL = 0.5  # seconds between the ZMTP PINGs every sending socket emits (from ZeroMQ's I/O thread)
MONITORED = (zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
             | zmq.EVENT_MONITOR_STOPPED)
OPENED = (zmq.EVENT_CONNECTED, zmq.EVENT_ACCEPTED)
ENDED = (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED)
_POLLIN = int(zmq.POLLIN)
_STOPPED = int(zmq.EVENT_MONITOR_STOPPED)


def set_heartbeats(sock: zmq.Socket, liveness: float | None, *, interval: float | None = None,
                   timeout: bool = True) -> None:
    """ZMTP heartbeats on `sock`, set before bind/connect; ZeroMQ's I/O threads send and answer them
    whatever the Python code does. A PING every `interval` s (default liveness/5), carrying a TTL of
    `liveness` s (the peer's ZeroMQ drops the connection when nothing follows a PING for that long);
    with `timeout`, `sock` itself drops a connection whose peer answered nothing for liveness/2 s (at
    least two intervals), else never. `liveness` None: no TTL and no timeout, and no PINGs unless
    `interval` is given. ValueError for a liveness that is not a positive number of seconds.

    The sharing sockets (ROUTER, DEALER: both ends read, credit bounds their queues) take the
    defaults; a plain-scheme sender takes `interval=HEARTBEAT_IVL, timeout=False` (`stream_options`)."""
    if liveness is not None and (isinstance(liveness, bool) or not isinstance(liveness, (int, float))
                                 or liveness <= 0):
        raise ValueError(f"liveness must be a positive number of seconds or None, got {liveness!r}")
    if liveness is None and interval is None:
        return
    millis = None if liveness is None else int(liveness * 1000)
    ivl = max(int(interval * 1000) if interval is not None else millis // 5, 10)
    sock.setsockopt(zmq.HEARTBEAT_IVL, ivl)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(millis // 2, 2 * ivl) if timeout and millis is not None else 0)
    if millis is not None:
        sock.setsockopt(zmq.HEARTBEAT_TTL, min(max(millis, 100), 6553500) // 100 * 100)


def link_heartbeats(sock: zmq.Socket, liveness: float) -> None:
    """Liveness options of a session link (`_inbound`, `_outbound`), set before bind/connect. A ZMTP
    PING every min(HEARTBEAT_IVL, liveness/5) s keeps the link busy, and the kernel aborts a
    connection whose data stays unacknowledged for min(2, liveness/2) s (TCP_MAXRT, i.e.
    TCP_USER_TIMEOUT): a vanished host or a partition drops the link within that, and ZeroMQ
    retries a connect every CONNECT_TIMEOUT as long. No ZMTP heartbeat timeout and no TTL: libzmq
    4.3 aborts (`!_io_error`) when such a timer fires in a process resumed after SIGSTOP; a paused
    peer's kernel still acknowledges, so a pause is no departure. A dropped link is reconnected;
    only `liveness` seconds unreachable make a peer gone."""
    ivl = max(int(min(HEARTBEAT_IVL, liveness / 5) * 1000), 10)
    sock.setsockopt(zmq.HEARTBEAT_IVL, ivl)
    patience = max(int(min(2.0, liveness / 2) * 1000), 100)
    sock.setsockopt(zmq.TCP_MAXRT, patience)
    sock.setsockopt(zmq.CONNECT_TIMEOUT, patience)  # a SYN lost in a partition is retried, not backed off


def make_link(context: zmq.Context, routing_id: bytes, liveness: float, events: int, *,
               secure: Callable | None = None, **options: int) -> tuple[zmq.Socket, zmq.Socket]:
    """A session link (`_inbound`, `_outbound`): a ROUTER with `routing_id`, unbounded queues (acks
    are small and few; a full queue under a timer is how libzmq aborts), `link_heartbeats`, the
    socket options given (e.g. ROUTER_MANDATORY=1), `secure(sock)` applied, and a monitor of
    `events`. Returns (link, monitor); bind or connect it afterwards."""
    link = context.socket(zmq.ROUTER)
    link.linger = 0
    link.sndhwm = link.rcvhwm = 0
    link.setsockopt(zmq.ROUTING_ID, routing_id)
    for name, value in options.items():
        link.setsockopt(getattr(zmq, name), value)
    link_heartbeats(link, liveness)
    if secure is not None:
        secure(link)
    return link, open_monitor(link, events)


def stream_options(sock: zmq.Socket, *, sends: bool, liveness: float | None) -> None:
    """Liveness options of a plain-scheme socket, set before bind/connect (why these and not others:
    tensorcom.transport.liveness).

    Sending sockets: no ZMTP heartbeats. A heartbeat timeout or a TTL makes libzmq 4.3 abort
    (`!_io_error`, stream_engine_base.cpp) when it resets a connection whose reader's queue is full,
    as a paused or slow receiver's is, and the PONGs that plain PINGs bring back, unread at close,
    turn the close into a reset that can cost a receiver what it had not read yet. Whether a peer
    is reachable is the session link's business
    (`link_heartbeats`). ZMQ_IMMEDIATE, so messages queue only for connected peers (it acts on
    connects). A connection silenced by a partition stays open on the sender (TCP retransmits; its
    close() waits for a receiver that may come back); a connect is retried every CONNECT_TIMEOUT
    (both sides), so a connection is remade soon after the network heals and the session resends
    what was lost.
    Receiving sockets: no heartbeats of their own, for the same reason; TCP keepalive after
    `liveness` s of silence, so the kernel resets the connection of a host that vanished."""
    if liveness is not None:  # a SYN lost in a partition is retried at once, not after the kernel's backoff
        sock.setsockopt(zmq.CONNECT_TIMEOUT, max(int(min(2.0, liveness / 2) * 1000), 100))
    if sends:
        sock.setsockopt(zmq.IMMEDIATE, 1)
    elif liveness is not None:
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, max(int(liveness), 1))
        sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, max(int(liveness / 4), 1))
        sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, 3)


def monitor_events(monitor: zmq.Socket) -> list[tuple[int, int, str]]:
    """(event, value, endpoint) triples waiting on `monitor` now ([] when none): the value of a
    connection event is the connection's descriptor, the endpoint the address it concerns (for a
    connecting socket, the address it connects to)."""
    events = []
    while zmq.zmq_poll([(monitor, _POLLIN)], 0):
        frames = monitor.recv_multipart()
        event, value = struct.unpack("=hi", frames[0][:6])
        events.append((event, value, frames[1].decode(errors="replace") if len(frames) > 1 else ""))
        if event == _STOPPED:
            monitor.stopped = True
    return events
