"""The driver of tensorcom.ray: Serving, the thread in the calling process that orders the epochs,
watches its actors, and hands a dead actor's portion over to its restarted incarnation.

Epoch by epoch the driver calls `run` on every actor (tensorcom.adapters.ray._actors.ServerActor),
then waits until the hub's input has ended the epoch, so no actor runs ahead and when epoch e+1
starts everything of epoch e is in the hub (with a hub, each run ends once the hub confirmed what
the actor sent, and the actor's next run is a new sender: ServerActor). An actor that died (a failed
call, or between calls a new incarnation from `hello`) is waited for while Ray restarts it; then
for each portion v the actor serves, `hub.server.handover(stream, v, V, retire=[its last sender])`
drops whatever still arrives from the dead incarnation and says which batches of portion v the hub
took in each unfinished epoch, and the new incarnation serves those epochs again, passing over
exactly those and the ones the consumers had before the serve (`after_handover`). Without a hub
(connecting URLs) or with a feed that is not resumable (Ray Data), a dead actor ends the serve with
WorkerDied. With workers="auto" (plan.scaling) the driver observes once a second while it waits (each
finished run reports the actor's seconds waiting on the hub: its idle share) and, before an epoch,
creates or kills actors to the decided number, each run naming its portions. The
books of an epoch's runs (which actor has finished, which runs again after a restart) are a Roster,
the pure core of the process owner (tensorcom.pipeline.processes).

Who shuts down: Serving.close() closes the metrics endpoint (_figures), stops the driver thread, kills every actor and the Directory, aborts
the hub unless it finished, and shuts Ray down when start() started it.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tensorcom.adapters.ray._actors import NAMESPACE, Directory, ServerActor, Stored, node_address
from tensorcom.adapters.ray._figures import Figures
from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline.autoscale import data_wait
from tensorcom.pipeline.processes import Roster
from tensorcom.pipeline.serving import ServeJob
from tensorcom.pipeline.shared_serving import finish_hub
from tensorcom.transport.index_set import IndexSet
from tensorcom.transport.resume import ResumePlan

RESTART_WAIT = 120.0  # seconds to wait for Ray to bring a dead actor back
POLL = 0.25  # seconds between the driver's looks at its actors and the hub


@dataclass
class Member:
    """The driver's record of actor `index`: its handle, the incarnation it last heard from, and its
    pending calls. It serves Serving.job.portions_of(index) (v % N == index)."""

    index: int
    actor: Any
    incarnation: str = ""
    senders: dict = field(default_factory=dict)  # {portion: sender id of its Connection} (new each run, with a hub)
    pid: int = 0
    node: str = ""
    run: Any = None  # the pending run()
    probe: Any = None  # a pending hello() while the driver waits for the hub


@dataclass(frozen=True)
class Plan:
    """What the driver runs: the `hub` (None: actors push to job.urls), the actors' `job` (with the
    stream's plan, `resume`: stream, first epoch, batches the consumer had), `epochs` to serve (None:
    forever), per-actor Ray `actor_options`, `report` seconds / `on_report`, whether start() started
    Ray, with workers="auto" the `scaling` that decides the actors of each epoch, and the `metrics`
    endpoint's "HOST:PORT" (None: none; _figures)."""

    hub: Any
    job: ServeJob
    epochs: int | None
    actor_options: list[dict]
    report: float | None
    on_report: Callable[[dict], None] | None
    own_ray: bool
    scaling: Any = None  # workers="auto": the ActorScaling (tensorcom.adapters.ray._scaling)
    metrics: str | None = None

    @property
    def resume(self) -> ResumePlan:
        return self.job.plan


