"""zshare / zsplit / zjoin through real network faults (tests/faults/tcp_proxy.py between a consumer
and its server, in one process): a connection reset (FIN or RST) and a stall shorter than the
liveness window lose, duplicate and reorder nothing and raise no PeerLost; a stall longer than the
window raises PeerLost naming the server, and iterating again after it heals goes on with nothing
lost. The faults are made from the consumer's loop at a given batch, so they fall mid-stream."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
from faults.tcp_proxy import TcpProxy, inject
from sharing_threads import serve_in_thread  # tests/transport/sharing_threads.py

from tensorcom import Connection
from tensorcom.errors import PeerLost
from tensorcom.transport.sharing.handoff import MIN_BYTES

pytestmark = pytest.mark.net

BATCHES = 300
FAULT_AT = 100  # the proxied consumer makes the fault after this many batches


def padded_batch(i: int, pad: int = 0) -> dict:
    """Batch i: sample ids 4i .. 4i+3, and `pad` bytes more (large batches take the shm handoff)."""
    return {"id": np.arange(4 * i, 4 * i + 4, dtype=np.int32), "pad": np.zeros(pad, np.uint8)}


def take_pass(conn: Connection, out: list, at: int | None = None, then=None) -> None:
    """Append the ids of one pass of `conn` to `out`; call then() after batch number `at`."""
    for count, batch in enumerate(conn, 1):
        out.extend(int(i) for i in batch["id"])
        if count == at:
            then()


def in_thread(target, *args) -> tuple[threading.Thread, list]:
    errors: list = []

    def run():
        try:
            target(*args)
        except Exception as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


@pytest.fixture
def timers():
    started: list = []
    yield started
    for timer in started:
        timer.cancel()


@pytest.mark.parametrize("scheme", ["zshare", "zsplit"])
@pytest.mark.parametrize("kind", ["reset", "rst", "stall"])
def test_a_fault_shorter_than_liveness_loses_and_duplicates_nothing(free_port, timers, scheme, kind):
    port = free_port()
    server = Connection(f"{scheme}://127.0.0.1:{port}", min_consumers=2, liveness=10)
    with TcpProxy(port) as proxy:
        direct = Connection(f"zjoin://127.0.0.1:{port}", liveness=10, timeout=60)
        proxied = Connection(f"zjoin://127.0.0.1:{proxy.port}", liveness=10, timeout=60)
        errors: list = []
        producer = serve_in_thread(server, BATCHES, errors, make_batch=padded_batch)
        got_direct: list = []
        other, other_errors = in_thread(take_pass, direct, got_direct)
        got: list = []
        take_pass(proxied, got, FAULT_AT, lambda: inject(proxy, kind, timers))
        other.join(timeout=60)
        producer.join(timeout=60)
        assert proxy.connections == (1 if kind == "stall" else 2)  # the fault was real: a reconnect
        for conn in (direct, proxied):
            conn.close()
    assert other_errors == [] and errors == []
    every = list(range(4 * BATCHES))
    if scheme == "zshare":
        assert got == every and got_direct == every  # every id once, in order, no PeerLost
    else:
        assert sorted(got + got_direct) == every  # each id exactly once over the consumers
        assert got and got == sorted(got) and got_direct == sorted(got_direct)


@pytest.mark.parametrize("scheme", ["zshare", "zsplit"])
def test_a_stall_longer_than_liveness_raises_peer_lost_and_the_session_goes_on(free_port, timers, scheme):
    port = free_port()
    server = Connection(f"{scheme}://127.0.0.1:{port}", liveness=2)
    server_id = server._end.server.server_id
    with TcpProxy(port) as proxy:
        consumer = Connection(f"zjoin://127.0.0.1:{proxy.port}", liveness=2, timeout=60)
        errors: list = []
        producer = serve_in_thread(server, BATCHES, errors, make_batch=padded_batch)
        got: list = []

        def stall():
            proxy.stall()
            timers.append(threading.Timer(4.0, proxy.resume))  # the partition's length: the proxy holds it
            timers[-1].start()

        with pytest.raises(PeerLost, match=rf"127\.0\.0\.1:{proxy.port} \(server {server_id}\)"):
            take_pass(consumer, got, 50, stall)
        assert proxy.connections == 1  # raised while the partition held
        take_pass(consumer, got)  # healed: the same pass goes on
        producer.join(timeout=60)
        assert proxy.connections >= 2
        consumer.close()
    assert errors == []
    assert got == list(range(4 * BATCHES))  # nothing lost or twice, in order


@pytest.mark.parametrize("scheme", ["zshare", "zsplit"])
def test_batches_handed_over_in_shared_memory_survive_a_reset(free_port, scheme):
    port = free_port()
    server = Connection(f"{scheme}://127.0.0.1:{port}", liveness=10)
    with TcpProxy(port) as proxy:
        consumer = Connection(f"zjoin://127.0.0.1:{proxy.port}", liveness=10, timeout=60, credit=2)
        errors: list = []
        producer = serve_in_thread(server, 60, errors, make_batch=lambda i: padded_batch(i, 2 * MIN_BYTES))
        got: list = []
        take_pass(consumer, got, 20, proxy.reset)
        assert consumer._end.joiner.links[0].shm_prefix is not None  # references, not frames
        producer.join(timeout=60)
        assert proxy.connections == 2
        consumer.close()
    assert errors == []
    assert Counter(got) == Counter(range(4 * 60)) and got == sorted(got)
