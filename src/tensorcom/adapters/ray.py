"""`tensorcom.ray`: augmentation servers as Ray actors across a cluster, feeding trainers that need not
be Ray programs (any framework; another language through docs/protocol.md). Guide: docs/ray.md.

    tensorcom.ray.serve("mymodule:make_pipeline", "zsplit://0.0.0.0:7880", workers=8, epochs=90)
    with tensorcom.ray.start(pipeline, "zshare://0.0.0.0:*", workers=4, name="imagenet") as serving:
        serving.urls                          # ["zjoin://10.0.0.5:41234"]: what trainers join
        serving.wait()                        # every epoch served and consumed: the totals
    tensorcom.ray.endpoints("imagenet")       # those URLs, from any program connected to the cluster
    tensorcom.ray.serve_dataset(ray.data.read_parquet(...), "zsplit://0.0.0.0:7880", workers=2)

The driver (the calling process) runs a sharing server (tensorcom.transport.hub.Hub) bound to the
trainer-facing zshare/zsplit URL, its input on tcp on the driver's node. Actor i of N (ServerActor)
builds share i of N of the pipeline and pushes it there through a Connection tagged with its share
(stream, i, N); the N actors form one marker group. Epoch by epoch the driver calls `run` on every
actor, then waits until the hub's input has ended the epoch, so no actor runs ahead and when epoch
e+1 starts everything of epoch e is in the hub.

Restart without loss: Ray restarts a dead actor (`max_restarts`); its new incarnation is a new
sender. The driver sees the failed call (or, between calls, a new sender id from `hello`), and calls
`hub.server.handover(stream, i, N, retire=[old sender])`: from then on whatever still arrives from
the dead incarnation is dropped, and the returned ResumePlan holds how many batches of share i the
hub took in each unfinished epoch. The new incarnation serves those epochs again, passing over
exactly that many (serving.fast_forward; pipelines are deterministic given seed, epoch and worker),
and ends each once more. With connecting URLs (zpush, zrpub: actors push straight to a trainer that
binds) nothing counts what arrived, so a dead actor ends the serve with WorkerDied.

Who shuts down: close() (the end of serve(), Ctrl-C, an error, interpreter exit) stops the driver
thread, kills every actor and the hub, and shuts Ray down when start() started it; a driver that dies
takes its actors along (Ray kills the actors of a dead owner).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from tensorcom.errors import MissingDependency, WorkerDied, WorkerError
from tensorcom.pipeline.serving import DEFAULT_LINGER, assign_urls, check_spec, resolve, send_epochs
from tensorcom.pipeline.serving import _resume_plan as resume_plan  # serve()'s one rule for `resume`
from tensorcom.pipeline.shared_serving import consumer_lines, finish_hub, is_sharing
from tensorcom.progress import RateWindow

RESTART_WAIT = 120.0  # seconds to wait for Ray to bring a dead actor back
POLL = 0.25  # seconds between the driver's looks at its actors and the hub
NAMESPACE = "tensorcom"  # the Ray namespace where named serves are registered


def require_ray() -> Any:
    """The ray module; MissingDependency naming the extra when it is not installed."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependency("needs ray: pip install 'tensorcom[ray]'", module="ray", extra="ray") from exc
    return ray


# ---------------------------------------------------------------- what an actor serves


class PipelineFeed:
    """A pipeline spec (Pipeline, "module:function", "file.py:function", factory): `open(i, n)` builds
    share i of n in the actor. Deterministic given (seed, epoch, worker): restarts are exact."""

    resumable = True

    def __init__(self, spec: Any):
        module, colon, name = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
        self.spec = f"{os.path.abspath(module)}:{name}" if colon and module.endswith(".py") else spec

    def open(self, index: int, workers: int) -> Any:
        return resolve(self.spec).shard(index, workers)


