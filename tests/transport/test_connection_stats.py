"""tensorcom.transport.stats: rates over a window and dropped-batch counting from sequence gaps."""

import time

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


def test_statistics_rates():
    stats = Statistics(horizon=10)
    assert stats.rate() == 0 and stats.recent_rate() == 0 and stats.throughput() == 0
    for _ in range(5):
        stats.add(1000, samples=4)
        time.sleep(0.01)
    assert stats.count == 5 and stats.total == 5000 and stats.samples == 20
    assert 20 < stats.rate() < 110
    assert 20_000 < stats.recent_throughput() < 110_000
    assert stats.recent_sample_rate() == pytest.approx(4 * stats.recent_rate())
    snapshot = stats.as_dict()
    assert snapshot["batches"] == 5 and snapshot["dropped"] == 0
    assert "msg/s" in stats.summary()
    stats.reset()
    assert stats.count == 0 and len(stats.recent) == 0


def test_window_is_bounded():
    stats = Statistics(horizon=3)
    for _ in range(10):
        stats.add(1)
    assert len(stats.recent) == 3


def test_bad_horizon():
    with pytest.raises(ValueError, match=r"stats_horizon .* got 1"):
        Statistics(horizon=1)
