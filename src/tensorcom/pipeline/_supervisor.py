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
Workers that scale themselves (serve's workers="auto"): `Scaling.tick` runs in wait() and asks the
processes (portion_sending.Gate) to stop at the next epoch boundary; the caller then launches a new
set, whose counts add to the earlier sets' (counts and records are kept per (set, process)).
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
import time
from typing import Any, Callable

from tensorcom.pipeline import stage_times
from tensorcom.pipeline.autoscale import EpochScaling, consumer_waits, data_wait
from tensorcom.pipeline.processes import Entry, Processes
from tensorcom.rates import RateReport

GRACE = 2.0  # seconds a stopped worker has to leave before it is terminated


class Supervisor:
    """The parent's side (module docstring): starts the workers, reads their messages, reports, and
    stops them. `hub`: a sharing server (tensorcom.transport.sharing.Hub) whose consumers join the reports."""

    def __init__(self, report: float | None, on_report: Callable[[dict], None] | None, hub: Any = None):
        self.owner: Processes | None = None
        self.barrier: Any = None
        self.workers = self.generation = 0  # processes now; how many times a new set was launched
        self.counts: dict[tuple[int, int], tuple[int, int]] = {}  # (generation, process) -> its counts
        self.records: dict[tuple[int, int], stage_times.Record] = {}  # each process's latest stage record
        self.members: dict[tuple[int, int], dict[str, int]] = {}  # each process's latest mixture member counts
        self.reports = RateReport(report, on_report, hub)  # a sharing server's consumers join the reports

    def launch(self, work: Callable[[Any, Any, int], Any], count: int, action: Any = None) -> None:
        """Start `count` processes, process i running work(stop, barrier, i) (a picklable callable
        whose values are its counts), with the owner's stop event and a barrier for all of them
        (`action`: the barrier's, e.g. a portion_sending.Gate). Launching again, once the processes
        are done, starts a new set (workers="auto"): the counts of the earlier ones stay in the totals."""
        if self.owner is not None:
            self.owner.close()
            self.generation += 1
        self.owner, self.workers = Processes("serving worker", count, grace=GRACE, daemon=False), count
        self.barrier = self.owner.ctx.Barrier(count, action=action)
        self.owner.start(Entry(functools.partial(work, self.owner.stop, self.barrier), first=None),
                         shared=[self.barrier], name="tensorcom-serve")

    def totals(self) -> tuple[int, int]:
        return sum(b for b, _ in self.counts.values()), sum(s for _, s in self.counts.values())

    def handle(self, message: tuple) -> None:
        kind, index, value = message
        if kind == "error":
            raise value.error("serving worker")
        if kind == "item":
            key = (self.generation, index)
            self.counts[key] = tuple(value[:2])
            if len(value) > 2:
                self.records[key] = value[2]
            if len(value) > 3:
                self.members[key] = value[3]
            self.reports.add(self.totals())

    def wait(self, tick: Callable[[], None] | None = None) -> None:
        """Handle messages until every worker is done; WorkerError on the first failure, WorkerDied
        when a worker ended without a word. `tick()` is called between messages (at least every 0.2 s)."""
        if self.owner is None:
            raise RuntimeError("Supervisor.wait() before launch()")
        while not self.owner.roster.finished:
            message = self.owner.get(timeout=0.2)
            if message is not None:
                self.handle(message)
            self.maybe_report()
            if tick is not None:
                tick()

    def stats(self, overall: bool = False) -> dict:
        """Totals, and rates over the window of tensorcom.rates (the last 10 s, counted from the first
        batch; since the first batch when `overall`)."""
        return {**self.reports.stats(self.totals(), overall), "workers": self.workers, **self.where_time_goes()}

    def where_time_goes(self) -> dict:
        """{"stages", "idle_s", "busy_s", "verdict"} from the processes' stage records, with "members"
        (samples per mixture member, summed) when they draw from a Mix; without records (timing off),
        {"verdict"} from the consumers' data wait when a sharing server knows it, else {}.
        Reads copies, so another thread may call it (the metrics endpoint)."""
        records, counts = list(self.records.values()), list(self.counts.values())  # C-level copies
        members = list(self.members.values())
        if not records:
            waits = [w for w in self.consumer_waits() if w is not None]
            return {"verdict": stage_times.verdict(waits, 0.0, 0.0)} if waits else {}
        record = stage_times.merge(records)
        idle, busy = _idle_busy(record)
        where = {"stages": stage_times.summary(record, sum(s for _, s in counts)), "idle_s": idle, "busy_s": busy,
                 "verdict": stage_times.verdict(self.consumer_waits(), idle, busy)}
        if members:
            where["members"] = {name: sum(m.get(name, 0) for m in members) for name in members[0]}
        return where

    def consumer_waits(self) -> list[float | None]:
        """Each consumer's data wait (a share of its time) as a sharing server knows it; [] without one."""
        return consumer_waits(self.reports.hub)

    def idle_busy(self) -> tuple[float, float]:
        """The processes' seconds waiting on the consumers (in send) and busy, summed, so far."""
        records = list(self.records.values())
        return _idle_busy(stage_times.merge(records)) if records else (0.0, 0.0)

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


class Scaling(EpochScaling):
    """workers="auto", the parent's side: `tick(supervisor, gate)` (Supervisor.wait calls it) feeds
    the scaler one observation every `every` seconds (the first after `every`): the consumers' data
    wait (autoscale.data_wait: the largest a sharing server knows; without one, the processes' busy
    share: what they do not spend waiting on the consumers), the processes' idle share since the
    previous observation, `target` (the processes now) and the machine's idle cores
    (`machine.sample()`, read at every tick). When it answers a step, `target` moves by it (within
    `workers`..`ceiling`) and the gate is asked to stop the processes at the next epoch boundary
    (autoscale.EpochScaling.decide); the caller then starts `target` processes. Nothing more is
    observed until then."""

    def __init__(self, scaler: Any, workers: int, ceiling: int, machine: Any, every: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(scaler, workers, ceiling, every=every, clock=clock, at_once=False)
        self.machine = machine
        self.last = (0.0, 0.0)  # idle and busy seconds at the previous observation

    def tick(self, supervisor: Supervisor, gate: Any) -> None:
        if not self.throttle.due():
            return
        cores = self.machine.sample()  # read every time, so that each reading covers the last second
        idle, busy = supervisor.idle_busy()
        (idle_s, busy_s), self.last = (idle - self.last[0], busy - self.last[1]), (idle, busy)
        if gate.asked or idle_s + busy_s <= 0:
            return  # a change is pending, no stage record yet, or nothing measured since the last time
        idle_share = idle_s / (idle_s + busy_s)
        self.decide(data_wait(supervisor.reports.hub, 1.0 - idle_share), idle_share, self.target, cores, gate.ask)


def _idle_busy(record: stage_times.Record) -> tuple[float, float]:
    """(seconds in send: waiting on the consumers, seconds in every other stage) of a stage record."""
    return record.get("send", [0.0])[0], sum(seconds for name, (seconds, _) in record.items() if name != "send")


def _rate_line(stats: dict) -> str:
    line = (f"serve: {stats['batches_per_s']:.1f} batches/s, {stats['samples_per_s']:.1f} samples/s "
            f"(total {stats['batches']} batches, {stats['samples']} samples, {stats['workers']} workers)")
    if "verdict" not in stats:
        return line
    top = stage_times.top_stage(stats.get("stages", {}))
    members = ", ".join(f"{name} {count}" for name, count in stats.get("members", {}).items())
    return f"{line}; {stats['verdict']}" + (f"; {top}" if top else "") + (f"; mix: {members}" if members else "")
