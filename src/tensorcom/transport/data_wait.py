"""A job's *data wait*: the share of its loop's time spent blocked waiting for the next batch.

    waits = DataWait(clock=time.perf_counter)
    waits.waiting()      # the loop asks for the next batch (recv, __next__): its step ended
    waits.got()          # the batch is there (or the wait ended otherwise): the wait ended
    waits.wait_s, waits.step_s       # total seconds blocked / between batches (the user's step)
    waits.fraction                   # wait / (wait + step) since the first event: the data wait
    waits.recent_fraction            # the same over the window of tensorcom.rates (the last 10 s)

    reported = ReportedWait()        # a sharing server's view of one consumer's reported totals
    reported.update(wait_s, step_s)  # its totals, as its acknowledgements carry them
    reported.as_dict()               # {"data_wait": recent fraction, "data_wait_s": total}

The time from `waiting()` to `got()` is wait; from `got()` to the next `waiting()` is step (the
user's work on the batch it was handed). An interval still open when a figure is read counts up to
that moment, so a job stuck waiting shows it at once. Two clock reads per batch; the window (a
tensorcom.rates.Rates) records the totals at most once per its resolution (window / 50) and when read. Pure:
standard library only, the clock injectable. Connection.stats (tensorcom.transport.stats) holds one;
the receiving ends' intake (tensorcom.transport.ends.intake) feeds it; docs/monitoring.md.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from tensorcom.rates import WINDOW, Rates

_SCALE = 1e9  # the window's Rates keeps integer nanoseconds (its totals are counts)


class DataWait:
    """Wait and step times of one receiving loop (module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, window: float = WINDOW):
        self.clock, self.window_s = clock, window
        self.reset()

    def reset(self) -> None:
        """Forget everything (in place: whoever holds this object reads the new totals)."""
        self.wait_total = self.step_total = 0.0  # closed intervals only
        self.asked: float | None = None  # when the open wait began (None: no wait is open)
        self.last: float | None = None  # when the last wait ended (the open step began)
        self.now = -math.inf  # when the window last recorded the totals: the window's clock
        self.window = Rates(window=self.window_s, clock=lambda: self.now)

    def waiting(self) -> None:
        """The loop asks for the next batch: the step since the last got() (if any) ends."""
        self.asked = self.clock()

    def got(self) -> None:
        """The wait begun by waiting() ended (a batch, an end of pass, an error); a step begins."""
        now, asked = self.clock(), self.asked
        if asked is None:  # no wait was open
            return
        self.wait_total += now - asked
        if self.last is not None:
            self.step_total += asked - self.last
        self.asked, self.last = None, now
        if now - self.now >= self.window.resolution:  # the window's snapshots are that far apart anyway
            self._snapshot(now)

    def _snapshot(self, now: float) -> None:
        """Record the closed totals in the window at `now`."""
        self.now = now
        self.window.update(int(self.wait_total * _SCALE), int(self.step_total * _SCALE))

    def _open(self) -> tuple[float, float, float]:
        """(now, wait, step) of the open interval, read now."""
        now = self.clock()
        if self.asked is not None:
            step = 0.0 if self.last is None else self.asked - self.last  # closed, counted at got()
            return now, now - self.asked, step
        return (now, 0.0, 0.0) if self.last is None else (now, 0.0, now - self.last)

    def totals(self) -> tuple[float, float]:
        """(wait, step) seconds since the first event, the open interval included."""
        _, wait, step = self._open()
        return self.wait_total + wait, self.step_total + step

    @property
    def wait_s(self) -> float:
        return self.totals()[0]

    @property
    def step_s(self) -> float:
        return self.totals()[1]

    @property
    def fraction(self) -> float:
        """wait / (wait + step) since the first event; 0.0 before any time passed."""
        return _fraction(*self.totals())

    @property
    def recent_fraction(self) -> float:
        """wait / (wait + step) over the last `window` seconds, the open interval included."""
        now, wait, step = self._open()
        closed_wait, closed_step = self._window_totals(now)
        return _fraction(closed_wait + wait, closed_step + step)

    def _window_totals(self, now: float) -> tuple[float, float]:
        """(wait, step) of the closed intervals that ended within the window before `now`."""
        self._snapshot(max(self.now, now))
        rates, first = self.window.rates(), self.window.first
        if first is None:
            return 0.0, 0.0
        seconds = self.now - max(first, self.now - self.window.window)
        if seconds <= 0:  # read at the moment of the first event: the window holds everything
            return self.wait_total, self.step_total
        return (rates["batches_per_s"] * seconds / _SCALE, rates["samples_per_s"] * seconds / _SCALE)

    def as_dict(self) -> dict[str, float]:
        """{"data_wait_s", "step_s", "data_wait", "recent_data_wait"}: totals in seconds, fractions."""
        wait, step = self.totals()
        return {"data_wait_s": wait, "step_s": step, "data_wait": _fraction(wait, step),
                "recent_data_wait": self.recent_fraction}


class ReportedWait:
    """The last data-wait totals a consumer reported (a sharing server's book keeps one per consumer):
    `update(wait_s, step_s)` with each report; `as_dict()` gives {"data_wait": the fraction over the
    window of tensorcom.rates (of the totals' growth; while they did not grow, of the totals),
    "data_wait_s": the total}, rounded to 3 decimals as every report is."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.wait_s = self.step_s = 0.0
        self.window = Rates(clock=clock)

    def update(self, wait_s: float, step_s: float) -> None:
        """The consumer's totals now; totals that went down (it reset its statistics) start over."""
        if wait_s < self.wait_s or step_s < self.step_s:
            self.window = Rates(window=self.window.window, clock=self.window.clock)
        self.wait_s, self.step_s = wait_s, step_s
        self.window.update(int(wait_s * _SCALE), int(step_s * _SCALE))

    def as_dict(self) -> dict[str, float]:
        rates = self.window.rates()  # the wait's and the step's growth over the same seconds
        recent = _fraction(rates["batches_per_s"], rates["samples_per_s"])
        if not rates["batches_per_s"] and not rates["samples_per_s"]:
            recent = _fraction(self.wait_s, self.step_s)
        return {"data_wait": round(recent, 3), "data_wait_s": round(self.wait_s, 3)}


def _fraction(wait: float, step: float) -> float:
    return wait / (wait + step) if wait + step > 0 else 0.0
