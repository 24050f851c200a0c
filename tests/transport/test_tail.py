"""No silent tail loss: closing a sender waits until its receivers confirmed everything, however slow
they are, and says how many batches were not confirmed when a receiver goes away or `linger` passes
(tensorcom.transport._outbound)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tensorcom import Connection
from tensorcom.errors import Undelivered, WorkerError
from tensorcom.pipeline import Pipeline
from tensorcom.transport._outbound import Delivery

PEER = str(Path(__file__).with_name("stream_peer.py"))
BIG = 4_000_000  # bytes per batch: the kernel's socket buffers hold only a few


def test_delivery_report_names_receivers_and_the_count():
    Delivery(peers=2).check("zpush://x:1")  # everything confirmed: no error
    report = Delivery(peers=2, troubled={"host:1:ab": "went away"}, counts={"host:1:ab": 7}, undelivered=7,
                      marker=True)
    with pytest.raises(Undelivered, match=r"zpush://x:1.*7 batch\(es\) and the end-of-epoch marker not "
                                          r"confirmed.*host:1:ab: went away") as info:
        report.check("zpush://x:1")
    assert info.value.counts == {"host:1:ab": 7} and info.value.undelivered == 7


def start(popen, *args):
    proc = popen.python(PEER, *args, stdout=subprocess.PIPE, text=True)
    assert "ready" in json.loads(proc.stdout.readline()) if args[0] == "serve" else True
    return proc


@pytest.mark.net
@pytest.mark.procs
def test_slow_receiver_gets_the_whole_tail_and_the_server_exits_after(popen, free_port):
    """25 batches all queued in the server at once; the receiver takes 0.5 s per batch (12.5 s, past the
    10 s a fixed linger used to give): every batch and the marker arrive, the server exits 0 after."""
    port = free_port()
    with Connection(f"zpull://127.0.0.1:{port}", rcvhwm=1, timeout=30) as receiver:
        server = start(popen, "serve", f"zpush://127.0.0.1:{port}", "--batches", "25", "--size", str(BIG),
                       "--sndhwm", "30")
        got = []
        for batch in receiver:
            got.append(batch[1].tolist())
            if len(got) == 22:
                assert server.poll() is None  # still delivering its tail, 11 s after it was done sending
            time.sleep(0.5)
        assert receiver.epoch_number == 1  # the marker arrived
        assert server.wait(timeout=10) == 0
    assert got == [[0, i] for i in range(25)]
    assert [json.loads(line) for line in server.stdout.read().splitlines()] == [{"epoch": 0}, {"closed": True}]


@pytest.mark.net
@pytest.mark.procs
def test_receiver_that_disappears_makes_close_say_how_much(popen, free_port):
    port = free_port()
    server = start(popen, "serve", f"zpush://127.0.0.1:{port}", "--batches", "25", "--size", str(BIG),
                   "--sndhwm", "30")
    receiver = start(popen, "receive", f"zpull://127.0.0.1:{port}", "--count", "3", "--rcvhwm", "1")
    for _ in range(3):
        assert "got" in json.loads(receiver.stdout.readline())
    assert json.loads(server.stdout.readline()) == {"epoch": 0}  # all sent: the server is closing
    os.kill(receiver.pid, signal.SIGKILL)
    assert server.wait(timeout=20) == 3
    report = [json.loads(line) for line in server.stdout.read().splitlines()][-1]
    assert report["error"] == "Undelivered" and "went away before confirming them" in report["text"]
    assert 22 <= report["undelivered"] <= 25 and "end-of-epoch marker" in report["text"]


@pytest.mark.net
def test_close_with_linger_gives_up_on_a_receiver_that_does_not_read(free_port):
    where = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{where}", rcvhwm=1) as receiver:
        sender = Connection(f"zpush://{where}", sndhwm=8)
        for i in range(8):
            sender.send([np.full(1_000_000, i, np.uint8)])
        sender.end_epoch()
        assert receiver.recv()[0][0] == 0  # it takes one (and so confirms), then reads no more
        start = time.monotonic()
        with pytest.raises(Undelivered, match="did not confirm them in time") as info:
            sender.close(linger=1)
        assert 1 <= time.monotonic() - start < 3
        assert info.value.undelivered == 7 and list(info.value.counts.values()) == [7]
        assert receiver.recv()[0][0] == 1  # the receiver is still there


@pytest.mark.net
def test_linger_zero_discards_without_a_word_and_an_exception_in_with_does_too(free_port):
    where = f"127.0.0.1:{free_port()}"
    with Connection(f"zpull://{where}", rcvhwm=1):
        sender = Connection(f"zpush://{where}")
        sender.send([np.zeros(1_000_000, np.uint8)])
        sender.close(linger=0)
        with pytest.raises(KeyError), Connection(f"zpush://{where}") as other:
            other.send([np.zeros(1_000_000, np.uint8)])
            raise KeyError("leaving by an exception")


def big_batch(i):
    return [np.full(2_000_000, i % 256, np.uint8), np.array([i], np.int32)]


def big_batches():
    """A pipeline factory for serve("test_tail:big_batches", ...): 25 batches of 2 MB."""
    return Pipeline(range(25)).map(big_batch)


@pytest.mark.net
@pytest.mark.procs
def test_serve_fails_when_its_consumer_disappears(popen, free_port):
    """tensorcom.serve: the worker's close raises Undelivered, so serve raises WorkerError (and the
    server tools exit non-zero) instead of returning as if everything had been delivered."""
    from tensorcom.pipeline.serving import serve

    port = free_port()
    outcome, sent = {}, threading.Event()

    def counted(stats):
        if stats["batches"] == 25:  # counted after the epoch: all queued, the worker is closing
            sent.set()

    def run():
        try:
            outcome["stats"] = serve("test_tail:big_batches", f"zpush://127.0.0.1:{port}", report=0.05,
                                     on_report=counted, connection_options={"sndhwm": 30})
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    receiver = start(popen, "receive", f"zpull://127.0.0.1:{port}", "--count", "2", "--rcvhwm", "1")
    for _ in range(2):
        assert "got" in json.loads(receiver.stdout.readline())
    assert sent.wait(timeout=60)  # the worker has queued everything (a PUSH with no peer would wait for one)
    os.kill(receiver.pid, signal.SIGKILL)
    thread.join(timeout=90)  # a bound on a hang only: serve ended 13 s after the kill on a loaded machine, over
    # 30 s on a more loaded one
    assert isinstance(outcome.get("error"), WorkerError), outcome
    assert "Undelivered" in str(outcome["error"]) and "went away before confirming them" in str(outcome["error"])
