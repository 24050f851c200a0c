"""A server run in the server tools' terms: URLs, publisher processes, epochs and a batch count.

    plan = ServePlan(["zpush://127.0.0.1:7880"], workers=2, epochs=None, count=1000)
    plan.run(pipeline_or_factory)           tensorcom.serve with the count spread over the publishers
    ServePlan(urls, workers=4, serve=tensorcom.ray.serve, unit="Ray actor")   the same from Ray actors

`count` (0: no limit) is the number of batches to send in all: each of the stream's V portions
(options["portions"], else the resumed state's, else one per publisher) sends ceil(count / V), the
epochs running back to back with one end-of-epoch marker at the end. The run
itself, its processes and its reports are tensorcom.serve's (tensorcom.pipeline.serving).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.urls import DEFAULT_SERVER_URL

DEFAULT_URL = DEFAULT_SERVER_URL


@dataclass
class ServePlan:
    """What to serve to: `urls` (default DEFAULT_URL), `workers` publisher processes (None: one per
    binding URL, else 1; "auto": as many as keep the consumers fed, options["min_workers"] to
    options["max_workers"], tensorcom.serve's workers="auto"), `epochs` (None: forever), `count` batches in all (0: no limit), `report`
    seconds between rate lines on stderr (None: none), and `options`: further keyword arguments for
    tensorcom.serve (resume=..., connection_options=...). `serve`: what runs the plan, with
    tensorcom.serve's signature (None: tensorcom.serve; the cli passes tensorcom.ray.serve with its
    cluster options bound); `unit`: what its publishers are called in the announcement."""

    urls: list[str] = field(default_factory=lambda: [DEFAULT_URL])
    workers: int | str | None = None
    epochs: int | None = None
    count: int = 0
    report: float | None = 10.0
    options: dict = field(default_factory=dict)
    serve: Callable[..., dict] | None = None
    unit: str = "publisher"

    def publishers(self) -> int:
        """The number of publisher processes; ValueError (naming the URL) when the URLs cannot work
        with `workers` (a binding URL per publisher, connecting URLs for any number, sending schemes)."""
        from tensorcom.pipeline.serving import assign_urls
        from tensorcom.pipeline.shared_serving import is_sharing

        if self.workers == "auto":  # the processes it starts with (tensorcom.serve checks the URLs)
            return self.options.get("min_workers") or 1
        if is_sharing(self.urls or [DEFAULT_URL]):
            return self.workers or 1  # they push to the sharing server, which binds the URLs
        return len(assign_urls(self.urls or [DEFAULT_URL], self.workers)[0])

    def portions(self) -> int:
        """V, the stream's number of portions: options["portions"], else the resumed state's, else
        one per publisher (workers="auto": options["max_workers"], default os.cpu_count())."""
        from tensorcom.transport.resume import ResumePlan

        resumed = None if self.options.get("resume") is None else ResumePlan.from_state(self.options["resume"])
        if self.workers == "auto" and not self.options.get("portions") and not resumed:
            return self.options.get("max_workers") or os.cpu_count() or 1
        return self.options.get("portions") or (resumed.portions if resumed else self.publishers())

    def limited(self, target: Any) -> tuple[Any, int | None]:
        """(what to serve, epochs) for `target` (a Pipeline or a picklable factory): cut at each
        portion's share of `count` when there is one, else `target` and `epochs` unchanged."""
        if not self.count:
            return target, self.epochs
        portion = -(-self.count // self.portions())
        if isinstance(target, Pipeline):
            return target.repeat(self.epochs).take(portion), 1
        return Limited(target, self.epochs, portion), 1

    def run(self, target: Any, *, announce: str | None = None) -> dict:
        """Serve `target` (Pipeline, "module:function" or factory) as planned; `announce` names what is
        served in the one line printed on stderr first. Returns tensorcom.serve's totals."""
        from tensorcom.pipeline.serving import serve

        urls = self.urls or [DEFAULT_URL]
        served, epochs = self.limited(target)
        what = announce or describe(served)
        portions = self.portions()
        publishers = min(self.publishers(), portions)
        count = f"{publishers} to {portions} (auto)" if self.workers == "auto" else publishers
        print(f"serving {what} to {' '.join(urls)} from {count} {self.unit}(s), {portions} portion(s)",
              file=sys.stderr, flush=True)
        return (self.serve or serve)(served, urls, workers=self.workers, epochs=epochs, report=self.report or None,
                                     **self.options)


class Limited:
    """Picklable factory: the pipeline `target` makes (or is) repeated for `epochs` (None: forever),
    cut at `count` items."""

    def __init__(self, target: Any, epochs: int | None, count: int):
        self.target, self.epochs, self.count = target, epochs, count

    def __call__(self) -> Pipeline:
        from tensorcom.pipeline.serving import resolve

        return resolve(self.target).repeat(self.epochs).take(self.count)


def describe(target: Any) -> str:
    """A short description of what is served: the batch count per epoch when known."""
    length = target.length() if isinstance(target, Pipeline) else None
    return f"{length} batches per epoch" if length is not None else "batches"
