"""The one definition of every rate the package prints, and of when a report is due.

    rates = Rates()                          # window=WINDOW seconds, clock=time.monotonic
    rates.add(batches=1, samples=8, nbytes=4096)     # one event: a batch received, sent, acknowledged...
    rates.update(batches, samples, nbytes)           # or: an owner's running totals, whenever they change
    rates.as_dict()   # {"batches", "samples", "bytes", "batches_per_s", "samples_per_s", "MB_per_s"}
    due = Throttle(every=10.0)               # due.start() arms it; due.due() is True every `every` s

The rate of a count is what it grew by over the last WINDOW (10) seconds, divided by the seconds of
that window; while the first event is less than WINDOW seconds old, the window starts at the first
event (that event included), so a rate never counts time from before anything happened. Rates go
down when events stop. Totals count from the first event. `overall=True` gives the rates since the
first event instead. The same keys everywhere: `batches_per_s`, `samples_per_s`, `MB_per_s` (10^6
bytes per second), rounded to 3 decimals in as_dict() (what every report prints). docs/monitoring.md says where each of them is printed.

RateReport (the rate lines of a running serve: tensorcom.serve's parent, tensorcom.ray's driver) is
a Rates and a Throttle plus the line printing. Pure: standard library only, every clock injectable.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Callable

WINDOW = 10.0  # seconds of the sliding window behind every `*_per_s`
_RESOLUTION = 50  # snapshots per window at most (about): a rate's window edge is exact to WINDOW / 50
_Totals = tuple[int, int, int]  # (batches, samples, bytes)


class Rates:
    """Totals since the first event and rates over the last `window` seconds (module docstring).

    Keeps snapshots (time, totals) at least window/50 apart (the newest always current), so memory
    stays bounded at any event rate; `clock` is read at each add/update and each rates() call."""

    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic):
        if not isinstance(window, (int, float)) or not window > 0:
            raise ValueError(f"window must be positive seconds, got {window!r}")
        self.window, self.clock = float(window), clock
        self.resolution = self.window / _RESOLUTION
        self.snapshots: deque[tuple[float, _Totals]] = deque()
        self.first: float | None = None  # when the first event happened

    @property
    def totals(self) -> _Totals:
        """(batches, samples, bytes) since the first event."""
        return self.snapshots[-1][1] if self.snapshots else (0, 0, 0)

    def add(self, batches: int = 1, samples: int = 0, nbytes: int = 0) -> None:
        """Record one event now: `batches`, `samples` and `nbytes` more."""
        b, s, n = self.totals
        self.update(b + batches, s + samples, n + nbytes)

    def update(self, batches: int, samples: int, nbytes: int = 0) -> None:
        """Record running totals now (an owner that counts by itself); nothing before they leave zero."""
        now, totals = self.clock(), (batches, samples, nbytes)
        if self.first is None:
            if not any(totals):
                return
            self.first = now
            self.snapshots.append((now, (0, 0, 0)))  # just before the first event
        if len(self.snapshots) >= 3 and now - self.snapshots[-2][0] < self.resolution:
            self.snapshots[-1] = (now, totals)
        else:
            self.snapshots.append((now, totals))
        self._forget(now)

    def _forget(self, now: float) -> None:
        """Drop the snapshots before the newest one at or before the window's start."""
        while len(self.snapshots) > 2 and self.snapshots[1][0] <= now - self.window:
            self.snapshots.popleft()

    def rates(self, overall: bool = False) -> dict[str, float]:
        """{"batches_per_s", "samples_per_s", "MB_per_s"} over the window (or since the first event
        when `overall`); zeros before the first event and at its very moment."""
        if self.first is None:
            return _per_second((0, 0, 0), 0.0)
        now = self.clock()
        self._forget(now)
        start = self.first if overall else max(self.first, now - self.window)
        base = (0, 0, 0) if start <= self.first else self._at(start)
        return _per_second(tuple(b - a for a, b in zip(base, self.totals)), now - start)

    def _at(self, when: float) -> _Totals:
        """The totals at time `when` (the newest snapshot at or before it)."""
        return [totals for t, totals in self.snapshots if t <= when][-1]

    def as_dict(self, overall: bool = False) -> dict[str, float]:
        """{"batches", "samples", "bytes"} since the first event, plus rates() rounded to 3 decimals:
        the figures every report prints."""
        batches, samples, nbytes = self.totals
        rates = {key: round(value, 3) for key, value in self.rates(overall).items()}
        return {"batches": batches, "samples": samples, "bytes": nbytes, **rates}


def _per_second(counts: tuple[int, ...], seconds: float) -> dict[str, float]:
    if seconds <= 0:
        return {"batches_per_s": 0.0, "samples_per_s": 0.0, "MB_per_s": 0.0}
    batches, samples, nbytes = counts
    return {"batches_per_s": batches / seconds, "samples_per_s": samples / seconds, "MB_per_s": nbytes / seconds / 1e6}


