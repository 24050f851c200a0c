"""A sharing server's tcp input (the Hub that tensorcom.ray's actors and serving workers push to)
through real network faults: a Connection sender, as an actor uses it (zpush to the hub's input,
tagged with a portion), reaches the Hub through tests/faults/tcp_proxy.py; its connection is reset
(FIN or RST) or stalled for 3 s (shorter than the liveness window) mid-stream. Every id reaches the
zjoin consumer once and in order, the sender's close() reports everything delivered (no
Undelivered), and nobody raises PeerLost. The hub's input confirms what it took to its senders
(`_inbound`), so a sender resends what a dropped connection lost.

Also: the input's confirmations themselves (without faults), and `InputOrder`, the pure core that
puts each sender's messages back in the order it sent them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import soon
from faults.tcp_proxy import TcpProxy, inject

from tensorcom import Connection, wire
from tensorcom.transport.sharing._order import InputOrder
from tensorcom.transport.sharing.hub import Hub

BATCHES = 300
FAULT_AT = 100  # the sender makes the fault after sending this many batches
PAD = 32 << 10  # bytes per batch besides its ids: enough that a reset finds data in flight
STREAM = "stream-h"


def batch(i: int) -> dict:
    """Batch i: sample ids 4i .. 4i+3 and PAD bytes."""
    return {"id": np.arange(4 * i, 4 * i + 4, dtype=np.int32), "pad": np.zeros(PAD, np.uint8)}


def collect(url: str, out: list, errors: list, passes: int = 1) -> threading.Thread:
    """A thread that joins `url` and appends the ids of `passes` passes to `out` (errors to `errors`)."""

    def run():
        try:
            with Connection(url, timeout=60, liveness=10) as conn:
                for _ in range(passes):
                    out.extend(int(i) for b in conn for i in b["id"])
        except Exception as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.fixture(params=["tcp"])
def hub(free_port, request):
    """A Hub serving zshare on loopback whose input is tcp on 127.0.0.1 (param "ipc": an ipc
    socket, as serving workers use); aborted after the test."""
    host = "127.0.0.1" if request.param == "tcp" else None
    made = Hub(f"zshare://127.0.0.1:{free_port()}", input_host=host, liveness=10)
    yield made
    made.abort()


def input_port(hub: Hub) -> int:
    return int(hub.worker_url.rsplit(":", 1)[1])


def send_through(hub: Hub, url: str, fault=None) -> Connection:
    """Send BATCHES batches and the epoch's marker from a sender that connects to `url` (the hub's
    input or a proxy to it), calling fault() after FAULT_AT batches; returns the open sender."""
    sender = Connection(url, group=STREAM, group_size=1, portion=(STREAM, 0, 1), liveness=10, timeout=60)
    for i in range(BATCHES):
        sender.send(batch(i))
        if i + 1 == FAULT_AT and fault is not None:
            fault()
    sender.end_epoch()
    hub.finish(ends=1)
    return sender


@pytest.mark.net
@pytest.mark.parametrize("kind", ["reset", "rst", "stall"])
def test_a_fault_between_a_sender_and_the_hub_loses_duplicates_and_reorders_nothing(hub, kind):
    timers: list = []
    got: list = []
    errors: list = []
    consumer = collect(hub.addresses[0].replace("tcp://", "zjoin://"), got, errors)
    try:
        with TcpProxy(input_port(hub)) as proxy:
            sender = send_through(hub, f"zpush://127.0.0.1:{proxy.port}", lambda: inject(proxy, kind, timers))
            sender.close(linger=30)  # Undelivered if the hub did not confirm everything
            consumer.join(timeout=60)
            assert proxy.connections == (1 if kind == "stall" else 2)  # the fault was real: a reconnect
        result = hub.close(timeout=30)
    finally:
        for timer in timers:
            timer.cancel()
    assert errors == []  # no PeerLost, no timeout
    assert got == list(range(4 * BATCHES))  # every id once, in order
    assert result["undelivered"] == {}
    assert hub.server.input_batches == BATCHES


@pytest.mark.net
@pytest.mark.parametrize("hub", ["tcp", "ipc"], indirect=True)
def test_the_hub_confirms_what_it_took_to_a_sender(hub):
    got: list = []
    errors: list = []
    inlet = hub.server.inlet  # the input's sessions (kept after the hub closes them)
    consumer = collect(hub.addresses[0].replace("tcp://", "zjoin://"), got, errors)
    sender = send_through(hub, hub.worker_url)
    sender.close(linger=30)
    consumer.join(timeout=60)
    hub.close(timeout=30)
    assert errors == [] and got == list(range(4 * BATCHES))
    session = inlet.senders[sender.sender]
    transport = "ipc" if "+ipc://" in hub.worker_url else "tcp"
    assert session.address.startswith(f"{transport}://")  # linked to the sender's acknowledgement socket
    assert session.arrivals.high >= BATCHES  # and heard every transmission (batches, marker)
    assert inlet.duplicates == 0 and inlet.link is None  # nothing twice; said bye and closed the link


# ---- InputOrder, without sockets -----------------------------------------------------------------


def message(kind: str, seq: int, floor: int, sender: str = "a", epoch: int = 0) -> wire.Message:
    reply = wire.Reply(("tcp://127.0.0.1:1",), "token", floor, seq)
    return wire.Message(kind, None, seq, epoch, sender, None, 1, 2, 0, reply=reply)


def seqs(messages: list) -> list:
    return [(m.kind[0], m.seq) for m in messages]


def test_input_order_passes_messages_in_order_at_once():
    order = InputOrder()
    assert seqs(order.arrive(message("batch", 0, 0))) == [("b", 0)]
    assert seqs(order.arrive(message("batch", 1, 0))) == [("b", 1)]
    assert seqs(order.arrive(message("end_of_epoch", 2, 0))) == [("e", 2)]
    assert order.waiting == 0


def test_input_order_holds_what_overtook_a_lost_batch_until_its_resend():
    order = InputOrder()
    assert seqs(order.arrive(message("batch", 0, 0))) == [("b", 0)]
    assert order.arrive(message("batch", 3, 1)) == []  # 1 and 2 were lost with a connection
    assert order.arrive(message("end_of_epoch", 4, 1)) == []
    assert order.waiting == 2
    assert seqs(order.arrive(message("batch", 1, 1))) == [("b", 1)]  # resent
    assert seqs(order.arrive(message("batch", 2, 1))) == [("b", 2), ("b", 3), ("e", 4)]
    assert order.waiting == 0


def test_input_order_lets_a_gap_go_once_the_senders_floor_passes_it():
    order = InputOrder()
    order.arrive(message("batch", 0, 0))
    assert order.arrive(message("batch", 2, 1)) == []
    tick = message("tick", 4, 2)  # batch 1 was given up (or confirmed elsewhere): the floor says so
    assert seqs(order.arrive(tick)) == [("b", 2)]


def test_input_order_keeps_senders_apart_and_passes_messages_without_a_session():
    order = InputOrder()
    assert order.arrive(message("batch", 5, 4, sender="a")) == []
    assert seqs(order.arrive(message("batch", 0, 0, sender="b"))) == [("b", 0)]
    plain = wire.Message("batch", None, 7, 0, "c", None, 1, 2, 0)  # no reply: inproc, foreign senders
    assert order.arrive(plain) == [plain]


def test_input_order_puts_a_marker_before_the_batch_of_the_same_seq():
    order = InputOrder()
    order.arrive(message("batch", 0, 0))
    assert order.arrive(message("batch", 2, 1, epoch=1)) == []
    assert order.arrive(message("end_of_epoch", 2, 1)) == []
    assert seqs(order.arrive(message("batch", 1, 1))) == [("b", 1), ("e", 2), ("b", 2)]


def test_input_order_forgets_a_retired_sender():
    order = InputOrder()
    order.arrive(message("batch", 0, 0))
    order.arrive(message("batch", 2, 1))
    order.forget("a")
    assert order.waiting == 0 and order.senders == {}
    order.forget("never-heard")  # a sender retired before it was heard from


@pytest.mark.net
def test_a_sender_that_took_a_portion_over_ends_its_predecessors_session(hub):
    """As a Ray actor's runs do: sender A sends epoch 0 of the portion and closes (the hub confirmed
    everything); sender B sends epoch 1. A is retired when B's first batch comes, and the hub stops
    linking to A's closed acknowledgement socket; both epochs reach the consumer once."""
    inlet = hub.server.inlet
    got: list = []
    errors: list = []
    consumer = collect(hub.addresses[0].replace("tcp://", "zjoin://"), got, errors, passes=2)
    first = Connection(hub.worker_url, group=STREAM, portion=(STREAM, 0, 1), timeout=30)
    for i in range(5):
        first.send(batch(i))
    first.end_epoch()
    first.close(linger=30)  # Undelivered unless the hub confirmed all of it
    second = Connection(hub.worker_url, group=STREAM, portion=(STREAM, 0, 1), timeout=30)
    second.epoch_number = 1
    for i in range(5, 10):
        second.send(batch(i))
    second.end_epoch()
    # B's first batch retired A, which closed: the hub unlinks it once it has seen A's link go down
    assert soon(lambda: inlet.senders[first.sender].address == "")  # ZeroMQ no longer reconnects to it
    hub.finish(ends=2)
    second.close(linger=30)
    consumer.join(timeout=60)
    hub.close(timeout=30)
    assert errors == [] and got == list(range(4 * 10))