class DatasetFeed:
    """One Ray Data iterator (a part of `streaming_split`) as a share: each epoch is one pass of its
    iter_batches, dicts of numpy arrays (columns of strings or objects as lists). Ray Data's order is
    not reproducible, so it is not resumable."""

    resumable = False

    def __init__(self, iterator: Any, batch_size: int, options: dict):
        self.iterator, self.batch_size, self.options = iterator, batch_size, options

    def open(self, index: int, workers: int) -> DatasetFeed:
        return self

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __iter__(self) -> Any:
        for batch in self.iterator.iter_batches(batch_size=self.batch_size, batch_format="numpy", **self.options):
            yield {name: column.tolist() if column.dtype.kind in "OUSV" else column for name, column in batch.items()}


@dataclass(frozen=True)
class ActorJob:
    """What every actor is given: `urls` to connect to, the `stream` id and `workers` N (its share tag
    and marker group), Connection `options` (with "linger"), and the driver's working directory
    (searched first for "module:function", as on the driver)."""

    urls: list[str]
    stream: str
    workers: int
    options: dict
    cwd: str


class _Never:
    """send_epochs's stop event and barrier in an actor: the driver orders the epochs and stops
    actors by killing them."""

    def is_set(self) -> bool:
        return False

    def wait(self) -> None:
        pass


@dataclass(frozen=True)
class Stored:
    """A reference to an object the driver keeps in Ray's object store (a nested ObjectRef, which Ray
    passes as it is instead of resolving)."""

    ref: Any

    def get(self) -> Any:
        return require_ray().get(self.ref)


class ServerActor:
    """One Ray actor: share `index` of job.workers. Its methods run one at a time, in the order the
    driver calls them. hello() -> (sender id, pid, node, last epoch served) builds the share and its
    Connection on the first call (in a restarted actor: again, a new sender); run(first, last, skips)
    sends epochs first..last, passing over skips[e] batches of epoch e, each epoch followed by its
    marker, and returns the (batches, samples) sent; close() lets queued messages leave."""

    def __init__(self, feed: Stored, index: int, job: ActorJob):
        self.feed, self.index, self.job = feed, index, job
        self.share: Any = None
        self.conn: Any = None
        self.served: int | None = None

    def hello(self) -> tuple[str, int, str, int | None]:
        if self.conn is None:
            from tensorcom.transport.connection import Connection

            if os.path.isdir(self.job.cwd) and self.job.cwd not in sys.path:
                sys.path.insert(0, self.job.cwd)
            self.share = self.feed.get().open(self.index, self.job.workers)
            options = {key: value for key, value in self.job.options.items() if key != "linger"}
            self.conn = Connection(self.job.urls, group=self.job.stream, group_size=self.job.workers,
                                   share=(self.job.stream, self.index, self.job.workers), **options)
        return self.conn.sender, os.getpid(), node_address(require_ray()), self.served

    def run(self, first: int, last: int, skips: dict[int, int]) -> tuple[int, int]:
        self.hello()
        counts = (0, 0)
        for counts in send_epochs(self.share, self.conn, last - first + 1, first, _Never(), _Never(), skips):
            pass
        self.served = last if self.served is None else max(last, self.served)
        return counts

    def close(self) -> None:
        if self.conn is not None:
            self.share.close()
            self.conn.close(linger=self.job.options["linger"])
            self.conn = None


class Directory:
    """A named actor (no CPU) holding a named serve's consumer URLs, for endpoints()."""

    def __init__(self, urls: list[str]):
        self._urls = urls

    def urls(self) -> list[str]:
        return self._urls


# ---------------------------------------------------------------- the driver


@dataclass
class Member:
    """The driver's record of actor `index`: its handle, the incarnation it last heard from, and its
    pending calls."""

    index: int
    actor: Any
    sender: str = ""
    pid: int = 0
    node: str = ""
    run: Any = None  # the pending run()
    probe: Any = None  # a pending hello() while the driver waits for the hub


@dataclass(frozen=True)
class Plan:
    """What the driver runs: the `hub` (None: actors push to job.urls), the actors' `job`, the
    `resume` plan (stream, first epoch, batches the consumer had), `epochs` to serve (None: forever),
    per-actor Ray `actor_options`, `report` seconds / `on_report`, and whether start() started Ray."""

    hub: Any
    job: ActorJob
    resume: Any
    epochs: int | None
    actor_options: list[dict]
    report: float | None
    on_report: Callable[[dict], None] | None
    own_ray: bool


