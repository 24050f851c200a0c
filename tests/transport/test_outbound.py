"""The plain-scheme sender's sessions (`_outbound.Outbound`) driven by hand on an unconnected socket:
what a resend carries."""

from __future__ import annotations

import pytest
import zmq

from tensorcom import wire
from tensorcom.transport._outbound import Outbound
from tensorcom.transport.session import Arrivals


@pytest.fixture
def outbound():
    """An Outbound over a PUSH socket that is never bound (its acknowledgement address is made up);
    what it sends lands in `outbound.sent_frames`."""
    context = zmq.Context()
    sock = context.socket(zmq.PUSH)
    sent: list = []
    out = Outbound(sock, lambda frames: sent.append(frames) or True, name="s", keeps=True, liveness=10.0,
                   context=context, next_seq=lambda: 3)
    out.addresses, out.sent_frames = ["tcp://127.0.0.1:9"], sent
    yield out
    out.data_monitor.close()
    sock.close(linger=0)
    context.term()


@pytest.mark.xfail(strict=True, reason="_outbound.Outbound._resend writes floor=self.log.floor(self.log.tx): "
                   "with no batch unconfirmed (a lost marker) the floor is a transmission number, above the "
                   "next batch's seq once ticks or resends happened, and receivers drop the next batches as "
                   "duplicates. Fix: self.log.floor(self.next_seq())")
def test_a_resent_marker_carries_a_floor_no_higher_than_the_next_batch(outbound):
    outbound.log.tx = 40  # batches 0-2, ticks and resends, all confirmed
    reply = wire.Reply(("tcp://127.0.0.1:9",), outbound.token, 3, 40)
    frames = wire.encode_end_of_epoch(seq=3, epoch=0, sender="s", reply=reply)
    outbound.log.transmit(("marker", 3), frames, 10)
    outbound._resend(outbound.log.entries[("marker", 3)])
    resent = wire.decode_message(outbound.sent_frames[-1])
    arrivals = Arrivals()
    arrivals.arrive(None, resent.reply.floor, resent.reply.tx)
    assert arrivals.arrive(3, 3, 42), "the next epoch's first batch taken for a duplicate"
    assert resent.reply.floor <= 3
