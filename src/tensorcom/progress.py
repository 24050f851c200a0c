"""Progress of long work on stderr.

    with Progress("wl-map", unit="samples") as shown:   # tqdm bar on a terminal, else a line every N s
        for sample in samples:
            shown.update(1, shards=writer.next_shard)

Progress shows a tqdm bar when stderr is a terminal and tqdm (the `progress` extra) is installed;
otherwise it prints one plain line (`wl-map: 1200 samples, 3 shards, 95.1 samples/s`) every
`interval` seconds ($TENSORCOM_PROGRESS_INTERVAL, default 10), its rate over the window of
tensorcom.rates (the last 10 s, as every rate the package prints) and its timing a
tensorcom.rates.Throttle. `enabled=False` (`--quiet`) shows nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO

from tensorcom import settings
from tensorcom.rates import Rates, Throttle


class Progress:
    """Counts of `label`'s work in `unit`, shown on `stream` (stderr): a tqdm bar on a terminal, plain
    lines every `interval` seconds otherwise, nothing when not `enabled`. `update(n, **extra)` adds n
    and shows the extra counts (shards=3) beside them; `close()` (or leaving the `with`) ends the bar.
    The counts go into a tensorcom.rates.Rates as samples, whatever the unit, for the rate of the line."""

    def __init__(self, label: str, unit: str = "samples", *, enabled: bool = True, interval: float | None = None,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.label, self.unit, self.enabled = label, unit, enabled
        self.stream = sys.stderr if stream is None else stream
        self.interval = settings.progress_interval() if interval is None else interval
        self.count = 0
        self.extra: dict[str, Any] = {}
        self.rates = Rates(clock=clock)
        self.throttle = Throttle(self.interval, clock, start=clock())
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
        self.rates.add(0, n)
        self.extra.update(extra)
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            if extra:
                self.bar.set_postfix(self.extra, refresh=False)
            return
        if self.throttle.due():
            print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        """`label: 1200 samples, 3 shards, 95.1 samples/s` (the rate over the window of tensorcom.rates)."""
        parts = [f"{self.count} {self.unit}", *(f"{v} {k}" for k, v in self.extra.items()),
                 f"{self.rates.rates()['samples_per_s']:.1f} {self.unit}/s"]
        return f"{self.label}: " + ", ".join(parts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