class Serving:
    """A running serve, made by start(): `urls` (what consumers connect to), `members` (the actors),
    `wait()` -> totals, `close()`; a context manager. The epochs run in a driver thread whose errors
    (WorkerError, WorkerDied, Undelivered) come out of wait()."""

    def __init__(self, ray: Any, feeds: list, plan: Plan):
        self.ray, self.feeds, self.plan, self.hub = ray, feeds, plan, plan.hub
        self.stop, self.done = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.result: dict | None = None
        self.restarts, self.sent = 0, (0, 0)
        self.members: list[Member] = []
        self.feed_refs: list = []
        self.directory: Any = None
        self.host = ""  # the driver's node address
        self.thread = threading.Thread(target=self._main, name="tensorcom-ray-driver", daemon=True)
        self.started = time.monotonic()
        self.last_report: float | None = None  # when the last rate line was printed (from the first batch)
        self.rates = RateWindow(max(plan.report or 0.0, 1.0))

    def launch(self, name: str | None) -> Serving:
        """Create the actors, wait until each has built its share, start the driver thread; with
        `name`, register the URLs for endpoints(name)."""
        atexit.register(self.close)
        self.host = node_address(self.ray)
        remote = self.ray.remote(ServerActor)
        # the driver holds each feed in the object store for the serve's life and the actors get a
        # reference to it, so that a restarted actor finds it there (Ray may drop its own copy of a
        # large constructor argument, ray-project/ray#53727)
        self.feed_refs = [self.ray.put(feed) for feed in self.feeds]
        for i, ref in enumerate(self.feed_refs):
            options = self.plan.actor_options[i]
            self.members.append(Member(i, remote.options(**options).remote(Stored(ref), i, self.plan.job)))
        for m in self.members:
            m.sender, m.pid, m.node, _ = self._get(m, m.actor.hello.remote())
        if name is not None:
            self.directory = self.ray.remote(Directory).options(name=f"serve:{name}", namespace=NAMESPACE,
                                                                num_cpus=0).remote(self.urls)
        self.started = time.monotonic()
        self.thread.start()
        return self

    @property
    def urls(self) -> list[str]:
        """zjoin:// URLs of the hub (a wildcard host replaced by the driver's node address), or the
        URLs the actors push to."""
        if self.hub is None:
            return list(self.plan.job.urls)
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

    def _main(self) -> None:
        try:
            first, epochs = self.plan.resume.epoch, self.plan.epochs
            epoch = first
            while epochs is None or epoch < first + epochs:
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
        for m in self.members:
            m.probe, m.run = None, m.actor.run.remote(epoch, epoch, {epoch: self._resumed(epoch, m.index)})
        while any(m.run is not None for m in self.members) or not self._hub_ended(epoch):
            if self.stop.is_set():
                raise _Stopped()
            running = [m.run for m in self.members if m.run is not None]
            if running:
                ready, _ = self.ray.wait(running, num_returns=len(running), timeout=POLL)
                for m in [m for m in self.members if m.run in ready]:
                    self._collect(m, epoch)
            else:
                self._probe(epoch)
            self._maybe_report()

    def _collect(self, m: Member, epoch: int) -> None:
        """Member m's finished run: counted, or, when its actor died, a restart."""
        ref, m.run = m.run, None
        try:
            batches, samples = self._get(m, ref)
        except WorkerDied:
            self._restart(m, epoch)
            return
        self.sent = (self.sent[0] + batches, self.sent[1] + samples)

    def _probe(self, epoch: int) -> None:
        """While the hub waits for the end of `epoch`: ask each actor who it is; a new incarnation
        has lost what its predecessor had queued, so it takes the share over (restart)."""
        for m in self.members:
            m.probe = m.probe or m.actor.hello.remote()
        ready, _ = self.ray.wait([m.probe for m in self.members], num_returns=len(self.members), timeout=POLL)
        for m in [m for m in self.members if m.probe in ready]:
            ref, m.probe = m.probe, None
            try:
                if self._get(m, ref)[0] != m.sender:
                    self._restart(m, epoch)
            except WorkerDied:
                self._restart(m, epoch)

    def _restart(self, m: Member, epoch: int) -> None:
        """Member m's actor died during or after `epoch`: once Ray has it back, hand its share over
        and have it serve what the hub has not taken (module docstring)."""
        if self.hub is None or not all(feed.resumable for feed in self.feeds):
            raise WorkerDied(f"serving actor {m.index} (pid {m.pid} on {m.node}) died; serving its share again "
                             "without loss or repeats needs a zshare:// or zsplit:// URL and a pipeline")
        sender, pid, node, served = self._hello_again(m)
        if sender == m.sender:  # the same incarnation: a call was lost, not the actor
            if served is None or served < epoch:
                m.run = m.actor.run.remote(epoch, epoch, {epoch: self._resumed(epoch, m.index)})
            return
        job = self.plan.job
        plan = self.hub.server.handover(job.stream, m.index, job.workers, first_epoch=self.plan.resume.epoch,
                                        retire=[m.sender])
        skips = {e: self._resumed(e, m.index) + plan.skip(e, m.index) for e in range(plan.epoch, epoch + 1)}
        print(f"tensorcom.ray: serving actor {m.index} (pid {m.pid} on {m.node}) died; restarted as pid {pid} on "
              f"{node}, it serves epochs {plan.epoch}..{epoch} of share {m.index} again, passing over {skips} batches",
              file=sys.stderr, flush=True)
        m.sender, m.pid, m.node = sender, pid, node
        self.restarts += 1
        m.run = m.actor.run.remote(plan.epoch, epoch, skips)

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

    def _resumed(self, epoch: int, worker: int) -> int:
        """Batches of (epoch, worker) the consumer had before this serve started (resume)."""
        return self.plan.resume.skip(epoch, worker)

    def _hub_ended(self, epoch: int) -> bool:
        current = None if self.hub is None else self.hub.server.input_epoch
        return self.hub is None or (current is not None and current > epoch)

    def _finish(self) -> None:
        """After the last epoch: the hub ends the stream and waits for its consumers (Undelivered when
        it cannot deliver everything); without a hub, the actors let their queued messages leave."""
        consumers = None
        if self.hub is not None:
            consumers = finish_hub(self.hub, self.plan.epochs)["consumers"]
        else:
            for m, ref in [(m, m.actor.close.remote()) for m in self.members]:
                self._get(m, ref)
        self._maybe_report(force=True)
        self.result = {**self.stats(overall=True), **({"consumers": consumers} if consumers is not None else {})}

    def stats(self, overall: bool = False) -> dict:
        """Totals (taken by the hub, else sent by finished runs) and rates over the last `report`
        seconds (over the whole run when `overall`)."""
        now = time.monotonic()
        batches, samples = self.sent if self.hub is None else (self.hub.server.input_batches,
                                                               self.hub.server.input_samples)
        span = max(now - self.started, 1e-9)
        rates = (batches / span, samples / span) if overall else (self.rates.rates(now) or (0.0, 0.0))
        return {"batches": batches, "samples": samples, "seconds": now - self.started, "batches_per_s": rates[0],
                "samples_per_s": rates[1], "workers": len(self.members), "restarts": self.restarts}

    def _maybe_report(self, force: bool = False) -> None:
        """A rate line (or on_report) every `report` seconds from the first batch, and when `force`."""
        stats = self.stats()
        self.rates.add((stats["batches"], stats["samples"]))
        if not self.plan.report or self.rates.first is None:
            return
        self.last_report = self.last_report or self.rates.first
        if not force and time.monotonic() - self.last_report < self.plan.report:
            return
        self.last_report = time.monotonic()
        stats = {**self.stats(), **({"consumers": self.hub.server.status} if self.hub is not None else {})}
        if self.plan.on_report is not None:
            self.plan.on_report(stats)
            return
        rates = (f"serve (ray): {stats['batches_per_s']:.1f} batches/s, {stats['samples_per_s']:.1f} samples/s "
                 f"(total {stats['batches']} batches, {stats['samples']} samples, {stats['workers']} actors, "
                 f"{stats['restarts']} restarts)")
        lines = [rates, *consumer_lines(stats.get("consumers", []))]
        print("\n".join(lines), file=sys.stderr, flush=True)


