"""EpochBook: the end-of-epoch rules of a receiver, fed plain wire.Message values (no sockets)."""

import pytest

from tensorcom.transport.epochs import EpochBook, Verdict, expected_groups
from tensorcom.wire import Message, Portion


def batch(sender, seq=0, epoch=0, portion=None, nbytes=10):
    return Message(kind="batch", batch=[seq], seq=seq, epoch=epoch, sender=sender, group=None,
                   group_size=1, protocol=2, nbytes=nbytes, portion=portion)


def marker(sender, epoch=0, group=None, size=1, portion=None):
    return Message(kind="end_of_epoch", batch=None, seq=0, epoch=epoch, sender=sender, group=group,
                   group_size=size, protocol=2, nbytes=5, portion=portion)


def feed(book, messages):
    """Process messages as a Connection does; returns (delivered batch payloads per pass, passes)."""
    passes, current = [], []
    queue = list(messages)
    while True:
        message = book.release()
        if message is None:
            if not queue:
                break
            message = queue.pop(0)
        verdict = book.admit(message)
        if verdict not in (Verdict.DELIVER, Verdict.LATE):
            continue
        if message.kind == "batch":
            book.delivered(message)
            current.append((message.sender, message.seq))
        elif book.marker(message):
            passes.append(current)
            current = []
    return passes, current


def test_one_sender_one_marker_ends_the_pass():
    book = EpochBook(1)
    passes, rest = feed(book, [batch("a", 0), batch("a", 1), marker("a")])
    assert passes == [[("a", 0), ("a", 1)]] and rest == [] and book.passes == 1


def test_group_of_n_senders_needs_n_distinct_markers():
    book = EpochBook(1)
    messages = [batch("a"), marker("a", group="g", size=3), marker("a", group="g", size=3, epoch=1),
                batch("b"), marker("b", group="g", size=3)]
    passes, delivered = feed(book, messages)
    assert passes == [] and delivered == [("a", 0), ("b", 0)]  # two distinct senders of three
    passes, _ = feed(book, [batch("c"), marker("c", group="g", size=3)])
    assert passes == [[("c", 0)]] and book.ended == {"a"}  # a's second marker waits for the next pass


def test_expected_groups_one_per_endpoint():
    assert expected_groups([False, False], 5) == 2 and expected_groups([True], 3) == 3
    assert expected_groups([False, True], 1) == 2 and expected_groups([], 1) == 0
    book = EpochBook(2)
    assert feed(book, [batch("a"), marker("a")])[0] == []
    assert feed(book, [batch("b"), marker("b")])[0] == [[("b", 0)]]


def test_a_sender_heard_from_holds_the_pass_open():
    book = EpochBook(1)
    passes, _ = feed(book, [batch("a"), batch("b"), marker("a")])
    assert passes == [] and book.waiting_on() == ["b"]
    passes, _ = feed(book, [batch("b", 1), marker("b")])
    assert passes == [[("b", 1)]] and book.waiting_on() == []


def test_next_epoch_batches_of_an_ended_sender_are_held_until_the_pass_ends():
    book = EpochBook(1)
    messages = [batch("a", 0), batch("b", 0), marker("a"), batch("a", 1, epoch=1), batch("a", 2, epoch=1),
                batch("b", 1), marker("b")]
    passes, rest = feed(book, messages)
    assert passes == [[("a", 0), ("b", 0), ("b", 1)]]
    assert rest == [("a", 1), ("a", 2)] and book.held == []  # released in order


def test_early_markers_count_for_later_passes():
    book = EpochBook(1)
    passes, _ = feed(book, [batch("a"), marker("a"), marker("a", epoch=1), marker("a", epoch=2)])
    assert len(passes) == 3 and passes[1:] == [[], []]


def test_held_limits_let_messages_through_late():
    book = EpochBook(1, max_held_messages=2)
    feed(book, [batch("a"), batch("b"), marker("a")])
    verdicts = [book.admit(batch("a", seq, epoch=1)) for seq in range(1, 5)]
    assert verdicts == [Verdict.HOLD, Verdict.HOLD, Verdict.LATE, Verdict.LATE]
    book = EpochBook(1, max_held_bytes=15)
    feed(book, [batch("a"), batch("b"), marker("a")])
    assert [book.admit(batch("a", s, epoch=1)) for s in (1, 2, 3)] == [Verdict.HOLD, Verdict.HOLD, Verdict.LATE]


