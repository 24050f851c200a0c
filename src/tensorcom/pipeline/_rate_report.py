"""The rate reports of a running serve, one implementation for tensorcom.serve's parent
(tensorcom.pipeline._supervisor) and tensorcom.ray's driver (tensorcom.adapters.ray._driver).

    report = RateReport(every=10.0, on_report=None, hub=None)
    report.add((batches, samples))       # the owner's running totals, whenever they change
    report.stats((batches, samples))     # totals, rates over the last `every` seconds (at least 1 s)
    report.maybe_report(stats, line)     # a rate line on stderr, or on_report(stats), when due

Rates are over a sliding window (tensorcom.progress.RateWindow) counted from the first batch, or over
the whole run (`overall`). A report is due every `every` seconds from the first batch (None or 0:
never); with a sharing server (`hub`, tensorcom.transport.sharing.Hub) its consumers' status joins the
stats and adds one line per consumer.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from tensorcom.pipeline.shared_serving import consumer_lines
from tensorcom.progress import RateWindow


class RateReport:
    """Rates of one serve's (batches, samples) totals and the reports made of them (module docstring)."""

    def __init__(self, every: float | None, on_report: Callable[[dict], None] | None, hub: object = None):
        self.every, self.on_report, self.hub = every, on_report, hub
        self.start = time.monotonic()  # the owner resets it when its workers have started
        self.last: float | None = None  # when the last report was made; None until the first batch
        self.window = RateWindow(max(every or 0.0, 1.0))

    def add(self, totals: tuple[int, int]) -> None:
        self.window.add(totals)

    def stats(self, totals: tuple[int, int], overall: bool = False) -> dict:
        """{"batches", "samples", "seconds", "batches_per_s", "samples_per_s"} of `totals`: rates over
        the window, or over the whole run when `overall`."""
        now = time.monotonic()
        batches, samples = totals
        if overall:
            span = max(now - self.start, 1e-9)
            rates = (batches / span, samples / span)
        else:
            rates = self.window.rates(now) or (0.0, 0.0)
        return {"batches": batches, "samples": samples, "seconds": now - self.start, "batches_per_s": rates[0],
                "samples_per_s": rates[1]}

    def maybe_report(self, stats: Callable[[], dict], line: Callable[[dict], str], force: bool = False) -> None:
        """When a report is due (or `force`, once a batch has been sent): on_report(stats()) or, without
        it, line(stats()) and the consumer lines on stderr."""
        if not self.every or self.window.first is None:
            return
        self.last = self.last or self.window.first
        if not force and time.monotonic() - self.last < self.every:
            return
        current = stats()
        if self.hub is not None:
            current["consumers"] = self.hub.server.status
        if self.on_report is not None:
            self.on_report(current)
        else:
            print("\n".join([line(current), *consumer_lines(current.get("consumers", []))]), file=sys.stderr,
                  flush=True)
        self.last = time.monotonic()
