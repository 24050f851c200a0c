"""zshare / zsplit / zjoin through Connection in one process (threads): detaching, undelivered
batches on close, observers, CURVE, rebatching; a malformed batch from a server made by other means;
a sharing server's input (the Hub) merging the epochs of senders whose messages are held or whose
marker was lost."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq
from sharing_threads import ids_batch, serve_in_thread  # tests/transport/sharing_threads.py

from tensorcom import Connection, wire
from tensorcom.errors import DecodeError, Detached, RecvTimeout, Undelivered
from tensorcom.transport.security import Curve, create_key_pair
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing.hub import Hub

pytestmark = pytest.mark.net


def take(conn: Connection) -> list[int]:
    return [int(i) for batch in conn for i in batch["id"]]


def test_detach_policy_detaches_the_consumer_that_falls_behind(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}", min_consumers=2, replay=4, policy="detach")
    stalled = Connection(f"zjoin://{url}", credit=1)
    steady = Connection(f"zjoin://{url}", credit=2)
    errors: list = []
    thread = serve_in_thread(server, 20, errors)
    assert take(steady) == list(range(80))  # the steady one is not held back by the stalled one
    with pytest.raises(Detached, match="behind"):
        stalled.recv()
        while True:
            stalled.recv()
    thread.join(timeout=20)
    assert not thread.is_alive() and errors == []
    stalled.close()
    steady.close()


def test_close_says_what_was_not_delivered(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zsplit://{url}", replay=3)
    consumer = Connection(f"zjoin://{url}", credit=1, timeout=10)
    server.send(ids_batch(0))
    assert [int(i) for i in consumer.recv()["id"]] == [0, 1, 2, 3]
    consumer.close()  # leaves: nobody takes the rest
    for i in range(1, 4):
        server.send(ids_batch(4 * i))
    with pytest.raises(Undelivered, match="3 batches") as info:
        server.close(linger=1)
    assert info.value.counts == {"(nobody)": 3}


def test_an_observer_sees_each_consumer(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}")
    consumer = Connection(f"zjoin://{url}", credit=3, timeout=10)
    observer = Connection(f"zjoin://{url}", observe=True)
    for i in range(5):
        server.send(ids_batch(4 * i))
    consumer.recv()
    status = []
    for _ in range(5):
        status = observer.consumer_status(wait=0.5)
        if status and status[0]["acked"] >= 1:
            break
    (report,) = status  # the observer is not a consumer
    assert report["name"] == consumer.sender and report["credit"] == 3 and report["acked"] >= 1
    assert server.consumers and server.consumers[0]["name"] == consumer.sender
    for conn in (observer, consumer):
        conn.close()
    server.close(linger=5)  # share mode: consumers that left are owed nothing
    assert server.delivery["undelivered"] == {}


def test_curve_secured_sharing(free_port, tmp_path):
    keys = create_key_pair(tmp_path, "server")
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}", curve=Curve(secret=keys.secret), min_consumers=1)
    outsider = Connection(f"zjoin://{url}", timeout=1.5)  # no key: its join never gets through
    member = Connection(f"zjoin://{url}", curve=Curve(server=keys.public), timeout=10)
    errors: list = []
    thread = serve_in_thread(server, 3, errors)
    assert take(member) == list(range(12))
    with pytest.raises(RecvTimeout):
        outsider.recv()
    thread.join(timeout=20)
    assert errors == []
    member.close()
    outsider.close()


def test_consumer_batch_size_rebatches_the_same_samples(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zsplit://{url}")
    consumer = Connection(f"zjoin://{url}", batch_size=6, timeout=10)
    errors: list = []
    thread = serve_in_thread(server, 5, errors)
    sizes, ids = [], []
    for batch in consumer:
        sizes.append(len(batch["id"]))
        ids.extend(int(i) for i in batch["id"])
    assert sizes == [6, 6, 6, 2] and ids == list(range(20))
    thread.join(timeout=20)
    assert errors == []
    consumer.close()


@pytest.fixture
def raw_socket():
    """Call raw_socket(zmq type) for a plain ZeroMQ socket (5 s timeouts); all closed after the test."""
    context, made = zmq.Context(), []

    def make(kind: int) -> zmq.Socket:
        sock = context.socket(kind)
        sock.linger, sock.rcvtimeo, sock.sndtimeo = 0, 5000, 5000
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close(linger=0)
    context.term()


def welcomed(server: zmq.Socket) -> bytes:
    """Take a consumer's join on the by-hand ROUTER `server` and welcome it; returns its routing id."""
    peer, join = server.recv_multipart()
    assert control.decode(join)["k"] == "join"
    server.send_multipart([peer, control.encode("welcome", server="s1", mode="share", epoch=0, pos=0)])
    return peer


