"""The delivery rules of zshare / zsplit (tensorcom.transport.sharing), without sockets."""

from __future__ import annotations

import pytest

from sharing_books import Stream, feed  # tests/transport/sharing_books.py

from tensorcom.transport.sharing import ShareBook, SplitBook, make_book


def names(sends, peer):
    return [s.item.frames[0] if s.item.frames else "END" for s in sends if s.peer == peer]


def ack_sends(book, sends, peer):
    """Acknowledge each of `sends` that went to `peer` (the others stay unacknowledged)."""
    for s in sends:
        if s.peer == peer:
            book.ack(peer, s.number)


def drain(book, acks=True):
    """Send everything possible, acknowledging each consumer's batches, until nothing moves."""
    got = {}
    while True:
        sends = book.sends()
        if not sends:
            return got
        for s in sends:
            got.setdefault(s.peer, []).append(s.item.frames[0] if s.item.frames else "END")
            if acks and s.number:
                book.ack(s.peer, s.number)


def test_share_every_consumer_gets_every_item_in_order():
    book, stream = ShareBook(min_consumers=2), Stream()
    book.join("a", "a", 2)
    assert not book.can_take()  # min_consumers=2: nothing flows before the second consumer
    book.join("b", "b", 2)
    got = {}
    for kind in "bbbe" + "bbe":
        assert book.can_take()
        book.add(stream.batch() if kind == "b" else stream.end())
        for peer, items in drain(book).items():
            got.setdefault(peer, []).extend(items)
    expected = ["b0.0", "b0.1", "b0.2", "END", "b1.0", "b1.1", "END"]
    assert got == {"a": expected, "b": expected}


def test_share_credit_bounds_unacknowledged_batches():
    book, stream = ShareBook(replay=8), Stream()
    book.join("a", "a", 2)
    feed(book, stream, "bbbbb")
    first = book.sends()
    assert [s.number for s in first] == [1, 2]  # credit 2: two out, the rest waits
    assert book.sends() == []
    book.ack("a", 1)
    assert [s.number for s in book.sends()] == [3]


def test_share_paces_to_the_slowest_within_the_replay_buffer():
    book, stream = ShareBook(replay=3), Stream()
    book.join("fast", "fast", 10)
    book.join("slow", "slow", 1)
    added = feed(book, stream, "b" * 10)
    assert added == 3  # the slow consumer has acknowledged nothing: the buffer is full
    drain(book, acks=False)
    book.ack("fast", 3)
    assert not book.can_take()  # the slow one still holds the front
    book.ack("slow", 1)
    assert book.can_take()


def test_share_detach_policy_drops_the_consumer_that_blocks_a_full_buffer():
    now = [0.0]
    book, stream = ShareBook(replay=3, policy="detach", detach_after=1.0, clock=lambda: now[0]), Stream()
    book.join("fast", "fast", 10)
    book.join("slow", "slow", 1)
    feed(book, stream, "bbb")
    ack_sends(book, book.sends(), "fast")
    assert not book.can_take()  # held: the slow one may only have an acknowledgement in flight
    now[0] = 0.5
    assert not book.can_take() and len(book.consumers) == 2
    now[0] = 1.0
    assert book.can_take()  # held for detach_after: the slow one was detached
    assert [peer for peer, _ in book.take_detached()] == ["slow"]
    assert list(book.consumers) == ["fast"]


@pytest.mark.parametrize("replay, items, start, late_gets", [
    (20, "bbe" + "bb", (1, 0), ["b1.0", "b1.1"]),  # the epoch's start is still buffered: there
    (2, "bbbbb", (0, 3), ["b0.3", "b0.4"]),  # it left the buffer: the oldest buffered batch of the epoch
])
def test_share_late_joiner_starts_at_the_oldest_buffered_item_of_the_epoch(replay, items, start, late_gets):
    book, stream = ShareBook(replay=replay), Stream()
    book.join("a", "a", 100)
    for kind in items:
        feed(book, stream, kind)
        drain(book)
    welcome = book.join("late", "late", 100)
    assert (welcome.epoch, welcome.pos) == start
    assert drain(book)["late"] == late_gets


