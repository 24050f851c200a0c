"""Running statistics of a connection: message rate, byte throughput, samples, dropped batches and
lost end-of-epoch markers, and a receiver's data wait.

`Statistics` keeps totals since `reset()` and rates over the window of tensorcom.rates (the one rate
definition: the last 10 s; docs/monitoring.md). `SequenceTracker` counts batches lost on lossy PUB/SUB links from gaps in the
per-sender sequence numbers of protocol v2 (a sender's resends fill the gaps they leave). A receiver's
`waits` (tensorcom.transport.data_wait.DataWait) measure its loop's time blocked on the next batch and
its step between batches: `data_wait_s`, `step_s`, `data_wait`, `recent_data_wait`.
"""

from __future__ import annotations

import operator
import time
from typing import Callable

from tensorcom.rates import Rates
from tensorcom.transport.data_wait import DataWait


class SequenceTracker:
    """Counts missing sequence numbers per sender.

    Feed it `(sender, seq)` of every batch (`batch`) and of every end-of-epoch marker (`marker`; a
    marker carries the sequence number the sender's next batch will have). A jump forward by k means
    k batches were lost; a number below the expected one fills such a gap late. (A restarted sender
    has a new id.)
    """

    def __init__(self):
        self.expected: dict[str, int] = {}
        self.dropped = 0

    def _advance(self, sender: str | None, seq: int, consumed: int) -> int:
        """Count the gap before `seq`; the next expected number is seq + consumed. Returns the gap. A
        number below the expected one is a late arrival (a resend filling a gap counted before): it
        takes one back from the count."""
        if sender is None:
            return 0
        expected = self.expected.get(sender)
        if expected is not None and seq < expected:
            self.dropped -= consumed and self.dropped > 0
            return 0
        gap = seq - expected if expected is not None else 0
        self.expected[sender] = seq + consumed
        self.dropped += gap
        return gap

    def batch(self, sender: str | None, seq: int) -> int:
        """Record a batch; returns how many batches before it were lost."""
        return self._advance(sender, seq, 1)

    def marker(self, sender: str | None, seq: int) -> int:
        """Record an end-of-epoch marker; returns how many batches before it were lost."""
        return self._advance(sender, seq, 0)


def _of_waits(name: str, doc: str) -> property:
    """A read-only attribute for `waits.<name>` (the receiving loop's DataWait)."""
    return property(operator.attrgetter(f"waits.{name}"), doc=doc)


class Statistics:
    """Totals since `reset()` and rates over the window of tensorcom.rates (the last 10 s).

    `add(nbytes, samples)` records one message. `recent_rate()`, `recent_sample_rate()`,
    `recent_throughput()` are messages/s, samples/s and bytes/s over the window (`rates`, a
    tensorcom.rates.Rates); `rate()`/`throughput()` the same since the first message. `dropped` is
    the number of batches known to be lost, `lost_markers` the end-of-epoch markers known to be lost
    (an epoch's batches arrived after its sender's marker should have), `implicit_ends` the passes that
    such a batch ended (a stand-in for the lost marker; tensorcom.transport.epochs). `horizon` (0.1's
    `stats_horizon`, a message count) is checked and kept for compatibility: the window is in seconds.
    A receiver's data wait, read on `waits` (fed by its intake, timed by `wait_clock`): `data_wait_s`
    and `step_s` (seconds in total), `data_wait` (the fraction blocked in total) and `recent_data_wait`
    (the fraction over the window); all zero for a sender.
    """

    data_wait_s = _of_waits("wait_s", "Seconds the receiving loop was blocked waiting for a batch, since reset().")
    step_s = _of_waits("step_s", "Seconds between handing a batch over and being asked for the next (the step).")
    data_wait = _of_waits("fraction", "data_wait_s / (data_wait_s + step_s): the share of the loop blocked on data.")
    recent_data_wait = _of_waits("recent_fraction", "The share of the loop blocked on data over the window.")

    def __init__(self, horizon: int = 1000, clock: Callable[[], float] = time.monotonic,
                 wait_clock: Callable[[], float] = time.perf_counter):
        if not isinstance(horizon, int) or horizon < 2:
            raise ValueError(f"stats_horizon must be an int >= 2, got {horizon!r}")
        self.horizon, self.clock = horizon, clock
        self.waits = DataWait(wait_clock)
        self.reset()

    def reset(self) -> None:
        """Forget everything (the dropped and lost-marker counts included)."""
        self.rates = Rates(clock=self.clock)
        self.waits.reset()  # in place: a zjoin consumer's joiner reports from it
        self.dropped = 0
        self.duplicates = 0  # batches received twice (resends of what had come) and skipped
        self.lost_markers = 0
        self.implicit_ends = 0

    def add(self, nbytes: int, samples: int = 1) -> None:
        """Record one message of `nbytes` bytes holding `samples` samples."""
        self.rates.add(1, samples, nbytes)

    @property
    def count(self) -> int:
        """Messages since reset()."""
        return self.rates.totals[0]

    @property
    def samples(self) -> int:
        return self.rates.totals[1]

    @property
    def total(self) -> int:
        """Bytes since reset()."""
        return self.rates.totals[2]

    def rate(self) -> float:
        """Messages per second since the first message."""
        return self.rates.rates(overall=True)["batches_per_s"]

    def throughput(self) -> float:
        """Bytes per second since the first message."""
        return self.rates.rates(overall=True)["MB_per_s"] * 1e6  # exact: rates() does not round

    def recent_rate(self) -> float:
        """Messages per second over the window."""
        return self.rates.rates()["batches_per_s"]

    def recent_throughput(self) -> float:
        """Bytes per second over the window."""
        return self.rates.rates()["MB_per_s"] * 1e6

    def recent_sample_rate(self) -> float:
        """Samples per second over the window."""
        return self.rates.rates()["samples_per_s"]

    def as_dict(self) -> dict:
        """A JSON-ready snapshot: totals, rates over the window (tensorcom.rates keys), dropped, and
        the data wait (data_wait_s, step_s, data_wait, recent_data_wait)."""
        return {
            **self.rates.as_dict(),
            **self.waits.as_dict(),
            "dropped": self.dropped,
            "duplicates": self.duplicates,
            "lost_markers": self.lost_markers,
            "implicit_ends": self.implicit_ends,
        }

    def summary(self) -> str:
        """One line: rates over the window, the dropped count (and lost markers, when some were)."""
        rates = self.rates.rates()
        lost = f" lost markers {self.lost_markers}" if self.lost_markers else ""
        return (f"rate {rates['batches_per_s']:.1f} msg/s {rates['samples_per_s']:.1f} samples/s "
                f"{rates['MB_per_s']:.2f} MB/s dropped {self.dropped}{lost}")
