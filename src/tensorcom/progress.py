"""Progress of long work on stderr, and rates over a sliding window.

    with Progress("wl-map", unit="samples") as shown:   # tqdm bar on a terminal, else a line every N s
        for sample in samples:
            shown.update(1, shards=writer.next_shard)

Progress shows a tqdm bar when stderr is a terminal and tqdm (the `progress` extra) is installed;
otherwise it prints one plain line (`wl-map: 1200 samples, 3 shards, 95.1 samples/s`) every
`interval` seconds ($TENSORCOM_PROGRESS_INTERVAL, default 10). `enabled=False` (`--quiet`) shows
nothing. RateWindow turns running totals into rates over the last `window` seconds, measured from
the first count (never a rate from before anything happened).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, TextIO

from tensorcom import settings


class RateWindow:
    """Rates of running totals over the last `window` seconds. `add(totals)` records the totals now;
    `rates()` gives per-second rates since the newest record at least `window` seconds old, or since
    the first non-zero record (counted from zero at that moment) while there is none that old."""

    def __init__(self, window: float):
        if window <= 0:
            raise ValueError(f"window must be positive seconds, got {window!r}")
        self.window = window
        self.records: deque[tuple[float, tuple[float, ...]]] = deque()
        self.first: float | None = None  # when the first non-zero totals were recorded

    def add(self, totals: tuple[float, ...], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.first is None:
            if not any(totals):
                return
            self.first = now
            self.records.append((now, tuple(0 for _ in totals)))
        self.records.append((now, tuple(totals)))
        while len(self.records) > 2 and self.records[1][0] <= now - self.window:
            self.records.popleft()

    def rates(self, now: float | None = None) -> tuple[float, ...]:
        """Per-second rates of each total; zeros before the first count."""
        if not self.records:
            return ()
        now = time.monotonic() if now is None else now
        (since, base), (_, latest) = self.records[0], self.records[-1]
        span = max(now - since, 1e-3)
        return tuple((b - a) / span for a, b in zip(base, latest))


class Progress:
    """Counts of `label`'s work in `unit`, shown on `stream` (stderr): a tqdm bar on a terminal, plain
    lines every `interval` seconds otherwise, nothing when not `enabled`. `update(n, **extra)` adds n
    and shows the extra counts (shards=3) beside them; `close()` (or leaving the `with`) ends the bar."""

    def __init__(self, label: str, unit: str = "samples", *, enabled: bool = True, interval: float | None = None,
                 stream: TextIO | None = None):
        self.label, self.unit, self.enabled = label, unit, enabled
        self.stream = sys.stderr if stream is None else stream
        self.interval = settings.progress_interval() if interval is None else interval
        self.count = 0
        self.extra: dict[str, Any] = {}
        self.start = self.last = time.monotonic()
        self.bar = self._bar() if enabled else None

    def _bar(self) -> Any:
        isatty = getattr(self.stream, "isatty", None)
        if not (isatty and isatty()):
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        return tqdm(desc=self.label, unit=f" {self.unit}", file=self.stream, leave=False, dynamic_ncols=True)

    def update(self, n: int = 1, **extra: Any) -> None:
        self.count += n
        self.extra.update(extra)
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            if extra:
                self.bar.set_postfix(self.extra, refresh=False)
            return
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            print(self.line(now), file=self.stream, flush=True)

    def line(self, now: float | None = None) -> str:
        """`label: 1200 samples, 3 shards, 95.1 samples/s`."""
        seconds = max((time.monotonic() if now is None else now) - self.start, 1e-9)
        parts = [f"{self.count} {self.unit}", *(f"{v} {k}" for k, v in self.extra.items()),
                 f"{self.count / seconds:.1f} {self.unit}/s"]
        return f"{self.label}: " + ", ".join(parts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