class Throttle:
    """Whether a report is due: `due()` is True once `every` seconds have passed since start() (or
    since the last time it was True), and with `force`. `every` None: never; 0: at every call. Until
    start() is called (or with `start=` given to the constructor) nothing is due; start=-math.inf
    makes the first call due at once."""

    def __init__(self, every: float | None, clock: Callable[[], float] = time.monotonic,
                 start: float | None = None):
        if every is not None and (not isinstance(every, (int, float)) or every < 0):
            raise ValueError(f"every must be seconds >= 0 or None, got {every!r}")
        self.every, self.clock, self.last = every, clock, start

    def start(self) -> None:
        """Count from now (once: later calls change nothing)."""
        if self.last is None:
            self.last = self.clock()

    @property
    def started(self) -> bool:
        return self.last is not None

    def due(self, force: bool = False) -> bool:
        """True (and count again from now) when a report is due."""
        if self.every is None or self.last is None:
            return False
        now = self.clock()
        if not force and now - self.last < self.every:
            return False
        self.last = now
        return True


def consumer_lines(reports: list[dict]) -> list[str]:
    """One line per consumer of a sharing server's status (tensorcom.transport.sharing): position,
    lag (or "catching up N": a restarted job still lacks N batches of what it missed), rate, credit,
    and the job's data wait (the recent share of its loop's time blocked on data) when reported."""
    return [f"  consumer {r['name']}: " + ", ".join(consumer_cells(r)) for r in reports]


def consumer_cells(r: dict) -> list[str]:
    """The figures of one consumer line (consumer_lines), also the cells of tensormon's table:
    position (and lag), rate, credit in use, data wait (when the record has one)."""
    lag = "" if r.get("lag") is None else f", lag {r['lag']}"
    if r.get("catching_up"):
        lag = f", catching up {r['catching_up']}"
    cells = [f"epoch {r['epoch']} batch {r['pos']}{lag}", f"{r['samples_per_s']:.1f} samples/s",
             f"credit in use {r['credit'] - r['free']}/{r['credit']}"]
    if r.get("data_wait") is not None:
        cells.append(f"data wait {100 * r['data_wait']:.0f}%")
    return cells


class RateReport:
    """The rate reports of a running serve, for tensorcom.serve's parent and tensorcom.ray's driver.

        report = RateReport(every=10.0, on_report=None, hub=None)
        report.add((batches, samples))       # the owner's running totals, whenever they change
        report.stats((batches, samples))     # totals, "seconds" since `start`, rates (no bytes)
        report.maybe_report(stats, line)     # a rate line on stderr, or on_report(stats), when due

    A report is due every `every` seconds from the first batch (None or 0: never; a Throttle). With a sharing
    server (`hub`, tensorcom.transport.sharing.Hub: its `server.status`) its consumers' status joins
    the stats as "consumers" and adds one line per consumer, and the server sends the stats to its
    observers with their status (tensormon --stages). `start` (the clock's time) is when the
    owner's workers started: the owner may set it again."""

    def __init__(self, every: float | None, on_report: Callable[[dict], None] | None, hub: Any = None,
                 clock: Callable[[], float] = time.monotonic):
        self.on_report, self.hub, self.clock = on_report, hub, clock
        self.rates = Rates(clock=clock)
        self.throttle = Throttle(every or None, clock)
        self.start = clock()

    def add(self, totals: tuple[int, int]) -> None:
        self.rates.update(*totals)
        if self.rates.first is not None:
            self.throttle.start()

    def stats(self, totals: tuple[int, int], overall: bool = False) -> dict:
        """{"batches", "samples", "seconds", "batches_per_s", "samples_per_s"} of `totals`
        (recorded first): rates over the window, or since the first batch when `overall`."""
        self.add(totals)
        figures = {k: v for k, v in self.rates.as_dict(overall).items() if k not in ("bytes", "MB_per_s")}
        return {**figures, "seconds": self.clock() - self.start}

    def maybe_report(self, stats: Callable[[], dict], line: Callable[[dict], str], force: bool = False) -> None:
        """When a report is due (or `force`, once a batch has been sent): on_report(stats()) or, without
        it, line(stats()) and the consumer lines on stderr."""
        if not self.throttle.due(force):
            return
        current = stats()
        if self.hub is not None:
            self.hub.server.report = dict(current)  # what the server's observers get (tensormon --stages)
            current["consumers"] = self.hub.server.status
        if self.on_report is not None:
            self.on_report(current)
        else:
            print("\n".join([line(current), *consumer_lines(current.get("consumers", []))]), file=sys.stderr,
                  flush=True)