class Serving:
    """A running serve, made by start(): `urls` (what consumers connect to), `members` (the actors),
    `wait()` -> totals, `close()`; a context manager. The epochs run in a driver thread whose errors
    (WorkerError, WorkerDied, Undelivered) come out of wait()."""

    def __init__(self, ray: Any, feeds: list, plan: Plan):
        self.ray, self.feeds, self.plan, self.hub = ray, feeds, plan, plan.hub
        self.stop, self.done = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.result: dict | None = None
        self.members: list[Member] = []
        self.runs = Roster("serving actor", 0)  # the books of the epoch's runs (tensorcom.pipeline.processes)
        self.feed_refs: list = []
        self.job = plan.job  # N actors now: urls per actor (workers="auto" changes N between epochs)
        self.directory: Any = None
        self.host = ""  # the driver's node address
        self.thread = threading.Thread(target=self._main, name="tensorcom-ray-driver", daemon=True)
        self.figures = Figures(plan.report, plan.on_report, plan.hub, lambda: len(self.members))

    def launch(self, name: str | None) -> Serving:
        """Create the actors, wait until each has built its portion, start the driver thread; with
        `name`, register the URLs for endpoints(name)."""
        atexit.register(self.close)
        self.host = node_address(self.ray)
        # the driver holds each feed in the object store for the serve's life and the actors get a
        # reference to it, so that a restarted actor finds it there (Ray may drop its own copy of a
        # large constructor argument, ray-project/ray#53727); one reference per distinct feed
        distinct = {id(feed): feed for feed in self.feeds}
        refs = {key: self.ray.put(feed) for key, feed in distinct.items()}
        self.feed_refs = [refs[id(feed)] for feed in self.feeds]
        self._add_members(self.job.processes)
        if name is not None:
            self.directory = self.ray.remote(Directory).options(name=f"serve:{name}", namespace=NAMESPACE,
                                                                num_cpus=0).remote(self.urls)
        self.figures.open_metrics(self.plan.metrics)
        self.figures.started()
        self.thread.start()
        return self

    @property
    def urls(self) -> list[str]:
        """zjoin:// URLs of the hub (a wildcard host replaced by the driver's node address), or the
        URLs every actor pushes to."""
        if self.hub is None:
            return list(self.plan.job.urls[0])
        return [join_url(address, self.host) for address in self.hub.addresses]

    def wait(self, timeout: float | None = None) -> dict:
        """Wait until every epoch is served (and, sharing, consumed): the totals {"batches", "samples",
        "seconds", "restarts", ...}; re-raises the driver's error; TimeoutError after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done.wait(0.2):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the Ray serve did not finish within {timeout} s")
        if self.error is not None:
            raise self.error
        return dict(self.result or {})

    def close(self) -> None:
        """Stop the driver thread, kill every actor, stop the hub, shut Ray down if start() started
        it. Safe twice."""
        atexit.unregister(self.close)
        self.figures.close_metrics()
        self.stop.set()
        if self.hub is not None and self.thread.is_alive():
            self.hub.server.stop.set()  # a driver thread waiting for the consumers returns at once
        if self.thread.is_alive():
            self.thread.join()
        if self.ray.is_initialized():
            for actor in [m.actor for m in self.members] + [self.directory] * (self.directory is not None):
                self.ray.kill(actor, no_restart=True)
            if self.plan.own_ray:
                self.ray.shutdown()
        self.members, self.directory, self.feed_refs = [], None, []
        if self.hub is not None and self.result is None:
            self.hub.abort()
            self.hub = None

    def __enter__(self) -> Serving:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- the driver thread ------------------------------------------------------------------

    def _add_members(self, count: int) -> None:
        """Create actors len(members)..count-1, serving self.job's portions, and wait for each to
        build them (hello)."""
        remote, fresh = self.ray.remote(ServerActor), []
        for i in range(len(self.members), count):
            actor = remote.options(**self.plan.actor_options[i]).remote(Stored(self.feed_refs[i]), i, self.job)
            fresh.append(Member(i, actor))
        self.members += fresh
        for m in fresh:
            m.incarnation, m.senders, m.pid, m.node, _ = self._get(m, m.actor.hello.remote())

    def _rescale(self, epoch: int) -> None:
        """workers="auto", at the boundary before `epoch`: create or kill actors so that there are
        scaling.target, actor i serving the portions v % N' == i from this epoch on (each run is given
        its portions; a kept actor closes the lanes it gives up, whose Connections sent nothing since
        the hub confirmed their last run, and the new senders take the portions over)."""
        scaling = self.plan.scaling
        if scaling is None or scaling.target == len(self.members):
            return
        count = scaling.target
        self.job = dataclasses.replace(self.plan.job, urls=[self.plan.job.urls[0]] * count)
        for m in self.members[count:]:
            self.ray.kill(m.actor, no_restart=True)
        self.members = self.members[:count]
        self._add_members(count)
        if self.plan.report is not None:
            print(f"tensorcom.ray: {count} actors from epoch {epoch} (auto)", file=sys.stderr, flush=True)

    def _observe(self) -> None:
        """workers="auto": feed the scaling (at most once a second) the consumers' largest data wait
        (autoscale.data_wait of the hub's consumer records; 0 before any), the actors and Ray's
        available CPUs; the actors' idle share is what their finished runs reported (_collect)."""
        scaling = self.plan.scaling
        if scaling is None or not scaling.due(len(self.members)):
            return
        scaling.observe(data_wait(self.hub, 0.0), len(self.members), self.ray.available_resources().get("CPU", 0.0))

    def _main(self) -> None:
        try:
            first, epochs = self.plan.resume.epoch, self.plan.epochs
            epoch = first
            while epochs is None or epoch < first + epochs:
                self._rescale(epoch)
                self._serve_epoch(epoch)
                epoch += 1
            self._finish()
        except _Stopped:
            pass
        except BaseException as exc:  # handed to wait()
            self.error = exc
        finally:
            self.done.set()

    def _serve_epoch(self, epoch: int) -> None:
        """Every actor serves `epoch` (the resume plan's skips first); the dead are restarted; returns
        once the hub's input has ended the epoch."""
        self.runs = Roster("serving actor", len(self.members))
        for m in self.members:
            m.probe, m.run = None, m.actor.run.remote(epoch, epoch, self.plan.resume, self.job.portions_of(m.index))
        while not self.runs.finished or not self._hub_ended(epoch):
            if self.stop.is_set():
                raise _Stopped()
            running = [m.run for m in self.members if m.run is not None]
            if running:
                ready, _ = self.ray.wait(running, num_returns=len(running), timeout=POLL)
                for m in [m for m in self.members if m.run in ready]:
                    self._collect(m, epoch)
            else:
                self._probe(epoch)
            self.figures.maybe_report()
            self._observe()

    def _collect(self, m: Member, epoch: int) -> None:
        """Member m's finished run: counted, or, when its actor died, a restart."""
        ref, m.run = m.run, None
        try:
            batches, samples, m.senders, (idle, busy) = self._get(m, ref)
        except WorkerDied:
            self._restart(m, epoch)
            return
        if self.plan.scaling is not None:
            self.plan.scaling.ran(idle, busy, len(self.members))
        self.runs.message(m.index, ("end", m.index, (batches, samples)))
        self.figures.ran(batches, samples, idle, busy)

    def _probe(self, epoch: int) -> None:
        """While the hub waits for the end of `epoch`: ask each actor who it is; a new incarnation
        has lost what its predecessor had queued, so it takes the portion over (restart)."""
        for m in self.members:
            m.probe = m.probe or m.actor.hello.remote()
        ready, _ = self.ray.wait([m.probe for m in self.members], num_returns=len(self.members), timeout=POLL)
        for m in [m for m in self.members if m.probe in ready]:
            ref, m.probe = m.probe, None
            try:
                if self._get(m, ref)[0] != m.incarnation:
                    self._restart(m, epoch)
            except WorkerDied:
                self._restart(m, epoch)

    def _restart(self, m: Member, epoch: int) -> None:
        """Member m's actor died during or after `epoch`: once Ray has it back, hand its portion over
        and have it serve what the hub has not taken (module docstring)."""
        if self.hub is None or not all(feed.resumable for feed in self.feeds):
            raise WorkerDied(f"serving actor {m.index} (pid {m.pid} on {m.node}) died; serving its portion again "
                             "without loss or repeats needs a zshare:// or zsplit:// URL and a pipeline")
        incarnation, senders, pid, node, served = self._hello_again(m)
        job, portions = self.job, self.job.portions_of(m.index)
        if incarnation == m.incarnation:  # a call was lost, not the actor
            m.senders = senders
            if served is None or served < epoch:
                self.runs.revive(m.index)
                m.run = m.actor.run.remote(epoch, epoch, self.plan.resume, portions)
            else:  # the lost call's run was done
                self.runs.message(m.index, ("end", m.index, None))
            return
        handovers = {portion: self.hub.server.handover(
            job.stream, portion, job.portions, first_epoch=self.plan.resume.epoch,
            retire=[m.senders.get(portion)] if m.senders.get(portion) else []) for portion in portions}
        again = served_again(epoch, handovers, self.plan.resume)
        m.incarnation, m.senders, m.pid, m.node = incarnation, senders, pid, node
        self.figures.restarts += 1
        self.runs.revive(m.index)
        if again is None:  # the hub had ended `epoch` before the actor died: nothing is missing
            print(f"tensorcom.ray: serving actor {m.index} died after the hub had its epoch {epoch}; restarted as "
                  f"pid {pid} on {node}, it goes on with the next epoch", file=sys.stderr, flush=True)
            self.runs.message(m.index, ("end", m.index, None))
            return
        print(f"tensorcom.ray: serving actor {m.index} died; restarted as pid {pid} on {node}, it serves epochs "
              f"{again.epoch}..{epoch} of portions {portions} again, passing over "
              f"{sum(len(again.taken(e, v)) for e in range(again.epoch, epoch + 1) for v in portions)} batches",
              file=sys.stderr, flush=True)
        m.run = m.actor.run.remote(again.epoch, epoch, again, portions)

    def _hello_again(self, m: Member) -> tuple:
        """hello() of member m's actor, waiting (up to RESTART_WAIT s) while Ray restarts it."""
        deadline = time.monotonic() + RESTART_WAIT
        ref = m.actor.hello.remote()
        while True:
            if self.stop.is_set():
                raise _Stopped()
            if self.ray.wait([ref], timeout=POLL)[0]:
                try:
                    return self._get(m, ref)
                except WorkerDied as exc:
                    if isinstance(exc.__cause__, self.ray.exceptions.ActorDiedError):
                        raise
                    time.sleep(POLL)
                    ref = m.actor.hello.remote()  # the call met the actor on its way down: ask again
            if time.monotonic() > deadline:
                raise WorkerDied(f"serving actor {m.index} did not come back within {RESTART_WAIT} s")

    def _get(self, m: Member, ref: Any) -> Any:
        """ray.get(ref) of a call on member m: WorkerError when it raised, WorkerDied when its actor
        is gone or unreachable (the cause says whether for good: ActorDiedError)."""
        errors = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except errors.RayTaskError as exc:
            raise WorkerError(f"serving actor {m.index} (pid {m.pid} on {m.node}) raised: {exc}") from exc
        except errors.RayActorError as exc:
            raise WorkerDied(f"serving actor {m.index} (pid {m.pid} on {m.node}) is gone: {exc}") from exc

    def _hub_ended(self, epoch: int) -> bool:
        """True once the hub's input has ended `epoch` (at once without a hub)."""
        if self.hub is None:
            return True
        current = self.hub.server.input_epoch
        return current is not None and current > epoch

    def _finish(self) -> None:
        """After the last epoch: the hub ends the stream and waits for its consumers (Undelivered when
        it cannot deliver everything); without a hub, the actors let their queued messages leave."""
        consumers = None
        if self.hub is not None:
            consumers = finish_hub(self.hub, self.plan.epochs)["consumers"]
        else:
            for m, ref in [(m, m.actor.close.remote()) for m in self.members]:
                self._get(m, ref)
        self.figures.maybe_report(force=True)
        self.result = {**self.figures.stats(overall=True), **({"consumers": consumers} if consumers is not None else {})}


class _Stopped(Exception):
    """close() asked the driver thread to stop."""


def served_again(epoch: int, handovers: dict, resumed: ResumePlan) -> ResumePlan | None:
    """What a restarted actor serves again, given the hub's handover plan of each of its portions
    ({portion: ResumePlan}) and what the consumers had before this serve (`resumed`): from the hub's
    input epoch to `epoch`, passing over what either had (after_handover). None when the hub's input
    is already past `epoch` (the actor died after its last run was whole in the hub: serving that
    epoch again would repeat it)."""
    first = min((plan.epoch for plan in handovers.values()), default=epoch + 1)
    if first > epoch:
        return None
    some = next(iter(handovers.values()))
    taken = {(e, v): after_handover(resumed.taken(e, v), plan.taken(e, v))
             for v, plan in handovers.items() for e in range(plan.epoch, epoch + 1)}
    return ResumePlan(some.stream, some.portions, first, taken)


def after_handover(resumed: IndexSet, hub: IndexSet) -> IndexSet:
    """What a restarted portion passes over: the batch indices the consumers had before this serve
    (`resumed`) and those the hub took from the dead incarnation. A hub that reports a count n (the
    set [0, n)) took the first n indices missing from `resumed`, which the portion sent in order."""
    if hub.intervals != [[0, len(hub)]]:
        return resumed | hub
    first = list(itertools.islice(resumed.missing(1 << 62), len(hub)))
    return resumed | IndexSet([[i, i + 1] for i in first])


def join_url(address: str, host: str) -> str:
    """The zjoin URL of a bound zmq `address` ("tcp://0.0.0.0:7880"); a wildcard host becomes `host`."""
    transport, _, rest = address.partition("://")
    if transport != "tcp":
        return f"zjoin+{address}"
    bound, _, port = rest.rpartition(":")
    return f"zjoin://{host if bound in ('0.0.0.0', '*', '[::]', '::') else bound}:{port}"