def test_share_removed_consumer_no_longer_holds_the_buffer():
    book, stream = ShareBook(replay=2), Stream()
    book.join("a", "a", 5)
    book.join("dead", "dead", 5)
    feed(book, stream, "bb")
    ack_sends(book, book.sends(), "a")
    assert not book.can_take()
    book.remove("dead")
    assert book.lost_batches == 2
    assert book.can_take()


def test_share_done_and_undelivered():
    book, stream = ShareBook(), Stream()
    book.join("a", "a", 1)
    feed(book, stream, "bbe")
    book.end_stream()
    assert not book.done()
    assert book.undelivered() == {"a": 2}
    drain(book)
    assert book.done() and book.undelivered() == {}


def test_split_each_batch_goes_to_one_consumer_and_the_end_to_all():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 2)
    book.join("b", "b", 2)
    feed(book, stream, "bbbbbe")
    got = drain(book)
    batches = sorted(x for items in got.values() for x in items if x != "END")
    assert batches == [f"b0.{i}" for i in range(5)]
    assert got["a"][-1] == "END" and got["b"][-1] == "END"
    assert abs(len(got["a"]) - len(got["b"])) <= 1


def test_split_end_waits_for_every_acknowledgement_and_holds_the_next_epoch():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 4)
    feed(book, stream, "bbe")
    sends = book.sends()
    assert [s.number for s in sends] == [1, 2]  # no end yet: nothing acknowledged
    assert not book.can_take()  # the epoch is closing: the next one waits
    book.ack("a", 2)
    assert names(book.sends(), "a") == ["END"]
    assert book.can_take()


def test_split_dead_consumer_batches_go_to_another():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 2)
    book.join("dead", "dead", 2)
    feed(book, stream, "bbbb")
    sends = book.sends()
    mine = names(sends, "dead")
    ack_sends(book, sends, "a")
    book.remove("dead")
    assert book.reassigned == len(mine) == 2
    again = names(book.sends(), "a")
    assert again == mine  # in their original order, to the survivor


def test_split_without_consumers_keeps_batches():
    book, stream = SplitBook(replay=3), Stream()
    book.join("a", "a", 1)
    book.remove("a")
    assert feed(book, stream, "bbbbb") == 3  # bounded: nothing sent, nothing dropped
    book.end_stream()
    assert book.undelivered() == {"(nobody)": 3}
    assert not book.done()


def test_stale_and_unknown_acks_are_ignored():
    book, stream = SplitBook(), Stream()
    book.join("a", "a", 2)
    feed(book, stream, "b")
    book.sends()
    book.ack("a", 99)  # beyond what was sent: only what was sent counts
    book.ack("ghost", 1)
    consumer = book.consumers["a"]
    assert consumer.acked == 1 and consumer.free == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_bad_options(bad):
    with pytest.raises(ValueError):
        ShareBook(replay=bad)
    with pytest.raises(ValueError):
        SplitBook(min_consumers=bad)
    with pytest.raises(ValueError):
        ShareBook().join("a", "a", bad)


def test_make_book():
    assert isinstance(make_book("share", policy="detach"), ShareBook)
    assert isinstance(make_book("split", policy="pace"), SplitBook)
    with pytest.raises(ValueError, match="mode"):
        make_book("broadcast")
    with pytest.raises(ValueError, match="policy"):
        ShareBook(policy="drop")


def test_reports_say_position_lag_rate_credit():
    book, stream = ShareBook(), Stream()
    book.join("a", "job-a", 3)
    feed(book, stream, "bbb")
    sends = book.sends()
    book.ack("a", sends[0].number)
    (report,) = book.reports()
    assert report["name"] == "job-a" and (report["epoch"], report["pos"]) == (0, 2)
    assert report["lag"] == 0 and report["credit"] == 3 and report["free"] == 1
    assert report["samples_per_s"] > 0