def test_protocol_1_messages_are_always_delivered_and_never_end_a_pass():
    book = EpochBook(1)
    v1 = Message(kind="batch", batch=[], seq=None, epoch=None, sender=None, group=None, group_size=1,
                 protocol=1, nbytes=1)
    assert book.admit(v1) is Verdict.DELIVER
    book.delivered(v1)
    assert book.waiting_on() == []


def test_a_restarted_worker_replaces_the_sender_it_restarts():
    """Worker 0 of stream s dies mid-epoch; its restart (a new sender id) carries the same portion:
    the old sender stops holding the pass open, and its leftovers are dropped."""
    book = EpochBook(1)
    old, new = Portion("s", 0, 2), Portion("s", 0, 2)
    other = Portion("s", 1, 2)
    passes, _ = feed(book, [batch("a", 0, portion=old), batch("b", 0, portion=other)])
    assert book.waiting_on() == ["a", "b"]
    passes, _ = feed(book, [batch("a2", 0, portion=new)])
    assert book.waiting_on() == ["a2", "b"] and "a" in book.retired
    assert book.admit(batch("a", 1, portion=old)) is Verdict.DROP  # a late message of the dead one
    passes, _ = feed(book, [marker("a2", group="s", size=2, portion=new), marker("b", group="s", size=2, portion=other)])
    assert passes == [[]] and book.passes == 1


def test_a_restarted_worker_that_had_ended_does_not_count_twice():
    """The old sender's marker (and its held next-epoch batches) go with it; the restart's marker
    for the same epoch is the one that counts."""
    book = EpochBook(1)
    a, b = Portion("s", 0, 2), Portion("s", 1, 2)
    feed(book, [batch("a", portion=a), marker("a", group="s", size=2, portion=a), batch("a", 1, 1, portion=a),
                batch("b", portion=b)])
    assert len(book.held) == 1
    feed(book, [marker("a2", group="s", size=2, portion=a)])
    assert book.held == [] and book.passes == 0 and book.waiting_on() == ["b"]
    passes, _ = feed(book, [marker("b", group="s", size=2, portion=b)])
    assert passes == [[]]
    assert feed(book, [marker("b", 1, group="s", size=2, portion=b)])[0] == []  # a2's next one still missing


@pytest.mark.parametrize("size", [1, 3])
def test_each_pass_consumes_one_marker_per_sender(size):
    book = EpochBook(1)
    senders = [f"s{i}" for i in range(size)]
    messages = [marker(s, epoch=e, group="g", size=size) for e in range(2) for s in senders]
    passes, _ = feed(book, messages)
    assert len(passes) == 2 and book.markers == {}


def test_subscriber_that_joins_at_a_marker_ends_no_pass_with_it():
    book = EpochBook(1, joins_midstream=True)
    passes, rest = feed(book, [marker("a", epoch=4), batch("a", 7, epoch=5), batch("a", 8, epoch=5),
                               marker("a", epoch=5)])
    assert passes == [[("a", 7), ("a", 8)]] and rest == []  # epoch 4 was not seen: no empty pass
    assert book.lost_markers == 0 and book.passes == 1


def test_subscriber_joining_mid_epoch_ends_that_epoch_at_its_marker():
    book = EpochBook(1, joins_midstream=True)
    passes, _ = feed(book, [batch("a", 3, epoch=2), marker("a", epoch=2), marker("a", epoch=3)])
    assert passes == [[("a", 3)], []]  # a marker after the sender was heard ends a pass, even empty


def test_puller_first_marker_ends_an_empty_pass():
    book = EpochBook(1)  # a PULL peer is sent a marker for every epoch it was connected in
    passes, _ = feed(book, [marker("a", epoch=0), batch("a", 1, epoch=1), marker("a", epoch=1)])
    assert passes == [[], [("a", 1)]]
