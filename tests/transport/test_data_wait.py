"""tensorcom.transport.data_wait: a loop's wait and step times, exact under a fake clock."""

import pytest

from tensorcom.transport.data_wait import DataWait
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
