"""Data wait measured in real receiving loops: a consumer slower than its sender waits little, one fed
by a slow sender waits most of the time; a zshare server's consumer reports carry each job's data
wait, and a consumer that reports none (an older one) is served and reported as before."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zmq
from sharing_threads import ids_batch  # tests/transport/sharing_threads.py

from tensorcom import Connection, urls
from tensorcom.transport.sharing.joiner import PASS_END, Joiner

pytestmark = pytest.mark.net

BATCHES = 5
STEP = 0.05  # the stepping consumer's work per batch (its loop sleeps: that is its step)


def test_slow_sender_means_data_wait_and_slow_consumer_means_none(free_port):
    fast_url, slow_url = (f"127.0.0.1:{free_port()}" for _ in range(2))
    fast_rx = Connection(f"zpull://{fast_url}", timeout=10, epoch=BATCHES)
    slow_rx = Connection(f"zpull://{slow_url}", timeout=10)
    asked, stop = threading.Event(), threading.Event()

    def slow_sender(conn: Connection) -> None:
        for _ in range(BATCHES):  # each batch only once the consumer asks, then made in 20 ms
            while not asked.wait(0.1):
                if stop.is_set():
                    return
            asked.clear()
            stop.wait(0.02)
            conn.send([np.zeros((2, 3), np.float32)])

    with Connection(f"zpush://{fast_url}", timeout=10) as fast_tx, \
            Connection(f"zpush://{slow_url}", timeout=10) as slow_tx:
        thread = threading.Thread(target=slow_sender, args=(slow_tx,), daemon=True)
        thread.start()
        try:
            for _ in range(BATCHES):
                fast_tx.send([np.zeros((2, 3), np.float32)])
            for _ in fast_rx:  # iteration: the step between batches is the caller's
                threading.Event().wait(STEP)
            fast = fast_rx.stats.as_dict()  # read at once: from now on, the open step counts
            for _ in range(BATCHES):  # recv(): every batch waited for
                asked.set()
                slow_rx.recv()
            slow = slow_rx.stats.as_dict()
        finally:
            stop.set()
            thread.join(timeout=10)
    fast_rx.close()
    slow_rx.close()
    assert fast["batches"] == slow["batches"] == BATCHES
    for stats in (fast, slow):
        assert 0.0 <= stats["data_wait"] <= 1.0 and 0.0 <= stats["recent_data_wait"] <= 1.0
    assert fast["step_s"] > fast["data_wait_s"] and slow["data_wait_s"] > slow["step_s"]
    assert slow["data_wait"] > fast["data_wait"] and slow["recent_data_wait"] > fast["recent_data_wait"]


def _consume(conn: Connection, step: float, done: list) -> None:
    for _ in conn:
        if step:
            threading.Event().wait(step)
    done.append(conn.sender)


def _consume_without_reports(joiner: Joiner, done: list) -> None:
    while joiner.next() is not PASS_END:
        pass
    done.append(joiner.name)


def test_zshare_consumer_reports_carry_each_jobs_data_wait(free_port):
    url = f"127.0.0.1:{free_port()}"
    server = Connection(f"zshare://{url}", min_consumers=3, replay=2)
    stepping = Connection(f"zjoin://{url}", credit=1, timeout=10)
    eager = Connection(f"zjoin://{url}", credit=1, timeout=10)  # held back by the stepping one (share mode)
    context = zmq.Context()
    old = Joiner(urls.parse_all(f"zjoin://{url}"), context=context, name="old", credit=1, timeout=10)  # no waits
    observer = Connection(f"zjoin://{url}", observe=True)
    done: list = []
    threads = [threading.Thread(target=_consume, args=(stepping, STEP, done), daemon=True),
               threading.Thread(target=_consume, args=(eager, 0.0, done), daemon=True),
               threading.Thread(target=_consume_without_reports, args=(old, done), daemon=True)]
    try:
        for thread in threads:
            thread.start()
        for i in range(BATCHES):
            server.send(ids_batch(4 * i))
        server.end_epoch()
        for thread in threads:
            thread.join(timeout=20)
        assert sorted(done) == sorted([stepping.sender, eager.sender, "old"])
        reports = {}
        for _ in range(10):  # status reports come about every second
            reports = {r["name"]: r for r in observer.consumer_status(wait=0.5)}
            if len(reports) == 3 and all(r["acked"] == BATCHES for r in reports.values()):
                break
        assert all(r["acked"] == BATCHES for r in reports.values()) and len(reports) == 3
        mine, theirs, older = reports[stepping.sender], reports[eager.sender], reports["old"]
        assert older["data_wait"] == 0.0 and older["data_wait_s"] == 0.0  # it reported nothing: served all the same
        for report in (mine, theirs):
            assert 0.0 <= report["data_wait"] <= 1.0 and report["data_wait_s"] > 0.0
        assert theirs["data_wait"] > mine["data_wait"]  # the eager job waits for the stepping one's pace
        assert theirs["data_wait_s"] > mine["data_wait_s"]
        assert {r["name"] for r in server.consumers if "data_wait" in r} == set(reports)  # the server's own view
    finally:
        for conn in (observer, stepping, eager):
            conn.close()
        old.close()
        context.term()
        server.close(linger=5)