class _Stopped(Exception):
    """close() asked the driver thread to stop."""


def node_address(ray: Any) -> str:
    """This process's node address as the cluster knows it (ray.nodes()), else the address Ray guesses."""
    here = ray.get_runtime_context().get_node_id()
    known = [node["NodeManagerAddress"] for node in ray.nodes() if node.get("NodeID") == here]
    return known[0] if known else ray.util.get_node_ip_address()


def check_urls(url: Any, workers: int) -> bool:
    """True for sharing URLs (the driver binds them), False for URLs every actor connects to;
    ValueError (naming the URL) for others."""
    from tensorcom.urls import parse_all

    if is_sharing(url):
        return True
    if any(e.bind for e in parse_all(url)) or assign_urls(url, workers)[1]:
        raise ValueError(f"{url}: Ray actors push to a sharing server the driver binds (zshare://, zsplit://) or "
                         "connect to a trainer that binds (zpush://, zrpub://); not to a URL each would bind")
    return False


def join_url(address: str, host: str) -> str:
    """The zjoin URL of a bound zmq `address` ("tcp://0.0.0.0:7880"); a wildcard host becomes `host`."""
    transport, _, rest = address.partition("://")
    if transport != "tcp":
        return f"zjoin+{address}"
    bound, _, port = rest.rpartition(":")
    return f"zjoin://{host if bound in ('0.0.0.0', '*', '[::]', '::') else bound}:{port}"


