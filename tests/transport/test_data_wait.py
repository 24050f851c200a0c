"""tensorcom.transport.data_wait: a loop's wait and step times, exact under a fake clock."""

import pytest

from tensorcom.transport.data_wait import DataWait, ReportedWait
from tensorcom.transport.sharing import control
from tensorcom.transport.sharing.books import Item, ShareBook
from tensorcom.transport.stats import Statistics


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def loop(waits: DataWait, clock: Clock, rounds: list[tuple[float, float]]) -> None:
    """Per round: wait `w` seconds for a batch, then work `s` seconds on it."""
    for w, s in rounds:
        waits.waiting()
        clock.now += w
        waits.got()
        clock.now += s


def test_wait_and_step_totals_and_fraction():
    clock = Clock()
    waits = DataWait(clock)
    assert (waits.wait_s, waits.step_s, waits.fraction, waits.recent_fraction) == (0.0, 0.0, 0.0, 0.0)
    loop(waits, clock, [(1.0, 3.0), (1.0, 3.0)])
    waits.waiting()  # the second step is closed; nothing waited yet
    assert (waits.wait_s, waits.step_s) == (2.0, 6.0)
    assert waits.fraction == 0.25
    clock.now += 2.0  # an open wait counts up to the moment it is read
    assert (waits.wait_s, waits.fraction) == (4.0, 0.4)


def test_recent_fraction_forgets_what_left_the_window():
    clock = Clock()
    waits = DataWait(clock, window=10.0)
    loop(waits, clock, [(0.0, 1.0)] * 30)  # 30 s of steps, never blocked
    loop(waits, clock, [(1.0, 0.0)] * 5)  # then 5 s blocked
    assert waits.fraction == pytest.approx(5 / 35)
    assert waits.recent_fraction == pytest.approx(0.5, abs=0.05)  # the last 10 s: 5 s of each
    assert waits.as_dict() == {"data_wait_s": 5.0, "step_s": 30.0, "data_wait": waits.fraction,
                               "recent_data_wait": waits.recent_fraction}


def test_an_interrupted_wait_counts_and_ends():
    clock = Clock()
    waits = DataWait(clock)
    waits.waiting()
    clock.now += 2.0
    waits.got()  # a timeout: the intake calls got() on the way out
    clock.now += 1.0
    assert (waits.wait_s, waits.step_s) == (2.0, 1.0)


def test_statistics_expose_the_data_wait_and_reset_forgets_it():
    clock = Clock()
    stats = Statistics(wait_clock=clock)
    loop(stats.waits, clock, [(3.0, 1.0)])
    assert (stats.data_wait_s, stats.step_s, stats.data_wait) == (3.0, 1.0, 0.75)
    assert stats.recent_data_wait == 0.75
    assert stats.as_dict()["data_wait"] == 0.75
    stats.reset()
    assert (stats.data_wait_s, stats.step_s, stats.data_wait) == (0.0, 0.0, 0.0)


def test_a_reported_wait_gives_the_recent_fraction_of_the_totals_growth():
    clock = Clock()
    reported = ReportedWait(clock)
    assert reported.as_dict() == {"data_wait": 0.0, "data_wait_s": 0.0}
    reported.update(10.0, 30.0)  # a consumer that reported first after 40 s of work
    clock.now = 20.0
    reported.update(12.0, 32.0)  # since then: 2 s waiting, 2 s stepping
    assert reported.as_dict() == {"data_wait": 0.5, "data_wait_s": 12.0}
    clock.now = 100.0  # no report for long: the window is empty, the totals speak
    assert reported.as_dict() == {"data_wait": round(12 / 44, 3), "data_wait_s": 12.0}
    reported.update(1.0, 3.0)  # the consumer reset its statistics: its figures start over
    assert reported.as_dict() == {"data_wait": 0.25, "data_wait_s": 1.0}


def test_an_ack_with_or_without_data_wait_fields():
    old = control.decode(control.encode("ack", upto=3))  # an older consumer's ack
    assert old["upto"] == 3 and control.data_wait(old) is None
    new = control.decode(control.encode("ack", upto=4, wait=1.5, step=0.5))
    assert control.data_wait(new) == (1.5, 0.5)
    for bad in ({"wait": "x", "step": 1.0}, {"wait": True, "step": 1.0}, {"wait": -1.0, "step": 1.0}, {"wait": 1.0}):
        assert control.data_wait(bad) is None


def test_the_book_keeps_each_consumers_last_reported_data_wait():
    book = ShareBook(replay=4)
    book.join("a", "job-a", credit=2)
    book.join("b", "job-b", credit=2)
    for pos in range(2):
        book.add(Item(index=pos, epoch=0, pos=pos, frames=[b"x"], samples=1))
    book.sends()
    book.ack("a", 1, (3.0, 1.0))
    book.ack("b", 1)  # an older consumer: no data wait, acknowledged all the same
    book.ack("a", 2)  # a later ack without the fields keeps the last values
    reports = {r["name"]: r for r in book.reports()}
    assert (reports["job-a"]["acked"], reports["job-a"]["data_wait"], reports["job-a"]["data_wait_s"]) == (2, 0.75, 3.0)
    assert (reports["job-b"]["acked"], reports["job-b"]["data_wait"], reports["job-b"]["data_wait_s"]) == (1, 0.0, 0.0)