def ids_message(n: int, batch: dict) -> list:
    """Batch n of a by-hand server: the control frame and the batch's wire frames."""
    return [control.encode("batch", n=n, epoch=0, pos=n - 1), *wire.encode_batch(batch, seq=n, sender="by-hand")]


def test_a_malformed_batch_names_the_server_and_is_acknowledged(free_port, raw_socket):
    """A server speaking the protocol by hand (docs/protocol.md §7) sends a batch whose wire message is
    garbage: the consumer's DecodeError names the server's URL and the batch; the batch is
    acknowledged all the same (the server's credit goes on) and the next one arrives."""
    url = f"127.0.0.1:{free_port()}"
    server = raw_socket(zmq.ROUTER)
    server.bind(f"tcp://{url}")
    with Connection(f"zjoin://{url}", credit=2, timeout=10) as consumer:
        peer = welcomed(server)
        server.send_multipart([peer, control.encode("batch", n=1, epoch=0, pos=0), b"not a wire message"])
        server.send_multipart([peer, *ids_message(2, {"id": np.arange(4, dtype=np.int32)})])
        with pytest.raises(DecodeError, match=f"zjoin://{url}: batch 1's wire message"):
            consumer.recv()
        assert control.decode(server.recv_multipart()[1])["upto"] == 1
        assert consumer.recv()["id"].tolist() == [0, 1, 2, 3]


def test_a_batch_that_cannot_be_rebatched_names_the_server(free_port, raw_socket):
    url = f"127.0.0.1:{free_port()}"
    server = raw_socket(zmq.ROUTER)
    server.bind(f"tcp://{url}")
    with Connection(f"zjoin://{url}", batch_size=2, timeout=10) as consumer:
        peer = welcomed(server)
        server.send_multipart([peer, *ids_message(1, {"id": np.arange(4, dtype=np.int32), "name": "one"})])
        with pytest.raises(ValueError, match=f"zjoin://{url}: batch 1: cannot rebatch field 'name'"):
            consumer.recv()


def test_hub_input_keeps_held_messages_in_order_and_ends_an_epoch_whose_marker_was_lost(free_port, raw_socket):
    """Two senders in a group of 2 push to a Hub by hand: A's next epoch arrives before B has ended
    the current one (held by the input's epoch book, then taken in order, even with the replay buffer
    full and the finish already queued), and B's marker of epoch 1 never arrives (its batch of epoch 2
    ends epoch 1 in its place). The consumer's passes are the epochs, each sender's batches in order."""
    def batch(sender: str, epoch: int, seq: int, i: int) -> list:
        return wire.encode_batch({"id": np.array([i], dtype=np.int32)}, seq=seq, epoch=epoch, sender=sender)

    def marker(sender: str, epoch: int, seq: int) -> list:
        return wire.encode_end_of_epoch(seq=seq, epoch=epoch, sender=sender, group="g", group_size=2)

    hub = Hub(f"zshare://127.0.0.1:{free_port()}", replay=2)
    try:
        with Connection(hub.addresses[0].replace("tcp", "zjoin"), credit=1, timeout=10) as consumer:
            producer = raw_socket(zmq.PUSH)
            producer.connect(hub.server.input_address)
            for message in (batch("A", 0, 0, 0), marker("A", 0, 1),
                            batch("A", 1, 2, 10), batch("A", 1, 3, 11), marker("A", 1, 4),  # held
                            batch("B", 0, 0, 1), marker("B", 0, 1),  # epoch 0 ends
                            batch("B", 1, 2, 12), batch("B", 2, 3, 20),  # B's marker of epoch 1 was lost
                            [control.encode("finish")]):
                producer.send_multipart(message)
            passes = [[int(b["id"][0]) for b in consumer] for _ in range(3)]
        assert passes == [[0, 1], [10, 11, 12], [20]]
        assert hub.close(timeout=10)["undelivered"] == {}
    finally:
        hub.abort()


def test_a_server_whose_consumers_all_left_still_ends_its_stream_on_close(free_port):
    """With the replay buffer full and no consumer left, the book takes nothing from the input; the
    producer's finish must still be read, or close() would wait forever."""
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}", replay=2)
    consumer = Connection(f"zjoin://{url}")
    for i in range(5):
        server.send(ids_batch(4 * i))
    server.end_epoch()
    assert take(consumer) == list(range(20))
    consumer.close()  # leaves: nobody holds the buffer's items any more
    time.sleep(0.5)  # the leave is read before the finish
    started = time.monotonic()
    server.close(linger=30)
    assert time.monotonic() - started < 10