def endpoints(name: str, address: str | None = None) -> list[str]:
    """The consumer URLs of the serve started with `name=name`, from any program connected to the
    cluster (not connected yet: joins `address`, default "auto", the cluster `ray start` runs here)."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=address or "auto")
    return ray.get(ray.get_actor(f"serve:{name}", namespace=NAMESPACE).urls.remote())


# ---------------------------------------------------------------- the entry points


def start(pipeline: Any, url: Any, *, workers: int = 2, **options: Any) -> Serving:
    """Start serving `pipeline` (a Pipeline, "module:function", "file.py:function" or a picklable
    factory) from `workers` Ray actors to `url`; returns the running Serving. `options`: those of
    start_feeds."""
    require_ray()
    check_spec(pipeline)
    return start_feeds([PipelineFeed(pipeline)] * _positive("workers", workers), url, **options)


def serve(pipeline: Any, url: Any, **options: Any) -> dict:
    """start(pipeline, url, **options), print where consumers connect and where the actors run (unless
    report is None), wait until everything is served (and, sharing, consumed), stop. Returns the
    totals; raises WorkerError (an actor's pipeline raised), WorkerDied (an actor could not be
    brought back), Undelivered (sharing: consumers did not get everything)."""
    with start(pipeline, url, **options) as serving:
        if options.get("report", 10.0):
            places = ", ".join(f"pid {m.pid} on {m.node}" for m in serving.members)
            print(f"consumers join {' '.join(serving.urls)}; {len(serving.members)} Ray actor(s): {places}",
                  file=sys.stderr, flush=True)
        return serving.wait()


def serve_dataset(dataset: Any, url: Any, *, workers: int = 1, batch_size: int = 256,
                  iter_options: dict | None = None, **options: Any) -> dict:
    """Serve a ray.data.Dataset's batches (iter_batches(batch_size, batch_format="numpy"): dicts of
    arrays) from `workers` actors, each iterating one part of `dataset.streaming_split(workers)`, to
    `url`, then stop; returns the totals. `options` as start_feeds, except that a dead actor ends the
    serve (WorkerDied). iter_options: more iter_batches keywords (prefetch_batches, drop_last, ...)."""
    require_ray()
    count = _positive("workers", workers)
    iterators = dataset.streaming_split(count) if count > 1 else [dataset.iterator()]
    feeds = [DatasetFeed(iterator, batch_size, dict(iter_options or {})) for iterator in iterators]
    with start_feeds(feeds, url, **{**options, "max_restarts": 0}) as serving:
        return serving.wait()


def start_feeds(feeds: list, url: Any, *, epochs: int | None = 1, first_epoch: int = 0, resume: Any = None,
                resources: dict | None = None, placement_group: Any = None, max_restarts: int = 3,
                address: str | None = None, host: str | None = None, name: str | None = None,
                report: float | None = 10.0, on_report: Callable[[dict], None] | None = None,
                min_consumers: int = 1, sharing: dict | None = None, curve: Any = None,
                connection_options: dict | None = None, linger: float = DEFAULT_LINGER) -> Serving:
    """Start one actor per feed (actor i serves feeds[i].open(i, N)) sending to `url`.

    url: zshare:// or zsplit:// (the driver binds it; "HOST:*" takes a free port; actors restart without
    loss), or connecting zpush:// / zrpub:// URLs (every actor connects; the trainer binds; no restarts).
    epochs (None: forever) numbered from first_epoch; resume: a consumer's state or its file, as
    tensorcom.serve. resources: per actor, {"num_cpus": 1 (default), "num_gpus", "memory", any custom
    resource: amount}; placement_group: actor i in bundle i (modulo the bundles), else Ray spreads the
    actors over the nodes. max_restarts: per actor. address: the cluster to join when this program is
    not connected yet (None: the one `ray start` runs here, else a new local instance, shut down by
    close()). host: where the hub's input binds (default: the driver's node address). name: register
    the consumer URLs for endpoints(name). report, on_report, min_consumers, sharing, curve,
    connection_options, linger: as tensorcom.serve."""
    ray = require_ray()
    sharing_urls = check_urls(url, len(feeds))
    if epochs is not None:
        _positive("epochs", epochs)
    resumed = resume_plan(resume, len(feeds), first_epoch, epochs)
    own_ray = not ray.is_initialized()
    if own_ray:
        ray.init(address=address, **({"include_dashboard": False} if address is None else {}))
    serving = hub = None
    try:
        if sharing_urls:
            from tensorcom.transport.hub import Hub

            hub = Hub(url, curve=curve, input_host=host or node_address(ray),
                      min_consumers=min_consumers, **(sharing or {}))
        elif min_consumers != 1 or sharing:
            raise ValueError("min_consumers and sharing options need zshare:// or zsplit:// URLs")
        options = {"allow64": True, **({"curve": curve} if curve is not None and hub is None else {}),
                   **(connection_options or {}), "linger": linger}
        job = ActorJob([hub.worker_url] if hub else list(url) if isinstance(url, list) else [url], resumed.stream,
                       len(feeds), options, os.getcwd())
        restarts = max_restarts if hub is not None else 0
        plan = Plan(hub, job, resumed, None if epochs is None else first_epoch + epochs - resumed.epoch,
                    [actor_options(i, resources, placement_group, restarts) for i in range(len(feeds))],
                    report, on_report, own_ray)
        serving = Serving(ray, feeds, plan)
        return serving.launch(name)
    except BaseException:
        if serving is not None:
            serving.close()
        else:
            if hub is not None:
                hub.abort()
            if own_ray:
                ray.shutdown()
        raise


def actor_options(index: int, resources: dict | None, placement_group: Any, max_restarts: int) -> dict:
    """Ray's .options() for actor `index`: its resources, placement, restarts (and no retried calls:
    the driver decides what a restarted actor serves)."""
    wanted = {"num_cpus": 1, **(resources or {})}
    options: dict = {key: wanted.pop(key) for key in ("num_cpus", "num_gpus", "memory") if key in wanted}
    if wanted:
        options["resources"] = wanted
    options["scheduling_strategy"] = "SPREAD"
    if placement_group is not None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = index % len(placement_group.bundle_specs)
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group,
                                                                          placement_group_bundle_index=bundle)
    return {**options, "max_restarts": max_restarts, "max_task_retries": 0}


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value