@pytest.mark.parametrize("seed", range(20))
def test_input_order_restores_the_order_sent_whatever_a_reset_lost(seed):
    """One sender's 60 batches with a marker after every 20th; a random run of transmissions is lost
    (a reset) and resent after what followed it, twice over; each message carries a floor no higher
    than its first missing batch. The batches pass in the order sent, each marker after every batch
    before it (a marker resent after the next epoch's first batch comes late: the input's epoch book
    has ended that epoch with a stand-in by then, and drops it)."""
    import random

    rng = random.Random(seed)
    sent = []
    for seq in range(60):
        sent.append(("batch", seq))
        if seq % 20 == 19:
            sent.append(("end_of_epoch", seq + 1))
    arrival = list(sent)
    for _ in range(2):  # lose a run of transmissions; resend it after a few later ones
        start = rng.randrange(len(arrival) - 5)
        lost = arrival[start:start + rng.randint(1, 8)]
        rest = arrival[:start] + arrival[start + len(lost):]
        at = min(len(rest), start + rng.randint(1, 10))
        arrival = rest[:at] + lost + rest[at:]
    order = InputOrder()
    passed: list = []
    arrived: set = set()
    for kind, seq in arrival:
        floor = min([s for k, s in sent if k == "batch" and s not in arrived and s < seq] + [seq])
        arrived.add(seq) if kind == "batch" else None
        passed.extend((m.kind, m.seq) for m in order.arrive(message(kind, seq, floor)))
    assert [m for m in passed if m[0] == "batch"] == [m for m in sent if m[0] == "batch"]
    assert sorted(passed) == sorted(sent) and order.waiting == 0
    for i, (kind, seq) in enumerate(passed):
        if kind == "end_of_epoch":
            assert {s for k, s in passed[:i] if k == "batch"} >= set(range(seq))
