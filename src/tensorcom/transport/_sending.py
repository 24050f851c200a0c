"""The sending side of a plain-scheme Connection: `SendingSide`, a mixin of Connection: send() (a batch,
copied or handed over), end_epoch() (an end-of-epoch marker, one per connected peer on PUSH) and
serve() (every batch of a source, then a marker). With a protocol-2 sender over tcp or ipc each
message carries its session's `reply` and is kept until confirmed (`_outbound.Outbound`: resends,
ticks, what close() promises).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable

import zmq

from tensorcom import wire
from tensorcom.transport import _sockets as sockets
from tensorcom.transport._outbound import own_frames
from tensorcom.transport.batches import batch_size, prepare_batch


class SendingSide:
    """Connection's sending. The Connection provides `_live_socket`, `_outlet` (an Outbound, or None),
    url, timeout, endpoints, multipart, protocol, allow64, infos, share, sender, group, group_size,
    stats, `batchsize`, and the counters it updates (`_seq`, epoch_number)."""

    def send(self, batch: Any, *, allow64: bool | None = None, copy: bool = True) -> None:
        """Send one batch: a list/tuple of arrays (protocol 1 or 2) or a dict of fields (protocol 2);
        leaves may be numpy arrays, torch tensors (sent as numpy) or plain values (protocol 2).

        With `copy` (the default) the batch's data is copied before send() returns: the caller may
        overwrite or reuse its arrays at once, and receivers get the values of the time of the call.
        `copy=False` passes ownership instead: ZeroMQ's I/O thread reads the arrays' memory later,
        so the caller must not modify them afterwards (a torn or changed batch would arrive)."""
        batch = prepare_batch(batch, self.allow64 if allow64 is None else allow64)
        out = self._outlet
        reply = None if out is None else out.reply(self._seq, self._deadline())
        frames = wire.encode_batch(batch, seq=self._seq, epoch=self.epoch_number, sender=self.sender,
                                   protocol=self.protocol, infos=self.infos, share=self.share, reply=reply)
        if reply is not None and out.keeps and copy:
            frames, copy = own_frames(frames), False  # the kept copy is the one copy send() makes
        nbytes = self._send_frames(frames, copy=copy)
        if out is not None:
            out.sent(("batch", self._seq), frames, nbytes)
        self._seq += 1
        self.stats.add(nbytes, batch_size(batch))

    write = send

    def _deadline(self) -> float | None:
        """When a send that waits for confirmations gives up (TransportError): `timeout` from now."""
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _send_message(self, frames: list) -> bool:
        """Send one message's frames as they are (a resend, a tick) if the socket takes it now; False
        when it would have to wait (a full queue: try again later)."""
        if not self.multipart:
            frames = [wire.frames_to_buffer(frames)]
        topic = self.endpoints[0].topic if self.endpoints[0].socket_type == "PUB" else ""
        try:
            self._live_socket().send_multipart([topic.encode(), *frames] if topic else frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "send")
        return True

    def _send_frames(self, frames: list, times: int = 1, copy: bool = False) -> int:
        """Send a message `times` times (single-buffer form unless multipart); returns its size.
        `copy`: ZeroMQ copies the frames before the call returns (one memcpy, cheaper than copying
        in Python); else it reads them later. The single-buffer form is a private copy already."""
        if not self.multipart:
            frames, copy = [wire.frames_to_buffer(frames)], False
        nbytes = sum(memoryview(f).nbytes for f in frames)
        topic = self.endpoints[0].topic if self.endpoints and self.endpoints[0].socket_type == "PUB" else ""
        if topic:
            frames = [topic.encode(), *frames]
        sock = self._live_socket()
        try:
            for _ in range(times):
                sock.send_multipart(frames, copy=copy)
        except zmq.ZMQError as exc:
            raise sockets.translate(exc, self.url, self.timeout, "send")
        return nbytes

    def end_epoch(self) -> None:
        """Send an end-of-epoch marker (protocol 2; with protocol 1 nothing is sent) and start the next
        epoch. A PUSH socket sends one marker per connected peer (per endpoint over inproc) so that,
        round-robin, each peer gets one."""
        if self.protocol == 2:
            out = self._outlet
            push = self.endpoints and self.endpoints[0].socket_type == "PUSH"
            peers = len(self.endpoints) if out is None else max(out.peers(), 1)
            for copy in range(peers if push else 1):
                reply = None if out is None else out.reply(self._seq, self._deadline())
                frames = wire.encode_end_of_epoch(seq=self._seq, epoch=self.epoch_number, sender=self.sender,
                                                  group=self.group, group_size=self.group_size,
                                                  share=self.share, reply=reply)
                nbytes = self._send_frames(frames)
                if out is not None:
                    out.sent(("marker", self.epoch_number, copy), frames, nbytes)
        self.epoch_number += 1

    def serve(self, source: Iterable, *, report: int = -1, copy: bool = False) -> int:
        """Send every batch of `source`, then an end-of-epoch marker; returns the number of batches.
        `source` hands its batches over (zero-copy, as `send(batch, copy=False)`): it must not modify
        a batch after yielding it; `copy=True` for a source that refills the same arrays.
        `report` > 0 prints statistics to stderr every `report` samples."""
        sent = samples = 0
        next_report = report
        for batch in source:
            self.send(batch, copy=copy)
            sent += 1
            samples += self.batchsize(batch)
            if report > 0 and samples >= next_report:
                print(f"sent {samples} {self.stats.summary()}", file=sys.stderr)
                next_report += report
        self.end_epoch()
        return sent

