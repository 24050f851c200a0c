"""The consumer's session core (tensorcom.transport.sharing._session) and the books' reconnect rules
(tensorcom.transport.sharing), without sockets: reconnects, duplicates, gaps, silence, departures."""

from __future__ import annotations

from sharing_books import Stream, feed  # tests/transport/sharing_books.py

from tensorcom.transport.sharing import MAX_DEPARTED, ShareBook, SplitBook
from tensorcom.transport.sharing._session import CONTINUED, NEW, ServerSession


def joined(server: str = "s1") -> ServerSession:
    session = ServerSession()
    session.connected(0.0)
    assert session.welcome(server, False, 0) == NEW
    return session


def test_a_session_takes_deliveries_in_order_and_drops_duplicates_and_gaps():
    session = joined()
    assert [session.accept(n) for n in (1, 2, 2, 1, 4, 3)] == [True, True, False, False, False, True]
    assert session.last == 3
    assert session.accept(None)  # an older server's unnumbered end


def test_nothing_is_taken_before_a_welcome_nor_between_a_reconnect_and_its_answer():
    session = ServerSession()
    assert not session.accept(1)
    session = joined()
    assert session.accept(1)
    session.disconnected(1.0)
    assert session.accept(2)  # read from the queue of the old connection before the reconnect
    assert session.connected(2.0)  # a reconnect: join again
    assert session.join_fields() == {"server": "s1", "upto": 2}
    assert not session.accept(3)  # from the old connection: sent again if the session goes on
    assert session.welcome("s1", True, 2) == CONTINUED
    assert session.accept(3) and session.last == 3


def test_a_rejoin_after_a_pause_takes_nothing_until_its_answer_and_older_answers_wait():
    session = joined()
    assert session.joining() == 1 and session.answers(1) and session.answers(None)
    assert session.accept(1) and session.accept(2)
    session.rejoin()  # paused past the window: join again on the live connection
    assert session.joining() == 2 and not session.answers(1)
    assert not session.accept(3)  # queued before the pause: the server may have given it to another
    assert session.welcome("s1", True, 6) == CONTINUED  # revived: its numbers go on past the old ones
    assert not session.accept(3) and session.accept(7)


def test_a_continued_welcome_never_moves_back():
    session = joined()
    assert session.accept(1) and session.accept(2) and session.accept(3)
    session.connected(1.0)
    assert session.welcome("s1", True, 1) == CONTINUED  # answered a join sent before 2 and 3 were taken
    assert session.last == 3 and not session.accept(2) and session.accept(4)


def test_a_new_session_restarts_the_numbers():
    session = joined()
    assert session.accept(1) and session.accept(2)
    session.connected(1.0)
    assert session.welcome("s2", True, 2) == NEW  # another server (restarted): not this session
    assert session.last == 0 and session.accept(1)
    session.connected(2.0)
    assert session.welcome("s2", False, 0) == NEW  # the server gave the session up
    assert not session.accept(2) and session.accept(1)


def test_unreachable_only_after_the_whole_window_down_and_excused_for_another():
    session = joined()
    assert not session.unreachable(100.0, 2.0)  # up: never
    session.disconnected(10.0)
    session.disconnected(11.0)  # a second event does not move the clock
    assert not session.unreachable(11.9, 2.0) and session.unreachable(12.0, 2.0)
    assert not session.unreachable(1e9, None)
    session.excuse(12.0)
    assert not session.unreachable(13.9, 2.0) and session.unreachable(14.0, 2.0)
    session.connected(15.0)
    assert not session.unreachable(100.0, 2.0)
    assert not ServerSession().unreachable(100.0, 2.0)  # never connected: a server not started yet


