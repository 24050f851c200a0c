"""The parent's side of `tensorcom.serve` (tensorcom.pipeline.serving): start the serving worker
processes, read their messages, report rates, stop them.

    supervisor = Supervisor(report=10.0, on_report=None, hub=None)
    supervisor.launch(work, workers)     # process i runs work(stop, barrier, i): its counts
    supervisor.wait()                    # until every worker is done; WorkerError / WorkerDied
    supervisor.maybe_report(force=True)
    stats = supervisor.stats(overall=True)
    supervisor.close()                   # always: stops what is left

The processes are the process owner's (tensorcom.pipeline.processes): each runs the one worker loop
on its one task, work(stop, barrier, i), and answers on its pipe: ("item", i, (batches, samples)) or
("item", i, (batches, samples, stage record[, member counts])) (tensorcom.pipeline.stage_times: its
seconds per stage; a mixture's samples per member), then ("end", i, count) or ("error", i, Failure).
Reports (tensorcom.rates.RateReport): a rate line on stderr every `report` seconds from the first batch
(rates over the window of tensorcom.rates), with one line per consumer of a sharing server, or
`on_report(stats)` instead. With stage records the stats also say where the
time went: "stages" {name: {"seconds", "share", "per_sample_ms"}} summed over the processes, "idle_s"
(the processes' seconds in send: waiting on the consumers), "busy_s" (every other stage) and a
"verdict" (stage_times.verdict, from the consumers' data wait when a sharing server knows it), and
for a mixture "members" {name: samples}; the rate line ends with the verdict, the top stage and the
member counts; with a sharing server the report goes to its observers too (tensorcom.rates.RateReport,
tensormon --stages).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from tensorcom.pipeline import stage_times
from tensorcom.pipeline.processes import Entry, Processes
from tensorcom.rates import RateReport

GRACE = 2.0  # seconds a stopped worker has to leave before it is terminated


class Supervisor:
    """The parent's side (module docstring): starts the workers, reads their messages, reports, and
    stops them. `hub`: a sharing server (tensorcom.transport.sharing.Hub) whose consumers join the reports."""

    def __init__(self, report: float | None, on_report: Callable[[dict], None] | None, hub: Any = None):
        self.owner: Processes | None = None
        self.barrier: Any = None
        self.workers = 0
        self.counts: dict[int, tuple[int, int]] = {}
        self.records: dict[int, stage_times.Record] = {}  # each process's latest stage record
        self.members: dict[int, dict[str, int]] = {}  # each process's latest mixture member counts
        self.reports = RateReport(report, on_report, hub)  # a sharing server's consumers join the reports

    def launch(self, work: Callable[[Any, Any, int], Any], count: int) -> None:
        """Start `count` processes, process i running work(stop, barrier, i) (a picklable callable
        whose values are its counts), with the owner's stop event and a barrier for all of them."""
        self.owner, self.workers = Processes("serving worker", count, grace=GRACE, daemon=False), count
        self.barrier = self.owner.ctx.Barrier(count)
        self.owner.start(Entry(functools.partial(work, self.owner.stop, self.barrier), first=None),
                         shared=[self.barrier], name="tensorcom-serve")

    def totals(self) -> tuple[int, int]:
        return sum(b for b, _ in self.counts.values()), sum(s for _, s in self.counts.values())

    def handle(self, message: tuple) -> None:
        kind, index, value = message
        if kind == "error":
            raise value.error("serving worker")
        if kind == "item":
            self.counts[index] = tuple(value[:2])
            if len(value) > 2:
                self.records[index] = value[2]
            if len(value) > 3:
                self.members[index] = value[3]
            self.reports.add(self.totals())

    def wait(self) -> None:
        """Handle messages until every worker is done; WorkerError on the first failure, WorkerDied
        when a worker ended without a word."""
        if self.owner is None:
            raise RuntimeError("Supervisor.wait() before launch()")
        while not self.owner.roster.finished:
            message = self.owner.get(timeout=0.2)
            if message is not None:
                self.handle(message)
            self.maybe_report()

    def stats(self, overall: bool = False) -> dict:
        """Totals, and rates over the window of tensorcom.rates (the last 10 s, counted from the first
        batch; since the first batch when `overall`)."""
        return {**self.reports.stats(self.totals(), overall), "workers": self.workers, **self.where_time_goes()}

    def where_time_goes(self) -> dict:
        """{"stages", "idle_s", "busy_s", "verdict"} from the processes' stage records ({} without),
        with "members" (samples per mixture member, summed) when they draw from a Mix.
        Reads copies, so another thread may call it (the metrics endpoint)."""
        records, counts = list(self.records.values()), list(self.counts.values())  # C-level copies
        members = list(self.members.values())
        if not records:
            return {}
        record = stage_times.merge(records)
        idle = record.get("send", [0.0])[0]
        busy = sum(seconds for name, (seconds, _) in record.items() if name != "send")
        consumers = [] if self.reports.hub is None else self.reports.hub.server.status
        waits = [_wait_share(c.get("data_wait")) for c in consumers]
        where = {"stages": stage_times.summary(record, sum(s for _, s in counts)), "idle_s": idle, "busy_s": busy,
                 "verdict": stage_times.verdict(waits, idle, busy)}
        if members:
            where["members"] = {name: sum(m.get(name, 0) for m in members) for name in members[0]}
        return where

    def maybe_report(self, force: bool = False) -> None:
        """Report every `report` seconds from the first batch (and at the end when `force`); nothing
        before a batch has been sent."""
        self.reports.maybe_report(self.stats, _rate_line, force)

    def close(self) -> None:
        """Stop every worker: ask (and abort the barrier), wait up to GRACE s, terminate, then kill."""
        if self.owner is None:
            return
        self.owner.stop.set()
        self.barrier.abort()
        self.owner.close()


def _wait_share(value: Any) -> float | None:
    """A consumer's data wait as a share of its time: a number, or a stats dict's "share"/"fraction"."""
    if isinstance(value, dict):
        value = value.get("share", value.get("fraction"))
    return value if isinstance(value, (int, float)) else None


def _rate_line(stats: dict) -> str:
    line = (f"serve: {stats['batches_per_s']:.1f} batches/s, {stats['samples_per_s']:.1f} samples/s "
            f"(total {stats['batches']} batches, {stats['samples']} samples, {stats['workers']} workers)")
    if "verdict" not in stats:
        return line
    top = stage_times.top_stage(stats["stages"])
    members = ", ".join(f"{name} {count}" for name, count in stats.get("members", {}).items())
    return f"{line}; {stats['verdict']}" + (f"; {top}" if top else "") + (f"; mix: {members}" if members else "")
