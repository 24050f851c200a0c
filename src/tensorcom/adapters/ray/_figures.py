"""What tensorcom.ray's driver knows of its serve, and where it tells it: the rate lines on stderr (or
on_report), the totals that serve() returns, and with metrics="HOST:PORT" the metrics endpoint
(/metrics, /status.json and the status page: tensorcom.pipeline.observe, as tensorcom.serve's).

The driver knows the hub's counts (what its input took), its consumers (their rates and data wait, in
the hub's status), the number of actors and restarts, and the seconds each finished actor run spent
waiting on the hub (idle: blocked sending, or until the hub confirmed everything) and the rest (busy).
It does not know the actors' stages: they do not time them.

    figures = Figures(report, on_report, hub, actors=lambda: len(members))
    figures.ran(batches, samples, idle, busy)     # an actor's finished run
    figures.maybe_report(force=False)             # a rate line when due
    figures.stats(overall=True)                   # the totals serve() returns
    figures.open_metrics("127.0.0.1:0")           # the endpoint (None: none); figures.close_metrics()

Threads: the driver thread updates the figures; the endpoint's thread reads them (observe.serve_record
reads copies: `counts`, `workers`, `where_time_goes()`, `reports`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tensorcom.rates import RateReport


class Figures:
    """The figures of one Ray serve (module docstring). `hub`: the driver's sharing server (None: the
    actors push to the trainers, and the totals are those of the finished runs); `actors()`: the
    number of actors now."""

    def __init__(self, report: float | None, on_report: Callable[[dict], None] | None, hub: Any,
                 actors: Callable[[], int]):
        self.hub, self.actors = hub, actors
        self.reports = RateReport(report, on_report, hub)
        self.restarts = 0
        self.sent = (0, 0)  # batches and samples of the finished runs
        self.seconds = (0.0, 0.0)  # idle and busy seconds of the finished runs
        self.endpoint: Any = None

    def started(self) -> None:
        """The actors are ready: rates and uptime count from now."""
        self.reports.start = time.monotonic()

    def ran(self, batches: int, samples: int, idle: float, busy: float) -> None:
        self.sent = (self.sent[0] + batches, self.sent[1] + samples)
        self.seconds = (self.seconds[0] + idle, self.seconds[1] + busy)

    def totals(self) -> tuple[int, int]:
        """(batches, samples): taken by the hub, else sent by finished runs."""
        if self.hub is None:
            return self.sent
        return self.hub.server.input_batches, self.hub.server.input_samples

    @property
    def counts(self) -> dict:
        return {0: self.totals()}

    @property
    def workers(self) -> int:
        return self.actors()

    def where_time_goes(self) -> dict:
        """The finished runs' seconds waiting on the hub (idle_s) and the rest (busy_s)."""
        return {"idle_s": self.seconds[0], "busy_s": self.seconds[1]}

    def stats(self, overall: bool = False) -> dict:
        """Totals and rates over the window of tensorcom.rates (since the first batch when `overall`)."""
        return {**self.reports.stats(self.totals(), overall), "workers": self.actors(), "restarts": self.restarts}

    def maybe_report(self, force: bool = False) -> None:
        """A rate line (or on_report) every `report` seconds from the first batch, and when `force`."""
        self.reports.add(self.totals())
        self.reports.maybe_report(self.stats, _rate_line, force)

    def open_metrics(self, address: str | None) -> None:
        """Serve the metrics endpoint on `address` (None: none) until close_metrics()."""
        from tensorcom.pipeline.observe import serve_metrics

        self.endpoint = serve_metrics(address, self, self.hub)

    def close_metrics(self) -> None:
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            endpoint.close()


def _rate_line(stats: dict) -> str:
    return (f"serve (ray): {stats['batches_per_s']:.1f} batches/s, {stats['samples_per_s']:.1f} samples/s "
            f"(total {stats['batches']} batches, {stats['samples']} samples, {stats['workers']} actors, "
            f"{stats['restarts']} restarts)")
