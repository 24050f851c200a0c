"""`PlainSender`: the sending end of the plain schemes (zpush, zrpush, zpub, zrpub): one PUSH or PUB
socket and, for a protocol-2 sender over tcp or ipc, its sessions (`_outbound.Outbound`: messages
kept until receivers confirm them, resends, ticks, what close() promises).

    end = PlainSender.open(context, endpoint, encoding=..., socket_options=..., security=..., stats=..., name=...)
    end.attach(endpoint)          # bind or connect (every endpoint of the connection, the first included)
    end.send(batch, copy=True)    # one batch; end.end_epoch(): an end-of-epoch marker
    end.serve(source)             # every batch of source, then a marker
    delivery = end.close(linger)  # a Delivery (protocol 2 with sessions) or None; the socket is closed

`PlainSender(sock, ...)` wraps a socket made elsewhere without sessions (the sharing server's inproc
PUSH socket). `send()` copies the batch's data before it returns unless `copy=False`, which hands
the arrays' memory to ZeroMQ (the caller must not modify them afterwards); `serve()` hands over too.
A PUSH socket sends one marker per connected peer (per endpoint without sessions) so that, round-robin,
each peer gets one.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable

import zmq

from tensorcom import urls, wire
from tensorcom.batch import batch_size
from tensorcom.transport import _sockets as sockets
from tensorcom.transport._outbound import Delivery, Outbound, own_frames
from tensorcom.transport.batches import prepare_batch
from tensorcom.transport.ends.attached import Attached
from tensorcom.transport.ends.curve import SocketSecurity
from tensorcom.transport.options import Encoding, SocketOptions
from tensorcom.transport.stats import Statistics


class PlainSender(Attached):
    """One sending socket (module docstring). `sock`: a PUSH or PUB socket (None once closed);
    `endpoints`: the endpoints it is attached to (their URLs name it in errors); `timeout`: seconds a
    send may wait for confirmations (None: for ever); `name`: the sender id its messages carry."""

    def __init__(self, sock: Any, *, encoding: Encoding, timeout: float | None, stats: Statistics, name: str,
                 endpoints: list[urls.Endpoint] | None = None):
        super().__init__(sock, endpoints)
        self.encoding, self.timeout, self.stats, self.name = encoding, timeout, stats, name
        self.outbound: Outbound | None = None
        self.seq = 0
        self.epoch_number = 0

    @classmethod
    def open(cls, context: zmq.Context, endpoint: urls.Endpoint, *, encoding: Encoding, socket_options: SocketOptions,
             security: SocketSecurity, stats: Statistics, name: str) -> "PlainSender":
        """A sender with a fresh socket for `endpoint`'s type (secured as CURVE server, liveness
        options set, not attached yet), with sessions when protocol 2 and not over inproc."""
        sock = make_plain_socket(context, endpoint, socket_options, security, encoding.max_message_size)
        end = cls(sock, encoding=encoding, timeout=socket_options.timeout, stats=stats, name=name)
        if endpoint.transport != "inproc" and encoding.protocol == 2:
            with sockets.closed_on_error(sock):
                end.outbound = Outbound(sock, end.send_now, name=name, keeps=endpoint.socket_type != "PUB",
                                        liveness=socket_options.liveness, context=context, next_seq=lambda: end.seq,
                                        secure=security.for_role(True))
        return end

    def attach(self, endpoint: urls.Endpoint) -> str:
        """Bind or connect the socket to `endpoint`; the address it got."""
        address = sockets.attach(self.live_socket(), endpoint)
        self.endpoints.append(endpoint)
        if self.outbound is not None:
            self.outbound.listen(endpoint, address)
        return address

    def _topic(self) -> str:
        first = self.endpoints[0] if self.endpoints else None
        return first.topic if first is not None and first.socket_type == "PUB" else ""

    # ---- sending ------------------------------------------------------------------------------

    def send(self, batch: Any, *, allow64: bool | None = None, copy: bool = True, index: int | None = None) -> None:
        """Send one batch (Connection.send's rules: copied unless `copy=False`; `index` its position
        within (epoch, portion))."""
        batch = prepare_batch(batch, self.encoding.allow64 if allow64 is None else allow64)
        out = self.outbound
        reply = None if out is None else out.reply(self.seq, self._deadline())
        frames = wire.encode_batch(batch, seq=self.seq, epoch=self.epoch_number, sender=self.name,
                                   protocol=self.encoding.protocol, infos=self.encoding.infos,
                                   portion=self.encoding.portion, reply=reply, index=index)
        if reply is not None and out.keeps and copy:
            frames, copy = own_frames(frames), False  # the kept copy is the one copy send() makes
        nbytes = self._send_frames(frames, copy=copy)
        if out is not None:
            out.sent(("batch", self.seq), frames, nbytes)
        self.seq += 1
        self.stats.add(nbytes, batch_size(batch))

    def end_epoch(self) -> None:
        """Send an end-of-epoch marker (protocol 2; protocol 1 sends nothing) and start the next epoch."""
        if self.encoding.protocol == 2:
            out = self.outbound
            push = bool(self.endpoints) and self.endpoints[0].socket_type == "PUSH"
            peers = len(self.endpoints) if out is None else max(out.peers(), 1)
            for copy in range(peers if push else 1):
                reply = None if out is None else out.reply(self.seq, self._deadline())
                frames = wire.encode_end_of_epoch(seq=self.seq, epoch=self.epoch_number, sender=self.name,
                                                  group=self.encoding.group, group_size=self.encoding.group_size,
                                                  portion=self.encoding.portion, reply=reply)
                nbytes = self._send_frames(frames)
                if out is not None:
                    out.sent(("marker", self.epoch_number, copy), frames, nbytes)
        self.epoch_number += 1

    def serve(self, source: Iterable, *, report: int = -1, copy: bool = False, count_samples: Any = batch_size) -> int:
        """Send every batch of `source` (handed over unless `copy`), then a marker; the number of
        batches. `report` > 0 prints statistics to stderr every `report` samples (`count_samples`)."""
        sent = samples = 0
        next_report = report
        for batch in source:
            self.send(batch, copy=copy)
            sent += 1
            samples += count_samples(batch)
            if report > 0 and samples >= next_report:
                print(f"sent {samples} {self.stats.summary()}", file=sys.stderr)
                next_report += report
        self.end_epoch()
        return sent

    def _deadline(self) -> float | None:
        """When a send that waits for confirmations gives up (TransportError): `timeout` from now."""
        return None if self.timeout is None else time.monotonic() + self.timeout

    def send_now(self, frames: list) -> bool:
        """Send one message's frames as they are (a resend, a tick) if the socket takes it now; False
        when it would have to wait (a full queue: try again later)."""
        if not self.encoding.multipart:
            frames = [wire.frames_to_buffer(frames)]
        topic = self._topic()
        try:
            self.live_socket().send_multipart([topic.encode(), *frames] if topic else frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "send")
        return True

    def _send_frames(self, frames: list, copy: bool = False) -> int:
        """Send a message (single-buffer form unless multipart); returns its size. `copy`: ZeroMQ
        copies the frames before the call returns, else it reads them later."""
        if not self.encoding.multipart:
            frames, copy = [wire.frames_to_buffer(frames)], False
        nbytes = sum(memoryview(f).nbytes for f in frames)
        topic = self._topic()
        if topic:
            frames = [topic.encode(), *frames]
        sock = self.live_socket()
        try:
            sock.send_multipart(frames, copy=copy)
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "send")
        return nbytes

    # ---- closing ------------------------------------------------------------------------------

    def close(self, linger: float | None) -> Delivery | None:
        """Close the socket: with sessions, after receivers confirmed everything (at most `linger`
        seconds; the Delivery says what was not confirmed); without, letting ZeroMQ write out its
        queue for `linger` seconds (None: for ever). On an exception the socket is closed at once."""
        sock = self.socket
        if sock is None:
            return None
        try:
            if self.outbound is not None:
                return self.outbound.finish(linger)
            sock.close(linger=(-1 if linger is None else int(max(linger, 0.0) * 1000)) if self.endpoints else 0)
            return None
        except BaseException:
            if not sock.closed:
                sock.close(linger=0)
            raise
        finally:
            self.socket = None


def make_plain_socket(context: zmq.Context, endpoint: urls.Endpoint, options: SocketOptions,
                      security: SocketSecurity, max_message_size: int) -> Any:
    """A plain-scheme socket for `endpoint`'s type with the connection's options, secured (as CURVE
    server when it sends) and given the liveness options, not attached."""
    sock = sockets.make_socket(context, endpoint.socket_type, sndhwm=options.sndhwm, rcvhwm=options.rcvhwm,
                               timeout=options.timeout, max_message_size=max_message_size)
    with sockets.closed_on_error(sock):
        security.secure(sock, endpoint.sends)
        sockets.stream_options(sock, sends=endpoint.sends, liveness=options.liveness)
    return sock