def test_share_reconnect_sends_again_what_was_not_acknowledged_with_the_same_numbers():
    book, stream = ShareBook(replay=100), Stream()
    book.join("a", "a", 3)
    feed(book, stream, "bbbbe")
    first = book.sends()
    assert [s.number for s in first] == [1, 2, 3]
    book.disconnect("a", 0.0)
    book.ack("a", 1)
    assert book.sends() == []  # nothing to a consumer whose connection is down
    welcome = book.resume("a", 2)
    assert welcome.resumed and welcome.n == 2
    again = book.sends()
    assert [(s.number, s.item.index) for s in again] == [(3, 2), (4, 3), (5, 4)]  # 3 again, then on; the end too
    book.ack("a", 5)
    book.end_stream()
    assert book.done()


def test_share_a_consumer_down_past_the_window_departs_and_comes_back_while_the_buffer_holds():
    book, stream = ShareBook(replay=4), Stream()
    book.join("a", "a", 2)
    feed(book, stream, "bbb")
    book.sends()
    book.disconnect("a", 10.0)
    assert book.expire(11.0, 2.0) == [] and book.expire(12.0, 2.0) == ["a"]
    assert "a" not in book.consumers and book.lost_batches == 2  # sent, not acknowledged
    welcome = book.resume("a", 1)
    assert welcome is not None and welcome.n == 1 and book.lost_batches == 0
    assert [(s.number, s.item.index) for s in book.sends()] == [(2, 1), (3, 2)]


def test_share_a_departed_consumer_whose_batches_left_the_buffer_starts_anew():
    book, stream = ShareBook(replay=2), Stream()
    book.join("a", "a", 1)
    book.join("b", "b", 1)
    feed(book, stream, "b")
    book.ack("b", [s.number for s in book.sends() if s.peer == "b"][0])
    book.disconnect("a", 0.0)
    book.expire(5.0, 1.0)
    for _ in range(4):  # b goes on; the buffer drops what a lacked
        feed(book, stream, "b")
        for send in book.sends():
            book.ack("b", send.number)
    assert book.resume("a", 0) is None
    assert book.join("a", "a", 1).resumed is False


def test_split_a_departed_consumer_keeps_what_it_used_and_the_rest_goes_to_others_once():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 3)
    feed(book, stream, "bbb")
    assert [s.number for s in book.sends()] == [1, 2, 3]
    book.disconnect("a", 0.0)
    book.expire(10.0, 1.0)
    assert len(book.pending) == 3 and book.reassigned == 3
    welcome = book.resume("a", 2)  # it used 1 and 2 while away: they are taken back from the queue
    assert welcome.n == 3 and len(book.pending) == 1 and book.reassigned == 1
    again = book.sends()
    assert [(s.number, s.item.index) for s in again] == [(4, 2)]  # new numbers: its old copy of 3 is dropped


def test_split_the_end_waits_for_a_consumer_that_is_away_and_reaches_it_when_back():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 2)
    book.join("b", "b", 2)
    feed(book, stream, "be")
    for send in book.sends():
        book.ack(send.peer, send.number)
    book.disconnect("b", 0.0)
    ends = book.sends()
    assert [s.peer for s in ends] == ["a"] and ends[0].item.is_end
    book.resume("b", book.consumers["b"].acked)
    assert [s.item.is_end for s in book.sends()] == [True]


def test_departed_consumers_are_bounded():
    book = SplitBook()
    for i in range(MAX_DEPARTED + 5):
        book.join(i, str(i), 1)
        book.disconnect(i, 0.0)
    book.expire(1.0, 1.0)
    assert len(book.departed) == MAX_DEPARTED and 0 not in book.departed


def test_the_window_counts_from_the_last_sign_of_life_not_from_the_drop():
    session = joined()  # connected at 0.0
    session.heard(1.0)
    session.disconnected(9.0, silence=5.0)  # dropped by a heartbeat timeout: quiet since 4.0 at least
    assert session.down_since == 4.0
    assert not session.unreachable(13.9, 10.0) and session.unreachable(14.0, 10.0)
    session.connected(20.0)
    session.heard(30.0)
    session.disconnected(31.0, silence=5.0)  # a reset right after a message: alive until 30.0
    assert session.down_since == 30.0 and not session.unreachable(39.9, 10.0) and session.unreachable(40.0, 10.0)
    session.connected(50.0)
    session.disconnected(51.0)  # no silence given: from the drop itself
    assert session.down_since == 51.0


