"""tensorcom.transport.stats: rates over the window of tensorcom.rates and dropped-batch counting from sequence gaps."""

import pytest

from tensorcom.transport.stats import SequenceTracker, Statistics


def test_sequence_gaps_per_sender():
    tracker = SequenceTracker()
    assert [tracker.batch("a", s) for s in (0, 1, 4, 5)] == [0, 0, 2, 0]
    assert tracker.batch("b", 10) == 0  # first message of a sender: nothing known to be lost
    assert tracker.batch("b", 12) == 1
    assert tracker.dropped == 3


def test_marker_carries_next_sequence_number():
    tracker = SequenceTracker()
    tracker.batch("a", 0)
    assert tracker.marker("a", 3) == 2  # batches 1 and 2 never arrived
    assert tracker.batch("a", 3) == 0


def test_restart_and_protocol1_do_not_count():
    tracker = SequenceTracker()
    tracker.batch("a", 5)
    assert tracker.batch("a", 0) == 0  # sender restarted
    assert tracker.batch(None, 7) == 0 and tracker.batch(None, 9) == 0
    assert tracker.dropped == 0


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_statistics_rates_are_the_window_of_tensorcom_rates():
    clock = Clock()
    stats = Statistics(horizon=10, clock=clock)
    assert stats.rate() == 0 and stats.recent_rate() == 0 and stats.throughput() == 0
    for t in range(25):  # a 1000-byte message of 4 samples a second; more messages than the horizon
        clock.now = float(t)
        stats.add(1000, samples=4)
    assert stats.count == 25 and stats.total == 25_000 and stats.samples == 100
    assert stats.rate() == 25 / 24 and stats.throughput() == pytest.approx(25_000 / 24)  # since the first
    assert stats.recent_rate() == 1.0 and stats.recent_sample_rate() == 4.0 and stats.recent_throughput() == 1000.0
    snapshot = stats.as_dict()
    assert snapshot == {"batches": 25, "samples": 100, "bytes": 25_000, "batches_per_s": 1.0, "samples_per_s": 4.0,
                        "MB_per_s": 0.001, "data_wait_s": 0.0, "step_s": 0.0, "data_wait": 0.0,
                        "recent_data_wait": 0.0, "dropped": 0, "duplicates": 0, "lost_markers": 0,
                        "implicit_ends": 0}
    assert "1.0 msg/s 4.0 samples/s" in stats.summary()
    clock.now = 44.0  # nothing for 20 s: the window is empty
    assert stats.recent_sample_rate() == 0.0 and stats.count == 25
    stats.reset()
    assert stats.count == 0 and stats.as_dict()["batches"] == 0


def test_bad_horizon():
    with pytest.raises(ValueError, match=r"stats_horizon .* got 1"):
        Statistics(horizon=1)
