"""`Connection`: send and receive batches of tensors over ZeroMQ (tensorcom 0.1's API, extended).

One Connection owns one ZeroMQ socket, bound and/or connected to every endpoint of its URL(s) (see
`tensorcom.urls` for the grammar; all URLs of one Connection must use the same socket type). Sending
encodes with `tensorcom.wire` (protocol 2 by default, pure tenbin v1 with `protocol=1`); `send()`
lets ZeroMQ copy the array data before it returns (the caller keeps its arrays), while `serve()` and
`send(batch, copy=False)` hand the arrays' memory itself to ZeroMQ (ownership passes: zero-copy).
Receiving takes frames without copying and decodes arrays as views of them. Messages of both
protocols are accepted without being told which.

End of an epoch, on the receiving side: a sender's `end_epoch()` / the end of its `serve()` sends an
end-of-epoch marker carrying the sender's id, a `group` (default: none, i.e. a group of its own) and
`group_size`. `for batch in conn` ends when as many groups are complete as the connection expects
(one per endpoint it connects to, plus `senders` (default 1) if it binds) and no sender that sent
batches in this pass is still in the middle of its epoch; a fast sender's next epoch is held back
meanwhile. The rules live in `tensorcom.transport.epochs` (`EpochBook`), which this class feeds. A
stream without markers (a tensorcom 0.1 server) never ends by itself; a pass also ends after `epoch`
batches (so it yields at most `len(conn)` batches), after `total` samples over the connection's life
(when > 0), or with `RecvTimeout` after `timeout` seconds of silence.

Liveness (plain schemes, protocol 2): a receiver raises `PeerLost` when the senders its pass waits
on are gone (killed, host vanished, network dropped), instead of waiting for ever; the rules are in
`tensorcom.transport.liveness`, the waiting in `_receiving`. Closing a sender delivers what it sent
to every connected peer, however slow, or raises `Undelivered` saying how much may be lost
(`_delivery`). Lost end-of-epoch markers (PUB/SUB) are made up for by the epoch book, so a pass
never mixes two epochs of a sender.

Resume: batches from `tensorcom.serve` carry their share (stream, worker i of N) and epoch; the
receiver records what it was handed (`tensorcom.transport.resume`), `state_dict()` / `save_state()`
return / write it, and a server restarted from it sends exactly the rest.
"""

from __future__ import annotations

import os
import secrets
import socket as _socket
import sys
import warnings
from typing import Any

from tensorcom import settings, urls, wire
from tensorcom.errors import TransportError
from tensorcom.transport import _sockets as sockets
from tensorcom.transport._inbound import Inbound
from tensorcom.transport._outbound import Outbound
from tensorcom.transport._receiving import ReceivingSide
from tensorcom.transport._sending import SendingSide
from tensorcom.transport._secured import SecuredSockets
from tensorcom.transport._sharing_side import SharingSide
from tensorcom.transport.batches import batch_size, listify, resolve_converters
from tensorcom.transport.epochs import EpochBook, expected_groups
from tensorcom.transport.resume import Consumption, save_state
from tensorcom.transport.stats import SequenceTracker, Statistics

DEFAULT_HWM = 10  # messages queued per peer; batches are large, so keep memory bounded