def test_split_is_done_only_when_every_end_is_acknowledged_and_a_lost_end_comes_again():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 2)
    feed(book, stream, "be")
    book.end_stream()
    book.ack("a", book.sends()[0].number)
    end = book.sends()
    assert [s.item.is_end for s in end] == [True]
    assert not book.done()  # the end may be lost in a reset: no bye before it is acknowledged
    book.disconnect("a", 0.0)
    book.resume("a", 1)  # reconnected without it
    again = book.sends()
    assert [(s.number, s.item.is_end) for s in again] == [(end[0].number, True)]
    book.ack("a", again[0].number)
    assert book.done()


def test_share_is_done_only_when_every_end_is_acknowledged():
    book, stream = ShareBook(replay=100), Stream()
    book.join("a", "a", 2)
    feed(book, stream, "be")
    book.end_stream()
    sends = book.sends()
    book.ack("a", sends[0].number)
    assert not book.done()
    book.ack("a", sends[1].number)
    assert book.done()


def test_split_a_departed_consumers_batches_are_held_and_what_it_used_stays_its_own():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 3)
    book.join("b", "b", 3)
    feed(book, stream, "bbbbbbe")
    book.end_stream()
    sends = book.sends()
    mine = [s for s in sends if s.peer == "a"]
    for send in sends:
        if send.peer == "b":
            book.ack("b", send.number)
    book.disconnect("a", 0.0)  # partitioned after handing out its first two (their acks were lost)
    assert book.expire(10.0, 1.0, hold=5.0) == ["a"]
    assert book.reassigned == 0 and book.sends() == []  # held for a: b gets none of them, the end waits
    assert not book.done() and book.undelivered() == {"a": 3}
    assert book.expire(14.9, 1.0, hold=5.0) == [] and book.sends() == []
    welcome = book.resume("a", mine[1].number)  # back in time: 1 and 2 were used, 3 was not
    assert welcome.resumed and welcome.n == 3
    again = book.sends()
    assert [s.item for s in again if not s.item.is_end] == [mine[2].item]  # to whoever has room, once
    assert book.reassigned == 1
    for send in again:
        book.ack(send.peer, send.number)
    ends = book.sends()
    assert sorted(s.peer for s in ends if s.item.is_end) == ["a", "b"]
    for send in ends:
        book.ack(send.peer, send.number)
    assert book.done()


def test_split_held_batches_go_to_others_when_the_hold_passes():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 2)
    book.join("b", "b", 2)
    feed(book, stream, "bbbb")
    mine = [s.item for s in book.sends() if s.peer == "a"]
    book.ack("b", 2)
    book.disconnect("a", 0.0)
    book.expire(10.0, 1.0, hold=5.0)
    assert book.sends() == []
    book.expire(15.0, 1.0, hold=5.0)  # the hold passed: the batches go to b, once
    assert book.reassigned == 2 and [s.item for s in book.sends()] == mine
    book.resume("a", 0)  # back too late: nothing of b's is taken back, its numbers go on
    assert book.reassigned == 2 and book.sends() == []


def test_split_a_consumer_that_closed_while_talking_is_not_held():
    book, stream = SplitBook(replay=100), Stream()
    book.join("a", "a", 2)
    book.join("b", "b", 2)
    feed(book, stream, "bbbb")
    mine = [s.item for s in book.sends() if s.peer == "a"]
    book.ack("b", 2)
    book.disconnect("a", 0.0, quiet=False)  # killed while acknowledging: no partition ate its acks
    book.expire(10.0, 1.0, hold=5.0)
    assert book.reassigned == 2 and [s.item for s in book.sends()] == mine
