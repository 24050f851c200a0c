"""A PUB/SUB pass never merges epochs: a batch of a later epoch stands in for its sender's lost marker
(EpochBook, without sockets), and a slow subscriber of a real publisher never mixes epochs."""

from __future__ import annotations

import itertools
import queue
import threading
import time

import numpy as np
import pytest

from tensorcom import Connection
from tensorcom.transport.epochs import EpochBook, Verdict
from tensorcom.wire import Message


def batch(sender, seq, epoch):
    return Message(kind="batch", batch=[(epoch, seq)], seq=seq, epoch=epoch, sender=sender, group=None,
                   group_size=1, protocol=2, nbytes=10)


def marker(sender, seq, epoch, group=None, size=1):
    return Message(kind="end_of_epoch", batch=None, seq=seq, epoch=epoch, sender=sender, group=group,
                   group_size=size, protocol=2, nbytes=5)


def feed(book, messages):
    """Process messages as a Connection does; returns the passes (lists of (epoch, seq)) and the rest."""
    passes, current, queue = [], [], list(messages)
    while True:
        message = book.release()
        if message is None:
            if not queue:
                return passes, current
            message = queue.pop(0)
        verdict = book.admit(message)
        if verdict is Verdict.LOST_MARKER:
            message = book.stand_in
        elif verdict not in (Verdict.DELIVER, Verdict.LATE):
            continue
        if message.kind == "batch":
            book.delivered(message)
            current.append(message.batch[0])
        elif book.marker(message):
            passes.append(current)
            current = []


def test_a_batch_of_the_next_epoch_ends_the_pass_its_marker_would_have_ended():
    book = EpochBook(1)
    passes, rest = feed(book, [batch("a", 0, 0), batch("a", 1, 0), batch("a", 3, 1), batch("a", 4, 1)])
    assert passes == [[(0, 0), (0, 1)]] and rest == [(1, 3), (1, 4)]
    assert book.lost_markers == 1 and book.implicit_ends == 1 and book.passes == 1


def test_a_stand_in_that_does_not_end_the_pass_holds_the_batch_for_the_next():
    book = EpochBook(1)
    messages = [batch("a", 0, 0), batch("b", 0, 0), batch("a", 2, 1), batch("b", 1, 0), marker("b", 2, 0)]
    passes, rest = feed(book, messages)
    assert passes == [[(0, 0), (0, 0), (0, 1)]] and rest == [(1, 2)]  # a's epoch-1 batch waited for b
    assert book.implicit_ends == 0 and book.lost_markers == 1


def test_whole_epochs_lost_count_every_marker_but_end_one_pass():
    book = EpochBook(1)
    passes, rest = feed(book, [batch("a", 0, 0), batch("a", 9, 3)])
    assert passes == [[(0, 0)]] and rest == [(3, 9)] and book.lost_markers == 3
    passes, _ = feed(book, [batch("a", 10, 3), marker("a", 11, 5)])  # a later marker stands for lost ones
    assert passes == [[(3, 10)]] and book.lost_markers == 5 and book.position["a"] == 6


def test_an_epoch_lost_whole_opens_no_pass():
    book = EpochBook(1)
    passes, _ = feed(book, [batch("a", 0, 0), marker("a", 1, 0), batch("a", 5, 2), marker("a", 6, 2)])
    assert passes == [[(0, 0)], [(2, 5)]] and book.lost_markers == 1 and book.implicit_ends == 0


def test_a_duplicate_marker_is_dropped():
    """(A PUSH whose round-robin gave one peer two markers of one epoch.)"""
    book = EpochBook(1)
    passes, _ = feed(book, [batch("a", 0, 0), marker("a", 1, 0)])
    assert book.admit(marker("a", 1, 0)) is Verdict.DROP
    passes, rest = feed(book, [batch("a", 1, 1)])
    assert passes == [] and rest == [(1, 1)]


def test_the_stand_in_takes_the_group_of_the_senders_markers():
    book = EpochBook(1)
    feed(book, [batch("a", 0, 0), marker("a", 1, 0, group="g", size=2), batch("b", 0, 0),
                marker("b", 1, 0, group="g", size=2)])
    passes, rest = feed(book, [batch("a", 1, 1), batch("b", 1, 1), batch("a", 2, 2)])
    assert book.stand_in.group == "g" and book.stand_in.group_size == 2 and book.stand_in.epoch == 1
    assert passes == [] and rest == [(1, 1), (1, 1)]  # the group needs b's marker too
    passes, rest = feed(book, [marker("b", 2, 1, group="g", size=2)])
    assert passes == [[]] and rest == [(2, 2)]  # the pass ends; a's epoch-2 batch opens the next