def _check_int(name: str, value: Any, low: int) -> int:
    """`value` if it is an int >= low, else ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _check_options(protocol: Any, timeout: Any, group: Any, liveness: Any = None) -> None:
    """ValueError/TypeError for a bad protocol, timeout, group or liveness."""
    if protocol not in (1, 2):
        raise ValueError(f"protocol must be 1 or 2, got {protocol!r}")
    for name, value in (("timeout", timeout), ("liveness", liveness)):
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    if group is not None and not isinstance(group, str):
        raise TypeError(f"group must be a str or None, got {group!r}")


class Connection(SendingSide, ReceivingSide, SharingSide, SecuredSockets):
    """Send or receive batches over ZeroMQ URLs; see the module docstring for the epoch rule.

    0.1 arguments: url (str, brace-expanded unless noexpand, or a list), epoch (len(conn), and the most
    batches one pass yields), total (stop after this many samples in all, when > 0), multipart (False:
    one frame per message), infos (per-tensor labels, protocol 1 and list batches), device (None: numpy;
    else a torch device to convert to), allow64 (permit 64-bit arrays on send), raw (recv returns the
    undecoded frames), batch_transforms and converters (functions per field; converters may be "torch",
    "torch_cuda", "numpy"), batch_count (count samples, not batches), report (print stats to stderr
    every N samples while iterating), stats_horizon (window for recent rates).
    New, keyword only: timeout (seconds; recv raises RecvTimeout, send TransportError; None waits),
    sndhwm / rcvhwm (high-water marks, messages), protocol (1 or 2), max_message_size (bytes; default
    settings.max_message_size()), group / group_size (carried by end-of-epoch markers), senders (groups
    expected when binding), topic (SUB subscription, as 0.1's connect(url, topic)), share (a
    wire.Share (stream, worker, workers) sent with every protocol-2 message; tensorcom.serve sets it).
    Sharing schemes (docs/transport.md, "One pipeline, many jobs"): a zshare/zsplit server takes
    min_consumers (wait for that many before the first batch), replay (batches kept for slow and late
    consumers) and policy ("pace" or "detach"); a zjoin consumer takes credit (batches prefetched),
    batch_size (rebatch to this many samples) and observe (status reports only); shm (both sides; None:
    on this host unless $TENSORCOM_SHM=0, True: ask, False: never) hands batches over in shared memory.
    Security (docs/security.md): curve (a tensorcom.transport.security.Curve; default: the
    $TENSORCOM_CURVE_* variables, none when unset) secures every socket with ZeroMQ CURVE.
    Liveness: liveness (seconds, None: off) is how long a silent peer counts as alive (ZMTP heartbeats);
    on the plain schemes a receiver raises PeerLost by the rules of tensorcom.transport.liveness, and
    a sender's heartbeats tell receivers to drop it after that long without a word.
    """

    def __init__(self, url: Any = None, epoch: int = 100000, total: int = -1, multipart: bool = True,
                 infos: Any = None, device: str | None = None, allow64: bool = False, raw: bool = False,
                 batch_transforms: Any = None, batch_count: bool = True, converters: Any = None,
                 report: int = -1, stats_horizon: int = 1000, noexpand: bool = False, *,
                 timeout: float | None = None, sndhwm: int = DEFAULT_HWM, rcvhwm: int = DEFAULT_HWM,
                 protocol: int = 2, max_message_size: int | None = None, group: str | None = None,
                 group_size: int = 1, senders: int = 1, topic: str = "", share: wire.Share | None = None,
                 min_consumers: int = 1, replay: int | None = None, policy: str | None = None,
                 credit: int | None = None, batch_size: int | None = None, observe: bool = False,
                 liveness: float | None = 10.0, curve: Any = None, shm: bool | None = None):
        _check_options(protocol, timeout, group, liveness)
        self.epoch, self.total = _check_int("epoch", epoch, 1), total
        self.multipart, self.infos, self.device, self.allow64 = multipart, infos, device, allow64
        self.raw, self.batch_count, self.report, self.noexpand = raw, batch_count, report, noexpand
        self.batch_transforms = listify(batch_transforms)
        self.converters = resolve_converters(converters, device)
        self.timeout, self.protocol, self.group = timeout, protocol, group
        self.share = None if share is None else wire.Share(*share)
        self.sndhwm, self.rcvhwm = _check_int("sndhwm", sndhwm, 0), _check_int("rcvhwm", rcvhwm, 0)
        self.group_size = _check_int("group_size", group_size, 1)
        self.senders = _check_int("senders", senders, 1)
        limit = settings.max_message_size() if max_message_size is None else max_message_size
        self.max_message_size = _check_int("max_message_size", limit, 1)
        self._max_plain_values = settings.max_plain_values()  # read once, not per message
        self._timeout_hint = ""  # ZeroMQ drops a frame over the limit without telling the receiver
        if limit < settings.DEFAULT_MAX_MESSAGE_SIZE:
            self._timeout_hint = (f" (a message with a frame over max_message_size={limit} bytes is "
                                  "refused by ZeroMQ, which closes its connection: it never arrives)")
        self.stats = Statistics(stats_horizon)
        self.liveness = liveness
        self.curve = curve  # a transport.security.Curve; None: from $TENSORCOM_CURVE_* when set
        self._releases: list = []  # what security.secure returned, called after the sockets close
        self.sharing = {k: v for k, v in (("min_consumers", min_consumers), ("replay", replay), ("policy", policy),
                                          ("credit", credit), ("batch_size", batch_size), ("observe", observe),
                                          ("shm", shm))
                        if v is not None}
        self.sender = f"{_socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.socket = None
        self._inlet: Inbound | None = None  # a receiving socket's sessions and liveness (plain schemes)
        self._outlet: Outbound | None = None  # a sending socket's sessions: resends, close (plain schemes)
        self.endpoints: list[urls.Endpoint] = []
        self.addresses: list[str] = []
        self.count = 0  # samples received
        self.epoch_number = 0  # epochs ended (sent with end_epoch, or completed on receipt)
        self.batch_size = 1
        self.sampler = self.batch_sampler = None  # what DataLoader-like consumers look for
        self._seq = 0
        self._received = 0  # messages taken from the socket, for error messages
        self._tracker = SequenceTracker()
        self._epochs = EpochBook()
        self._consumed = Consumption()
        self._context = None
        self._closed = False
        self._pid = os.getpid()  # a forked child's copy never closes the parent's sockets (__del__)
        if url is not None:
            try:
                self.connect(url, topic=topic)
            except BaseException:
                self.close()
                raise

    # ---- setup and teardown -------------------------------------------------------------------

    def connect(self, url: Any, topic: str = "") -> None:
        """Bind or connect to every endpoint of `url` (a str, brace-expanded unless noexpand, or a
        list); `topic` is the subscription for SUB endpoints without their own `#topic`."""
        if self._closed:
            raise TransportError("connect on a closed Connection", str(url))
        parsed = urls.parse_all(url, self.noexpand)
        if any(e.sharing for e in parsed):
            return self._connect_sharing(parsed)
        endpoints = [sockets.endpoint_for(e, topic) for e in parsed]
        for endpoint in endpoints:
            sockets.check_compatible(endpoint, self.endpoints + endpoints)
        for endpoint in endpoints:
            if self.socket is None:
                self._context = sockets.acquire_context()
                self.socket = sockets.make_socket(
                    self._context, endpoint.socket_type, sndhwm=self.sndhwm, rcvhwm=self.rcvhwm,
                    timeout=self.timeout, max_message_size=self.max_message_size)
                self._secure(self.socket, endpoint.sends)
                self._watch(endpoint)
            self._warn_if_exposed(endpoint)
            self.addresses.append(sockets.attach(self.socket, endpoint))
            self.endpoints.append(endpoint)
            if self._outlet is not None:
                self._outlet.listen(endpoint, self.addresses[-1])
        self._epochs.expected = expected_groups([e.bind for e in self.endpoints], self.senders)
        if self._inlet is not None:
            self._inlet.url = self.url

    def _watch(self, endpoint: urls.Endpoint) -> None:
        """Liveness options and the sessions of a new plain-scheme socket: a protocol-2 sender's
        acknowledgement socket (not over inproc: no connection there drops), a receiver's links."""
        sockets.stream_options(self.socket, sends=endpoint.sends, liveness=self.liveness)
        if endpoint.sends and endpoint.transport != "inproc" and self.protocol == 2:
            self._outlet = Outbound(self.socket, self._send_message, name=self.sender,
                                    keeps=endpoint.socket_type != "PUB", liveness=self.liveness,
                                    context=self._context, next_seq=lambda: self._seq,
                                    secure=lambda sock: self._secure(sock, True))
        elif not endpoint.sends and not self.raw:
            self._inlet = Inbound(self.socket, endpoint.url, self.liveness, self._epochs, context=self._context,
                                  name=self.sender, secure=lambda sock: self._secure(sock, False))

    @property
    def url(self) -> str:
        """The connection's URLs, comma-separated (used in error messages)."""
        return ",".join(e.url for e in self.endpoints) or "<not connected>"

    def close(self, linger: float | None = None) -> None:
        """Close the socket and release the shared context; safe to call twice.

        A sending socket first delivers what it sent (docs/transport.md, "What close() promises"):
        it returns once every peer connected now has read everything, however slow it is, waiting
        at most `linger` seconds (default: `timeout`; None: while peers are connected; 0: discard
        what is queued, without a word), and raises Undelivered, naming the peers and a bound on the
        batches they did not get, when some did not. A receiving socket closes at once."""
        if self._closed:
            return
        self._closed = True
        if self._server is not None or self._joiner is not None:
            try:
                self._close_sharing(linger)
            finally:
                self._release_security()
                sockets.release_context()
            return
        if self.socket is None:
            return
        linger = self.timeout if linger is None else linger
        delivery, stuck = None, False
        try:
            delivery = self._close_socket(linger)
        except BaseException:
            stuck = self._outlet is not None and linger is None  # its socket may linger for ever
            if not self.socket.closed:
                self.socket.close(linger=0)
            raise
        finally:
            self.socket = None
            self._release_security()
            sockets.release_context(stuck)
        if delivery is not None:
            delivery.check(self.url)

    def _close_socket(self, linger: float | None) -> Any:
        """Close the plain-scheme socket (see close); the Delivery of a protocol-2 sending one."""
        if self._inlet is not None:
            self._inlet.close()
        if self._outlet is not None:
            return self._outlet.finish(linger)
        sending = bool(self.endpoints) and self.endpoints[0].sends
        self.socket.close(linger=(-1 if linger is None else int(max(linger, 0.0) * 1000)) if sending else 0)
        return None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        """close(); leaving by an exception, a plain sending socket discards what is still queued
        rather than wait to deliver it."""
        self.close(linger=0.0 if exc_type is not None and self._outlet is not None else None)

    def __del__(self) -> None:
        """Collected without close() (in the process that made it): release what it holds without
        lingering, monitors before sockets before the shared context, then warn (ResourceWarning),
        as Python does for a file. Nothing is waited for, so no pattern of dropped Connections can
        stop the process or ZeroMQ's I/O thread. At interpreter exit, nothing is done."""
        if (self.__dict__.get("_closed", True) or self.__dict__.get("_pid") != os.getpid()
                or sys.is_finalizing()):
            return
        self._closed = True
        try:
            if self._server is not None or self._joiner is not None:
                self._drop_sharing()
            elif self.socket is not None:
                try:
                    self._close_socket(0.0)
                finally:
                    self.socket = None
                    self._release_security()
                    sockets.release_context()
        finally:
            warnings.warn(f"unclosed Connection {self.url}: its sockets were closed when it was collected "
                          "(call close(), or use it in a with block)", ResourceWarning, source=self)

    def __len__(self) -> int:
        """0.1's `epoch` argument."""
        return self.epoch

    def _live_socket(self) -> Any:
        if self.socket is None:
            raise TransportError("Connection is closed or not connected", self.url)
        return self.socket

    # ---- resume ---------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """What this receiver has been handed of each `tensorcom.serve` stream (per stream, epoch and
        worker: batches, samples, whether the worker ended the epoch) and its completed passes; a
        JSON-ready dict (layout in tensorcom.transport.resume). `tensorcom.serve(..., resume=STATE)`
        and `--resume FILE` continue from it."""
        return self._consumed.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Continue the record of `state` (from state_dict(), e.g. in a restarted training job), so a
        later state_dict() counts what was consumed before it too. ValueError for a malformed state."""
        self._consumed.load_state_dict(state)
        self.epoch_number = self._consumed.passes

    def save_state(self, path: Any) -> None:
        """Write state_dict() as JSON to `path` (atomically), for `tensorcom serve --resume FILE`."""
        save_state(self.state_dict(), path)

    def batchsize(self, batch: Any) -> int:
        """Samples in `batch` (1 when batch_count is False)."""
        return batch_size(batch) if self.batch_count else 1

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.endpoints)} endpoint(s)"
        return f"<Connection {self.url} protocol={self.protocol} {state}>"

