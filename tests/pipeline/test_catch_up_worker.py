"""The catch-up worker of a served zshare stream (tensorcom.pipeline.catch_up): one spawned process
that makes asked batches of a portion again and sends them, each behind its control frame, to a
sharing server's catch-up input (here a plain PULL socket)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from tensorcom import wire
from tensorcom.pipeline import Pipeline
from tensorcom.pipeline.catch_up import CatchUpWorker
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing.catch_up import Regenerate

pytestmark = [pytest.mark.procs]


def sample(i):
    return {"id": np.int64(i)}


def make_pipeline():
    return Pipeline(range(20)).map(sample).batch(2)


def broken_pipeline():
    raise RuntimeError("no pipeline here")


@pytest.fixture
def inlet(ipc_path):
    context = zmq.Context.instance()
    sock = context.socket(zmq.PULL)
    sock.rcvhwm = 0
    address = "ipc://" + ipc_path()
    sock.bind(address)
    yield sock, address
    sock.close(linger=0)


def test_the_asked_batches_of_a_portion_come_with_what_they_are(inlet):
    sock, address = inlet
    worker = CatchUpWorker(make_pipeline, address)
    try:
        worker([Regenerate("s", 3, 1, 2, (1, 3))])  # portion 1 of 2 holds ids 1, 3, 5, ...: batches [1, 3], [5, 7], ...
        got = []
        while len(got) < 2 and sock.poll(30_000):
            frames = sock.recv_multipart()
            meta, message = control.decode(frames[0]), wire.decode_message(frames[1:])
            got.append((meta["index"], meta["epoch"], message.index, [int(i) for i in message.batch["id"]]))
        assert got == [(1, 3, 1, [5, 7]), (3, 3, 3, [13, 15])]
        assert message.portion == ("s", 1, 2) and message.epoch == 3
        deadline = time.monotonic() + 30
        while worker.made < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (worker.made, worker.runs, worker.failure) == (2, 1, None)
    finally:
        worker.close()


def test_a_failed_run_hands_its_requests_back(inlet):
    _, address = inlet
    worker = CatchUpWorker(broken_pipeline, address)
    asks = [Regenerate("s", 0, 0, 2, (0, 1))]
    try:
        worker(asks)
        deadline = time.monotonic() + 30
        failed = []
        while not failed and time.monotonic() < deadline:
            failed = worker.take_failed()
            time.sleep(0.01)
        assert failed == asks and "no pipeline here" in str(worker.failure)
    finally:
        worker.close()