def test_abandon_ends_the_pass_and_a_returning_sender_continues_its_epoch():
    book = EpochBook(1)
    feed(book, [batch("a", 0, 0), batch("b", 0, 0), marker("b", 1, 0), batch("b", 1, 1)])
    book.abandon(["a"])
    assert book.waiting_on() == [] and book.abandoned == 1 and book.markers == {}
    assert book.admit(batch("a", 1, 0)) is Verdict.DELIVER  # the rest of its epoch: nothing discarded


def publish(url, ready, size, epochs, per_epoch, fast_sent, heard):
    """After `ready` is set, publish epochs of `per_epoch` batches [uint8 (size,), int32 [epoch]] as fast
    as ZeroMQ takes them (it drops what a slow subscriber has no room for) and set `fast_sent`; then
    probes [-2], [-3], ... until the subscriber has the latest one sent (`heard`: what it reports), so
    nothing of the fast epochs is left on the way; then the last epoch in step with the subscriber (each
    batch once it has the one before), so it arrives whole; then wait for the subscriber's None. The
    queue holds 2: with room for one message only, ZeroMQ's PUB drops now and then a message sent
    after the subscriber took the one before (its count of what left the queue lags)."""
    with Connection(url, sndhwm=2) as conn:
        warm = [np.zeros(10, np.uint8), np.array([-1], np.int32)]
        while not ready.wait(0.01):
            conn.send(warm)
        conn.epoch_number = 0
        for epoch in range(epochs - 1):
            data = np.full(size, epoch, np.uint8)
            for _ in range(per_epoch):
                conn.send([data, np.array([epoch], np.int32)], copy=False)
            conn.end_epoch()
        fast_sent.set()
        for probe in itertools.count(-2, -1):  # a probe may be lost too: the next one is sent then
            conn.send([warm[0], np.array([probe], np.int32)])
            if caught_up(heard, probe):
                break
        last = epochs - 1
        for _ in range(per_epoch):
            conn.send([np.full(size, last, np.uint8), np.array([last], np.int32)], copy=False)
            assert heard.get(timeout=30) == last
        conn.end_epoch()
        heard.get(timeout=30)  # the subscriber is done: the marker went out before the close


def caught_up(heard: queue.Queue, probe: int) -> bool:
    """Whether the subscriber reports `probe` (the latest sent) within 50 ms; earlier probes are skipped."""
    try:
        while heard.get(timeout=0.05) != probe:
            pass
    except queue.Empty:
        return False
    return True


def one_pass(receiver, heard: queue.Queue, last: int) -> list[int]:
    """The epochs of one pass's batches (warm-up and probes left out); probes and the last epoch's
    batches are reported in `heard` as they come."""
    got = []
    for batch in receiver:
        value = int(batch[1][0])
        if value < -1 or value == last:
            heard.put(value)
        if value >= 0:
            got.append(value)
    return got


@pytest.mark.net
def test_slow_subscriber_never_mixes_epochs(free_port):
    port = free_port()
    ready, fast_sent, heard = threading.Event(), threading.Event(), queue.Queue()
    with Connection(f"zsub://127.0.0.1:{port}", rcvhwm=1, timeout=10, liveness=None) as receiver:
        sender = threading.Thread(target=publish, args=(f"zpub://127.0.0.1:{port}", ready, 2_000_000, 4, 10,
                                                        fast_sent, heard))
        sender.start()
        try:
            while receiver.recv()[1][0] != -1:
                pass
            ready.set()
            assert fast_sent.wait(20)  # 60 MB sent while nothing was read: most of it, markers too, dropped
            passes = []
            while len(passes) < 10:
                got = one_pass(receiver, heard, 3)
                passes.append(got)
                time.sleep(0.3)  # slow: the publisher drops what does not fit, markers included
                if got and got[-1] == 3:
                    break
        finally:
            ready.set()
            heard.put(None)
            sender.join(timeout=40)
    assert all(len(set(p)) <= 1 for p in passes), passes
    assert passes[-1] == [3] * 10 and receiver.epoch_number == len(passes)
    assert receiver.stats.lost_markers >= 1 and receiver.stats.implicit_ends >= 1
    assert receiver.stats.as_dict()["lost_markers"] == receiver.stats.lost_markers
