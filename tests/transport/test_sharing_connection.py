"""zshare / zsplit / zjoin through Connection in one process (threads): detaching, undelivered
batches on close, observers, CURVE, rebatching."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tensorcom import Connection
from tensorcom.errors import Detached, RecvTimeout, Undelivered
from tensorcom.transport.security import Curve, create_key_pair

pytestmark = pytest.mark.net


def ids_batch(start: int, n: int = 4) -> dict:
    return {"id": np.arange(start, start + n, dtype=np.int32)}


def serve_in_thread(conn: Connection, batches: int, errors: list) -> threading.Thread:
    def run():
        try:
            for i in range(batches):
                conn.send(ids_batch(4 * i))
            conn.end_epoch()
            conn.close(linger=10)
        except Exception as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


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
