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

Liveness (protocol 2): a receiver raises `PeerLost` when the senders its pass waits on are gone,
instead of waiting for ever (`tensorcom.transport.liveness`). Closing a sender delivers what it sent
to every connected peer, however slow, or raises `Undelivered` saying how much may be lost. Lost
end-of-epoch markers (PUB/SUB) are made up for by the epoch book.

Data wait: a receiver times its loop, blocked in recv()/iteration until a batch is there and the
caller's step between batches (`stats.data_wait`, tensorcom.transport.data_wait).

Resume: batches from `tensorcom.serve` carry their portion (stream, worker i of N) and epoch; the
receiver records what it was handed (`tensorcom.transport.resume`), `state_dict()` / `save_state()`
return / write it, and a server restarted from it sends exactly the rest.

How it is built: the constructor's options are checked and grouped in the dataclasses of
`tensorcom.transport.options` (`passing`, `encoding`, `socket_options`, `decoding`,
`sharing_options`); the first connect() makes one endpoint object for the URLs' scheme family
(`tensorcom.transport.ends`: PlainSender, PlainReceiver, SharingServerEnd, JoinerEnd), and every
method delegates to it. The Connection itself keeps the shared ZeroMQ context, CURVE
(`ends.SocketSecurity`), the receivers' accounting (`ends.Intake`) and the closing rules.
"""

from __future__ import annotations

import operator
import os
import secrets
import socket as _socket
import sys
import threading
import warnings
from typing import Any, Iterable, Iterator

from tensorcom import urls, wire
from tensorcom.checks import renamed_option
from tensorcom.errors import TransportError
from tensorcom.transport import _sockets as sockets
from tensorcom.transport._connection_views import SHARING_ENDS, ConnectionViews
from tensorcom.transport.batches import prepare_batch
from tensorcom.transport.ends import (EPOCH_END, Intake, JoinerEnd, PlainReceiver, PlainSender, SharingServerEnd,
                                      SocketSecurity, url_of)
from tensorcom.transport.options import DEFAULT_HWM, Decoding, Encoding, PassOptions, SharingOptions, SocketOptions
from tensorcom.transport.stats import Statistics

# The ends of the open Connections of this process, by id. A Connection dropped inside a reference cycle
# is finalized with everything only it reaches, in no set order; held here, its end and sockets stay
# reachable, so its __del__ closes them (monitors first) before pyzmq could finalize one unclosed.
_OPEN_ENDS: dict[int, Any] = {}


def _skip_markers(end: Any) -> Any:
    """The next batch of a receiving end, past end-of-epoch markers."""
    batch = end.next_batch()
    while batch is EPOCH_END:
        batch = end.next_batch()
    return batch


def _option(group: str, name: str) -> property:
    """A read-only attribute for option `name` of the options dataclass `group`."""
    return property(operator.attrgetter(f"{group}.{name}"), doc=f"The `{name}` option ({group}.{name}).")


class Connection(ConnectionViews):
    """Send or receive batches over ZeroMQ URLs; see the module docstring for the epoch rule.

    tensorcom 0.1's arguments, in its order: url (str, brace-expanded unless noexpand, or a list),
    epoch, total, multipart, infos, device, allow64, raw, batch_transforms, batch_count, converters,
    report, stats_horizon, noexpand. Keyword only: timeout, sndhwm, rcvhwm, protocol,
    max_message_size, group, group_size, senders, topic, portion (`share`: its deprecated spelling),
    the sharing schemes' min_consumers, replay, policy, credit, batch_size, observe and shm
    (docs/transport.md, "One pipeline, many jobs"), liveness, curve (docs/security.md), and metrics
    ("HOST:PORT": /metrics and a status page while open, at `metrics_url`; docs/observability.md).
    What each means is said by the dataclass that keeps it, checked (tensorcom.transport.options):
    `passing` (PassOptions), `encoding` (Encoding), `socket_options` (SocketOptions), `decoding`
    (Decoding), `sharing_options` (SharingOptions). Each option is also readable under its own name
    (`conn.timeout`); `sharing` holds the sharing options given.
    """

    epoch, total, report, batch_count = (_option("passing", n) for n in ("epoch", "total", "report", "batch_count"))
    protocol, multipart, infos, allow64 = (_option("encoding", n) for n in ("protocol", "multipart", "infos",
                                                                           "allow64"))
    max_message_size, group, group_size, portion = (_option("encoding", n) for n in ("max_message_size", "group",
                                                                                     "group_size", "portion"))
    share = _option("encoding", "portion")  # the old name of portion
    timeout, sndhwm, rcvhwm, liveness = (_option("socket_options", n) for n in ("timeout", "sndhwm", "rcvhwm",
                                                                               "liveness"))
    curve, senders, noexpand = (_option("socket_options", n) for n in ("curve", "senders", "noexpand"))
    raw, device, batch_transforms, converters = (_option("decoding", n) for n in ("raw", "device",
                                                                                 "batch_transforms", "converters"))
    sharing = _option("sharing_options", "given")
    count, batch_size = _option("_intake", "count"), _option("_intake", "batch_size")

    def __init__(self, url: Any = None, epoch: int = 100000, total: int = -1, multipart: bool = True,
                 infos: Any = None, device: str | None = None, allow64: bool = False, raw: bool = False,
                 batch_transforms: Any = None, batch_count: bool = True, converters: Any = None,
                 report: int = -1, stats_horizon: int = 1000, noexpand: bool = False, *,
                 timeout: float | None = None, sndhwm: int = DEFAULT_HWM, rcvhwm: int = DEFAULT_HWM,
                 protocol: int = 2, max_message_size: int | None = None, group: str | None = None,
                 group_size: int = 1, senders: int = 1, topic: str = "", portion: wire.Portion | None = None,
                 share: wire.Portion | None = None, min_consumers: int = 1, replay: int | None = None,
                 policy: str | None = None, credit: int | None = None, batch_size: int | None = None,
                 observe: bool = False, liveness: float | None = 10.0, curve: Any = None, shm: bool | None = None,
                 metrics: str | None = None):
        portion = renamed_option(portion, share, "portion", "share", "Connection")
        self.encoding = Encoding(protocol=protocol, multipart=multipart, infos=infos, allow64=allow64,
                                 max_message_size=max_message_size, group=group, group_size=group_size,
                                 portion=portion)
        self.socket_options = SocketOptions(timeout=timeout, sndhwm=sndhwm, rcvhwm=rcvhwm, liveness=liveness,
                                            curve=curve, topic=topic, senders=senders, noexpand=noexpand)
        self.passing = PassOptions(epoch=epoch, total=total, report=report, stats_horizon=stats_horizon,
                                   batch_count=batch_count)
        self.decoding = Decoding(raw=raw, device=device, batch_transforms=batch_transforms, converters=converters)
        self.sharing_options = SharingOptions(min_consumers=min_consumers, replay=replay, policy=policy,
                                              credit=credit, batch_size=batch_size, observe=observe, shm=shm)
        self.stats = Statistics(stats_horizon)
        self.sender = f"{_socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.endpoints: list[urls.Endpoint] = []
        self.addresses: list[str] = []
        self.sampler = self.batch_sampler = None  # what DataLoader-like consumers look for
        self._intake = Intake(self.decoding, self.passing, self.stats)
        self._security = SocketSecurity(curve)
        self._end: Any = None  # the endpoint object of the URLs' scheme family (tensorcom.transport.ends)
        self._closed = False
        self._pid = os.getpid()  # a forked child's copy never closes the parent's sockets (__del__)
        self._metrics = None  # the metrics= endpoint: /metrics, /status.json and / until close()
        try:
            if metrics is not None:
                from tensorcom.transport.metrics_http import connection_metrics

                self._metrics = connection_metrics(metrics, self)
            if url is not None:
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
            if self._end is None:
                self._end = self._open(PlainSender if endpoint.sends else PlainReceiver, endpoint, endpoint.sends)
            self._security.warn_if_exposed(endpoint)
            self.addresses.append(self._end.attach(endpoint))
            self.endpoints.append(endpoint)

    def _open(self, kind: type, where: Any, sends: bool, **extra: Any) -> Any:
        """`kind.open(...)` for `where` (an endpoint; a sharing scheme's: all of them) with this
        Connection's options, holding the shared context (released again when it fails)."""
        extra.update({"stats": self.stats} if sends else {"intake": self._intake})
        context = sockets.acquire_context()
        try:
            end = kind.open(context, where, encoding=self.encoding, socket_options=self.socket_options,
                            security=self._security, name=self.sender, **extra)
        except BaseException:
            self._release()
            raise
        _OPEN_ENDS[id(end)] = end
        return end

    def _connect_sharing(self, endpoints: list) -> None:
        """Start the server thread (zshare/zsplit) or the consumer (zjoin) for `endpoints`."""
        if self.endpoints or self._end is not None:
            raise ValueError("a sharing Connection is connected once, to all its URLs in one call")
        if any(not e.sharing for e in endpoints) or len({e.sends for e in endpoints}) != 1:
            raise ValueError(f"zshare/zsplit/zjoin URLs cannot be mixed with others: {[e.url for e in endpoints]}")
        sends = endpoints[0].sends
        self._end = self._open(SharingServerEnd if sends else JoinerEnd, endpoints, sends,
                               sharing=self.sharing_options)
        for endpoint in endpoints:
            self._security.warn_if_exposed(endpoint)
        self.endpoints.extend(endpoints)
        self.addresses.extend(self._end.addresses)

    @property
    def url(self) -> str:
        """The connection's URLs, comma-separated (used in error messages)."""
        return url_of(self.endpoints)

    @property
    def socket(self) -> Any:
        """The ZeroMQ socket batches go through (a sharing server's: the inproc socket feeding it;
        None for zjoin, before connect() and after close())."""
        return None if self._end is None else self._end.socket

    @socket.setter
    def socket(self, sock: Any) -> None:  # tests record what is sent through a stand-in
        self._end.socket = sock

    @property
    def metrics_url(self) -> str | None:
        """http://HOST:PORT/metrics of the metrics= endpoint (the port bound), or None without one."""
        return None if self._metrics is None else self._metrics.metrics_url

    @property
    def delivery(self) -> dict | None:
        """A sharing server's result once closed (what each consumer was not delivered); else None."""
        return self._end.delivery if isinstance(self._end, SharingServerEnd) else None

    @property
    def epoch_number(self) -> int:
        """Epochs ended: sent with end_epoch() by a sender, completed on receipt by a receiver."""
        return self._counter().epoch_number

    @epoch_number.setter
    def epoch_number(self, value: int) -> None:
        self._counter().epoch_number = value

    def _counter(self) -> PlainSender | Intake:
        """What counts this Connection's epochs: its sender, else the receivers' intake."""
        end = self._end.sender if isinstance(self._end, SharingServerEnd) else self._end
        return end if isinstance(end, PlainSender) else self._intake

    def close(self, linger: float | None = None) -> None:
        """Close the socket and release the shared context; safe to call twice.

        A sending socket first delivers what it sent (docs/transport.md, "What close() promises"):
        it returns once every peer connected now has read everything, however slow it is, waiting
        at most `linger` seconds (default: `timeout`; a sharing server: None; None: while peers are
        connected; 0: discard what is queued, without a word), and raises Undelivered, naming the
        peers and a bound on the batches they did not get, when some did not. A receiving socket
        closes at once."""
        if self._closed:
            return
        end = self._mark_closed()
        if end is None or end.socket is None and not isinstance(end, SHARING_ENDS):
            return
        if isinstance(end, SHARING_ENDS):
            try:
                end.close(linger)
            finally:
                self._release()
            return
        linger = self.timeout if linger is None else linger
        delivery, stuck = None, False
        try:
            delivery = end.close(linger)
        except BaseException:
            stuck = linger is None and self._keeps_sessions()  # its socket may linger for ever
            raise
        finally:
            self._release(stuck)
        if delivery is not None:
            delivery.check(self.url)

    def _mark_closed(self) -> Any:
        """Mark this Connection closed and drop its end from the ends of open Connections; the end."""
        self._closed = True
        if self.__dict__.get("_metrics") is not None:
            self._metrics.close()
        _OPEN_ENDS.pop(id(self._end), None)
        return self._end

    def _keeps_sessions(self) -> bool:
        """True for a plain sender with sessions (its close waits for confirmations)."""
        return isinstance(self._end, PlainSender) and self._end.outbound is not None

    def _release(self, stuck: bool = False) -> None:
        """After the end's sockets closed: release what CURVE took, then the shared context."""
        try:
            self._security.release()
        finally:
            sockets.release_context(stuck)

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        """close(); leaving by an exception, a plain sending socket discards what is still queued
        rather than wait to deliver it."""
        self.close(linger=0.0 if exc_type is not None and self._keeps_sessions() else None)

    def __del__(self) -> None:
        """Collected without close() (in the process that made it): release what it holds without
        lingering, monitors before sockets before the shared context, then warn (ResourceWarning),
        as Python does for a file. Nothing is waited for, so no pattern of dropped Connections can
        stop the process or ZeroMQ's I/O thread. At interpreter exit, nothing is done."""
        if (self.__dict__.get("_closed", True) or self.__dict__.get("_pid") != os.getpid()
                or sys.is_finalizing()):
            return
        end = self._mark_closed()
        try:
            if isinstance(end, SHARING_ENDS):
                if isinstance(end, SharingServerEnd) and end.in_server_thread():  # no thread waits for itself
                    threading.Thread(target=self._abandon, args=(end,), name="tensorcom-drop", daemon=True).start()
                else:
                    self._abandon(end)
            elif end is not None and end.socket is not None:
                try:
                    end.close(0.0)
                finally:
                    self._release()
        finally:
            warnings.warn(f"unclosed Connection {self.url}: its sockets were closed when it was collected "
                          "(call close(), or use it in a with block)", ResourceWarning, source=self)

    def _abandon(self, end: Any) -> None:
        """Stop a sharing end without waiting (nothing more is delivered), then release."""
        try:
            end.abandon()
        finally:
            self._release()

    # ---- sending ------------------------------------------------------------------------------

    def _usable(self, end: Any, kinds: tuple, cannot: str) -> Any:
        """`end` when it is one of `kinds` and open; TransportError naming the URL otherwise."""
        if isinstance(end, kinds) and not self._closed:
            return end
        raise TransportError("Connection is closed or not connected" if end is None or self._closed
                             else f"a {cannot}", self.url)

    def _sending_end(self) -> PlainSender:
        end = self._end.sender if isinstance(self._end, SharingServerEnd) else self._end
        return self._usable(end, (PlainSender,), "receiving Connection cannot send")

    def send(self, batch: Any, *, allow64: bool | None = None, copy: bool = True, index: int | None = None) -> None:
        """Send one batch: a list/tuple of arrays (protocol 1 or 2) or a dict of fields (protocol 2);
        leaves may be numpy arrays, torch tensors (sent as numpy) or plain values (protocol 2).
        `index`: the batch's position within (epoch, portion) (protocol 2; tensorcom.serve sets it).

        With `copy` (the default) the batch's data is copied before send() returns: the caller may
        overwrite or reuse its arrays at once, and receivers get the values of the time of the call.
        `copy=False` passes ownership instead: ZeroMQ's I/O thread reads the arrays' memory later,
        so the caller must not modify them afterwards (a torn or changed batch would arrive)."""
        if self._end is None:  # a bad batch is reported first, as by a connected sender
            prepare_batch(batch, self.allow64 if allow64 is None else allow64)
        self._sending_end().send(batch, allow64=allow64, copy=copy, index=index)

    write = send

    def end_epoch(self) -> None:
        """Send an end-of-epoch marker (protocol 2; with protocol 1 nothing is sent) and start the next
        epoch. A PUSH socket sends one marker per connected peer (per endpoint over inproc) so that,
        round-robin, each peer gets one."""
        self._sending_end().end_epoch()

    def serve(self, source: Iterable, *, report: int = -1, copy: bool = False) -> int:
        """Send every batch of `source`, then an end-of-epoch marker; returns the number of batches.
        `source` hands its batches over (zero-copy, as `send(batch, copy=False)`): it must not modify
        a batch after yielding it; `copy=True` for a source that refills the same arrays.
        `report` > 0 prints statistics to stderr every `report` samples."""
        return self._sending_end().serve(source, report=report, copy=copy, count_samples=self.batchsize)

    # ---- receiving ----------------------------------------------------------------------------

    def _receiving_end(self) -> PlainReceiver | JoinerEnd:
        return self._usable(self._end, (PlainReceiver, JoinerEnd), "sending Connection cannot receive")

    def recv(self) -> Any:
        """The next batch (a list for list/tuple batches, a dict for dict batches), or the raw frames
        when `raw`. End-of-epoch markers are recorded and skipped. Raises RecvTimeout after `timeout`."""
        end = self._receiving_end()
        return self._intake.wait_for(lambda: _skip_markers(end))

    def items(self, report: int | None = None) -> Iterator[Any]:
        """Iterate over the batches of one epoch (see the module docstring for when it ends).
        `report` > 0 (default: the constructor's) prints statistics to stderr every `report` samples."""
        return self._intake.one_pass(lambda: self._receiving_end().next_batch(), report)

    def __iter__(self) -> Iterator[Any]:
        return self.items()

    def __len__(self) -> int:
        """0.1's `epoch` argument."""
        return self.epoch

    def batchsize(self, batch: Any) -> int:
        """Samples in `batch` (1 when batch_count is False)."""
        return self._intake.samples(batch)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.endpoints)} endpoint(s)"
        return f"<Connection {self.url} protocol={self.protocol} {state}>"
