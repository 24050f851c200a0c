"""tensorcom.rates: the one rate definition (a sliding window with an injectable clock), the one
"is a report due" throttle, and the same samples_per_s through every path that prints one."""

import math

import pytest

from tensorcom.rates import WINDOW, RateReport, Rates, Throttle


class Clock:
    """A fake clock: reads `now`, moved by hand."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_nothing_before_the_first_event():
    clock = Clock()
    rates = Rates(clock=clock)
    rates.update(0, 0)  # zero totals are not an event
    clock.now += 5
    assert rates.first is None and rates.totals == (0, 0, 0)
    assert rates.as_dict() == {"batches": 0, "samples": 0, "bytes": 0, "batches_per_s": 0.0, "samples_per_s": 0.0,
                               "MB_per_s": 0.0}


def test_young_window_starts_at_the_first_event():
    clock = Clock()
    rates = Rates(clock=clock)
    rates.add(1, 8, 2_000_000)
    assert rates.rates()["samples_per_s"] == 0.0  # no time has passed yet
    clock.now += 2
    rates.add(1, 8, 2_000_000)
    assert rates.as_dict() == {"batches": 2, "samples": 16, "bytes": 4_000_000, "batches_per_s": 1.0,
                               "samples_per_s": 8.0, "MB_per_s": 2.0}


def test_full_window_counts_only_its_last_seconds_and_decays():
    clock = Clock(0.0)
    rates = Rates(window=10.0, clock=clock)
    for t in range(30):  # 1 batch of 4 samples a second for 30 s, then 100 samples a second
        clock.now = float(t)
        rates.add(1, 4 if t < 20 else 100)
    assert rates.rates() == {"batches_per_s": 1.0, "samples_per_s": 100.0, "MB_per_s": 0.0}
    clock.now = 34.0  # events in (24, 34]: 25..29
    assert rates.rates()["samples_per_s"] == 50.0
    clock.now = 100.0
    assert rates.rates()["batches_per_s"] == 0.0
    assert rates.totals == (30, 80 + 1000, 0) and rates.rates(overall=True)["batches_per_s"] == 0.3


def test_snapshots_stay_bounded_at_any_event_rate():
    clock = Clock(0.0)
    rates = Rates(window=1.0, clock=clock)
    for i in range(100_000):
        clock.now = i * 1e-4  # 10,000 events a second for 10 s
        rates.add(1, 2)
    assert len(rates.snapshots) <= 2 * 50 + 3
    assert rates.rates()["batches_per_s"] == pytest.approx(10_000, rel=0.03)


def test_window_and_totals_must_be_sane():
    with pytest.raises(ValueError, match="window"):
        Rates(window=0)
    with pytest.raises(ValueError, match="every"):
        Throttle(-1)


def test_throttle_counts_from_start_and_from_each_report():
    clock = Clock(0.0)
    throttle = Throttle(10.0, clock)
    clock.now = 50.0
    assert not throttle.due() and not throttle.due(force=True)  # not started
    throttle.start()
    clock.now = 59.0
    assert not throttle.due()
    clock.now = 60.0
    assert throttle.due() and not throttle.due()
    clock.now = 61.0
    assert throttle.due(force=True)
    clock.now = 70.0
    assert not throttle.due() and Throttle(5.0, clock, start=-math.inf).due()
    assert not Throttle(None, clock, start=0.0).due(force=True) and Throttle(0, clock, start=clock.now).due()


def test_rate_report_is_due_from_the_first_batch():
    clock = Clock(0.0)
    reports = []
    report = RateReport(every=2.0, on_report=reports.append, clock=clock)
    clock.now = 5.0
    report.maybe_report(lambda: report.stats((0, 0)), str, force=True)
    assert reports == []  # no batch yet: nothing to report, even forced
    report.add((1, 3))
    clock.now = 6.5
    report.add((4, 12))
    report.maybe_report(lambda: report.stats((4, 12)), str)
    assert reports == []
    clock.now = 7.0
    report.maybe_report(lambda: report.stats((5, 15)), str)
    assert reports == [{"batches": 5, "samples": 15, "seconds": 7.0, "batches_per_s": 2.5, "samples_per_s": 7.5}]
    never = RateReport(every=0, on_report=reports.append, clock=clock)
    never.add((1, 1))
    clock.now = 100.0
    never.maybe_report(lambda: never.stats((1, 1)), str, force=True)
    assert len(reports) == 1  # report=0: no reports at all


def test_rate_report_prints_a_line_and_the_consumers(capsys):
    class Hub:
        class server:
            status = [{"name": "job", "epoch": 0, "pos": 3, "lag": 1, "samples_per_s": 2.5, "credit": 4, "free": 1}]

    clock = Clock(0.0)
    report = RateReport(every=1.0, on_report=None, hub=Hub, clock=clock)
    report.add((1, 1))
    clock.now = 1.0
    report.maybe_report(lambda: report.stats((2, 2)), lambda s: f"serve: {s['samples_per_s']} samples/s")
    assert capsys.readouterr().err.splitlines() == [
        "serve: 2.0 samples/s", "  consumer job: epoch 0 batch 3, lag 1, 2.5 samples/s, credit in use 3/4"]


def test_default_window_is_documented():
    assert WINDOW == 10.0


def test_one_samples_per_s_through_every_path_that_prints_one():
    """Issue 17: the same events give the same samples_per_s in a serve's RateReport, Connection stats,
    tensormon's report line and a sharing server's consumer record (before, they were over the last
    `every` seconds, the last 1,000 messages, tensormon's report interval and the time since joining)."""
    import json

    from tensorcom.cli.tensormon import report_line
    from tensorcom.transport.connection import Connection
    from tensorcom.transport.sharing._records import Consumer, Item
    from tensorcom.transport.stats import Statistics

    clock = Clock(0.0)
    report = RateReport(every=1.0, on_report=None, clock=clock)
    consumer = Consumer(b"peer", "job", credit=1, rates=Rates(clock=clock))
    conn = Connection()
    conn.stats = Statistics(clock=clock)
    events = [(0.5 * i + (i % 3) * 0.1, 8 + i % 5, 1000 * (i % 7 + 1)) for i in range(60)]  # (time, samples, bytes)
    seen, batches, samples = [], 0, 0
    try:
        for index, (when, size, nbytes) in enumerate(events):
            clock.now = when
            batches, samples = batches + 1, samples + size
            report.add((batches, samples))
            conn.stats.add(nbytes, size)
            consumer.deliver(Item(index, 0, index, frames=b"batch", samples=size, nbytes=nbytes))
            consumer.ack(consumer.sent)
            clock.now = when + 0.25
            figures = [report.stats((batches, samples))["samples_per_s"], conn.stats.as_dict()["samples_per_s"],
                       json.loads(report_line(conn, True))["samples_per_s"], consumer.report()["samples_per_s"]]
            assert len(set(figures)) == 1, (when, figures)
            seen.append(figures[0])
    finally:
        conn.close()
    assert seen[-1] == round(sum(size for when, size, _ in events if when > clock.now - WINDOW) / WINDOW, 3)
    assert len(set(seen)) > 10  # the figures moved: the check compared something
