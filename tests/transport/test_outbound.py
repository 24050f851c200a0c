"""The plain-scheme sender's sessions (`_outbound.Outbound`): what a resend carries (driven by hand on
an unconnected socket), what closing a publisher delivers."""

from __future__ import annotations

import threading
import time

import numpy as np
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


def test_a_resent_marker_carries_a_floor_no_higher_than_the_next_batch(outbound):
    """(Failed at 9032e3a: _resend wrote floor(log.tx), a transmission number, for the next seq.)"""
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


@pytest.mark.net
@pytest.mark.timeout(60)
def test_closing_a_publisher_right_after_serve_delivers_the_end_of_its_epoch(free_port):
    from tensorcom import Connection

    port = free_port()
    out = Connection(f"zpub://127.0.0.1:{port}", timeout=10)
    inp = Connection(f"zsub://127.0.0.1:{port}", timeout=3)
    try:
        while not inp.socket.poll(50):  # until the subscription took effect
            out.send([np.full(1, -1, "i4")])
        inp.recv()  # the receiver confirms it: the publisher has a confirming receiver
        while not out._end.outbound.ever_attached:
            out._end.outbound.link.poll(50)
            out._end.outbound.pump()
        out.serve([[np.full(1 << 18, tag, "i4")] for tag in range(8)])  # 1 MiB each, the marker last
        out.close()
        tags = [int(batch[0][0]) for batch in inp]  # ends only if the marker came
        assert [tag for tag in tags if tag >= 0] == list(range(8))  # sndhwm + rcvhwm hold them all
    finally:
        out.close(linger=0)
        inp.close()


def test_unsure_transmissions_settle_a_liveness_window_after_they_were_sent(outbound):
    log = outbound.log
    log.connections = 2  # one data connection has no confirming receiver behind it
    log.attach("b")
    log.transmit(("batch", 0), [b"x"], 1)
    assert log.unsure == [0]
    assert not outbound._settle(100.0)  # marks the time of tx 1
    log.transmit(("batch", 1), [b"x"], 1)
    assert not outbound._settle(100.0 + outbound.liveness / 2)
    assert outbound._settle(100.0 + outbound.liveness) and log.settled == 1 and log.unsure == [1]
    assert outbound._settle(100.0 + outbound.liveness * 2) and log.unsure == []
    assert not outbound._settle(100.0 + outbound.liveness * 2) and not outbound.marks  # nothing to time


def test_a_watch_steps_until_its_step_is_done_or_its_owner_is_back():
    from tensorcom.transport._watch import Watch

    steps: list[int] = []
    watch = Watch("test-watch", every=0.001)
    watch.start(lambda: steps.append(1) or len(steps) >= 3)
    watch.thread.join(10)
    assert len(steps) == 3  # done: it ended by itself
    never_done = threading.Event()
    watch.start(lambda: never_done.set() or False)
    assert never_done.wait(10)
    watch.stop()
    assert watch.thread is None and not any(t.name == "test-watch" for t in threading.enumerate())
    watch.start(lambda: 1 / 0, ended=(ZeroDivisionError,))  # what it used was closed under it
    watch.thread.join(10)
    assert not watch.thread.is_alive()
    watch.stop()


def test_after_a_marker_every_linked_receiver_is_told_the_floor_whatever_the_data_connections_got(outbound):
    """A tick (or a marker) told the floor on the data socket, which round-robin gives to one connection
    of several (or none, its queue full): the receivers are each told it again over their links, or one
    of them holds its marker for ever. (Failed before: the watch skipped a floor a tick had carried.)"""
    import msgpack

    from tensorcom.transport._outbound import _Receiver

    outbound._open_link()
    where = f"inproc://link-{outbound.token}"
    outbound.link.bind(where)
    receivers = {}
    for name in ("r1", "r2"):
        sock = outbound.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, name.encode())
        sock.connect(where)
        sock.send(b"hello")  # the ROUTER routes to it once this arrived
        assert outbound.link.poll(5000)
        outbound.link.recv_multipart()
        receivers[name] = sock
        outbound.receivers[name] = _Receiver()
    outbound.floor_sent = 3  # a tick carried floor 3 (to one of the two data connections)
    try:
        assert outbound._watch_step(), "nothing unconfirmed, every receiver told: the watch is done"
        for name, sock in receivers.items():
            assert sock.poll(5000), f"{name} was never told the floor"
            body = msgpack.unpackb(sock.recv(), raw=False)
            assert body == {"kind": "floor", "token": outbound.token, "floor": 3}
        assert outbound._watch_step() and not any(sock.poll(0) for sock in receivers.values())  # told once
        outbound.next_seq = lambda: 5  # two more batches, confirmed, while r2's link is down
        outbound.receivers["r2"].away_since, outbound.receivers["r2"].told = time.monotonic(), 0
        assert not outbound._watch_step(), "the watch ends before r2 is back and told"
        assert receivers["r1"].poll(5000) and not receivers["r2"].poll(0)
        receivers["r1"].recv()
        outbound.receivers["r2"].away_since = None  # its link is back
        assert outbound._watch_step()
        assert receivers["r2"].poll(5000) and msgpack.unpackb(receivers["r2"].recv(), raw=False)["floor"] == 5
    finally:
        for sock in receivers.values():
            sock.close(linger=0)
        outbound.link_monitor.close()
        outbound.link.close(linger=0)
