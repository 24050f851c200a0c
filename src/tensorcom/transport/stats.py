"""Running statistics of a connection: message rate, byte throughput, samples, dropped batches and
lost end-of-epoch markers.

`Statistics` keeps totals since `reset()` plus a window of the last `horizon` messages (for the
`recent_*` figures). `SequenceTracker` counts batches lost on lossy PUB/SUB links from gaps in the
per-sender sequence numbers of protocol v2 (a sender's resends fill the gaps they leave).
"""

from __future__ import annotations

import collections
import time


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


class Statistics:
    """Rates and throughputs over all messages since `reset()` and over the last `horizon` ones.

    `add(nbytes, samples)` records one message. `rate()`/`throughput()` are messages/s and bytes/s
    since the first message; `recent_rate()`/`recent_throughput()` the same over the window `recent`
    (a deque of (time, nbytes, samples)). `dropped` is the number of batches known to be lost,
    `lost_markers` the end-of-epoch markers known to be lost (an epoch's batches arrived after its
    sender's marker should have), `implicit_ends` the passes that such a batch ended (a stand-in for
    the lost marker; tensorcom.transport.epochs).
    """

    def __init__(self, horizon: int = 1000):
        if not isinstance(horizon, int) or horizon < 2:
            raise ValueError(f"stats_horizon must be an int >= 2, got {horizon!r}")
        self.horizon = horizon
        self.reset()

    def reset(self) -> None:
        """Forget everything (the dropped and lost-marker counts included)."""
        self.start = time.monotonic()
        self.last = self.start
        self.count = 0
        self.total = 0
        self.samples = 0
        self.dropped = 0
        self.duplicates = 0  # batches received twice (resends of what had come) and skipped
        self.lost_markers = 0
        self.implicit_ends = 0
        self.recent: collections.deque = collections.deque(maxlen=self.horizon)

    def add(self, nbytes: int, samples: int = 1) -> None:
        """Record one message of `nbytes` bytes holding `samples` samples."""
        self.last = time.monotonic()
        if self.count == 0:
            self.start = self.last
        self.count += 1
        self.total += nbytes
        self.samples += samples
        self.recent.append((self.last, nbytes, samples))

    def _span(self) -> float:
        return self.last - self.start

    def rate(self) -> float:
        """Messages per second since the first message (0 before two messages)."""
        span = self._span()
        return (self.count - 1) / span if self.count > 1 and span > 0 else 0.0

    def throughput(self) -> float:
        """Bytes per second since the first message."""
        span = self._span()
        return self.total * (self.count - 1) / self.count / span if self.count > 1 and span > 0 else 0.0

    def _recent_sums(self) -> tuple[float, int, int, int]:
        """(time span, messages, bytes, samples) of the window, excluding its first message's payload."""
        if len(self.recent) < 2:
            return 0.0, 0, 0, 0
        items = list(self.recent)[1:]
        span = self.recent[-1][0] - self.recent[0][0]
        return span, len(items), sum(x[1] for x in items), sum(x[2] for x in items)

    def recent_rate(self) -> float:
        """Messages per second over the window."""
        span, n, _, _ = self._recent_sums()
        return n / span if span > 0 else 0.0

    def recent_throughput(self) -> float:
        """Bytes per second over the window."""
        span, _, nbytes, _ = self._recent_sums()
        return nbytes / span if span > 0 else 0.0

    def recent_sample_rate(self) -> float:
        """Samples per second over the window."""
        span, _, _, samples = self._recent_sums()
        return samples / span if span > 0 else 0.0

    def as_dict(self) -> dict:
        """A JSON-ready snapshot: counts, totals, recent rates, dropped."""
        return {
            "batches": self.count,
            "samples": self.samples,
            "bytes": self.total,
            "batches_per_s": round(self.recent_rate(), 3),
            "samples_per_s": round(self.recent_sample_rate(), 3),
            "MB_per_s": round(self.recent_throughput() / 1e6, 3),
            "dropped": self.dropped,
            "duplicates": self.duplicates,
            "lost_markers": self.lost_markers,
            "implicit_ends": self.implicit_ends,
        }

    def summary(self) -> str:
        """One line: recent rate, throughput, the dropped count (and lost markers, when some were)."""
        lost = f" lost markers {self.lost_markers}" if self.lost_markers else ""
        return (
            f"rate {self.recent_rate():.1f} msg/s throughput {self.recent_throughput():.2e} bytes/s "
            f"dropped {self.dropped}{lost}"
        )
