"""Connection between processes: a serving process and a training-side receiver, and lossy PUB/SUB."""

import time

import numpy as np
import pytest

from tensorcom.errors import RecvTimeout
from tensorcom.transport.connection import Connection

pytestmark = [pytest.mark.net, pytest.mark.procs]


def serve_batches(url, n, size, **args):
    """Process body: serve n batches [uint8 (size,), int32 (2,)] to url, then linger for delivery."""
    with Connection(url, timeout=20, **args) as conn:
        conn.serve([np.full(size, i % 256, np.uint8), np.array([i, i], np.int32)] for i in range(n))
        time.sleep(0.5)


def publish_until_heard(url, heard, done, n, size):
    """Process body: publish warm-up batches until `heard` is set, then n batches fast, then markers
    until `done` is set."""
    with Connection(url, sndhwm=2, timeout=20) as conn:
        while not heard.wait(0.02):
            conn.send([np.zeros(size, np.uint8)])
        for i in range(n):
            conn.send([np.full(size, i % 256, np.uint8)])
        time.sleep(0.5)
        for _ in range(100):  # markers may be dropped too: repeat until the subscriber has left
            conn.end_epoch()
            if done.wait(0.05):
                break


def test_sender_and_receiver_in_separate_processes(processes, ipc_path):
    url = ipc_path()
    with Connection(f"zpull+ipc://{url}", timeout=20, senders=2) as receiver:
        for _ in range(2):
            processes.start(serve_batches, f"zpush+ipc://{url}", 20, 100_000)
        received = list(receiver)
    assert len(received) == 40 and receiver.epoch_number == 1
    assert sorted(int(b[1][0]) for b in received) == sorted(list(range(20)) * 2)
    assert all(b[0][0] == int(b[1][0]) % 256 for b in received)
    assert receiver.stats.dropped == 0 and receiver.count == 40 * 100_000  # samples: first field length


def test_slow_subscriber_counts_dropped_batches(processes, free_port):
    port = free_port()
    heard, done = processes.context.Event(), processes.context.Event()
    n = 200
    with Connection(f"zsub://127.0.0.1:{port}", rcvhwm=1, timeout=20) as receiver:
        processes.start(publish_until_heard, f"zpub://127.0.0.1:{port}", heard, done, n, 1 << 16)
        receiver.recv()
        heard.set()
        received = 0
        for _ in receiver:
            received += 1
            time.sleep(0.005)
        done.set()
        dropped = receiver.stats.dropped
    assert dropped > 0, "a subscriber this slow must miss batches"
    assert n <= received + dropped <= n + 200  # warm-up batches sent meanwhile may count too
    assert "dropped" in receiver.stats.summary()


def test_receiver_times_out_when_server_dies(processes, free_port):
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", timeout=1) as receiver:
        proc = processes.start(serve_batches, f"zpush://127.0.0.1:{port}", 3, 10, epoch=10)
        proc.join(timeout=20)
        batches = []
        with pytest.raises(RecvTimeout):
            for _ in range(2):
                batches += list(receiver)
    assert len(batches) == 3  # the first epoch ended with its marker; then silence
