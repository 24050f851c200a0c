"""The parent's side of `tensorcom.serve` (tensorcom.pipeline.serving): start the serving worker
processes, read their messages, report rates, stop them.

    supervisor = Supervisor(report=10.0, on_report=None, hub=None)
    supervisor.launch(serve_worker, lambda i: (..., supervisor.messages, supervisor.stop,
                                               supervisor.barrier, ...), workers)
    supervisor.wait()                    # until every worker is done; WorkerError / WorkerDied
    supervisor.maybe_report(force=True)
    stats = supervisor.stats(overall=True)
    supervisor.close()                   # always: stops what is left

Messages from the workers (one multiprocessing queue): ("item", i, (batches, samples)), ("end", i,
reports) and ("error", i, Failure). Reports (tensorcom.rates.RateReport): a rate line on stderr
every `report` seconds from the first batch (rates over the window of tensorcom.rates), with one line per consumer
of a sharing server, or `on_report(stats)` instead.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from typing import Any, Callable

from tensorcom.pipeline._failure import died
from tensorcom.pipeline._loop import join_or_kill
from tensorcom.pipeline._semaphores import Handover
from tensorcom.rates import RateReport


class Supervisor:
    """The parent's side (module docstring): starts the workers, reads their messages, reports, and
    stops them. `hub`: a sharing server (tensorcom.transport.sharing.Hub) whose consumers join the reports."""

    def __init__(self, report: float | None, on_report: Callable[[dict], None] | None, hub: Any = None):
        self.ctx = multiprocessing.get_context("spawn")
        self.messages = self.ctx.Queue()
        self.stop = self.ctx.Event()
        self.barrier: Any = None
        self.procs: list = []
        self.counts: dict[int, tuple[int, int]] = {}
        self.done: set[int] = set()
        self.reports = RateReport(report, on_report, hub)  # a sharing server's consumers join the reports

    def launch(self, target: Callable[..., None], args_for: Callable[[int], tuple], count: int) -> None:
        """Start `count` processes running target(*args_for(i)), with a barrier for all of them; returns
        once each has opened the shared primitives, whose names then leave /dev/shm (_semaphores)."""
        self.barrier = self.ctx.Barrier(count)
        handover = Handover(self.ctx, [self.messages, self.stop, self.barrier])
        try:
            for i in range(count):
                proc = handover.process(target, args_for(i), name=f"tensorcom-serve-{i}")
                proc.start()
                self.procs.append(proc)
        finally:
            handover.release()  # the names of the queue's, event's and barrier's semaphores leave /dev/shm

    def totals(self) -> tuple[int, int]:
        return sum(b for b, _ in self.counts.values()), sum(s for _, s in self.counts.values())

    def handle(self, message: tuple) -> None:
        kind, index, value = message
        if kind == "error":
            raise value.error("serving worker")
        if kind == "item":
            self.counts[index] = value
            self.reports.add(self.totals())
        else:
            self.done.add(index)

    def wait(self) -> None:
        """Handle messages until every worker is done; raise on the first failure."""
        next_check = 0.0
        while len(self.done) < len(self.procs):
            try:
                self.handle(self.messages.get(timeout=0.2))
            except queue.Empty:
                pass
            if time.monotonic() >= next_check:  # even while messages keep coming
                self.check_alive()
                next_check = time.monotonic() + 0.5
            self.maybe_report()

    def check_alive(self) -> None:
        for index, proc in enumerate(self.procs):
            if proc.exitcode is None or index in self.done:
                continue
            deadline = time.monotonic() + 1.0  # its last messages may still be in the pipe
            while time.monotonic() < deadline and index not in self.done:
                try:
                    self.handle(self.messages.get(timeout=0.1))
                except queue.Empty:
                    pass
            if index not in self.done:
                raise died("serving worker", index, proc)

    def stats(self, overall: bool = False) -> dict:
        """Totals, and rates over the window of tensorcom.rates (the last 10 s, counted from the first
        batch; since the first batch when `overall`)."""
        return {**self.reports.stats(self.totals(), overall), "workers": len(self.procs)}

    def maybe_report(self, force: bool = False) -> None:
        """Report every `report` seconds from the first batch (and at the end when `force`); nothing
        before a batch has been sent."""
        self.reports.maybe_report(self.stats, _rate_line, force)

    def close(self) -> None:
        """Stop every worker: ask, wait up to 2 s, terminate, then kill."""
        self.stop.set()
        if self.barrier is not None:
            self.barrier.abort()
        join_or_kill(self.procs, grace=2.0)
        self.messages.cancel_join_thread()
        self.messages.close()


def _rate_line(stats: dict) -> str:
    return (f"serve: {stats['batches_per_s']:.1f} batches/s, {stats['samples_per_s']:.1f} samples/s "
            f"(total {stats['batches']} batches, {stats['samples']} samples, {stats['workers']} workers)")
