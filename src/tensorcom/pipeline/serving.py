"""`tensorcom.serve`: run a pipeline in N worker processes, each sending its batches to ZeroMQ URLs.

    serve(pipeline, urls, workers=N, epochs=1, report=10.0)

The pipeline reaches the workers in one of three forms: a `Pipeline` (pickled; its functions must be
module-level), a "module:function" string, or a picklable callable taking nothing and returning a
Pipeline. Worker i iterates `pipeline.shard(i, N)`, so the N workers cover disjoint parts of the
source; after each epoch it calls `Connection.end_epoch()`, so a receiver sees N markers per epoch.

URLs (brace-expanded; all binding or all connecting; sending schemes only; no inproc):
  * connecting (zpush, zrpub): every worker connects to every URL; the N workers form one marker group
    (shared group id, group_size=N), so a receiver binding one URL ends its epoch after N markers;
  * binding (zpub, zrpush): a port can be bound by one process only, so there must be exactly one URL
    per worker — worker i binds urls[i] — and each worker is a group of its own; the receiver connects
    to all of them ("zsub://127.0.0.1:788{0..3}") and ends its epoch after one marker from each.

Every message carries its portion (stream id, worker i of N) and the pipeline's epoch, so a receiver
records what it was handed (`Connection.state_dict()`); `serve(..., resume=STATE)` serves the same
stream from that point: worker i passes over (`fast_forward`) the batches of its portion the consumer has.
Batches go out zero-copy (`send(batch, copy=False)`): the pipeline hands each batch over and must not
modify its arrays after yielding it.

Each worker is a process of the process owner (tensorcom.pipeline.processes) running the one worker
loop on one task, its portion (`serve_portion`), whose values are its counts: messages to the parent
(on the worker's pipe) are ("item", i, (batches, samples)) after its first batch, then at most every
PROGRESS_INTERVAL seconds and after each epoch, then ("end", i, count) once its connection is closed,
or ("error", i, Failure), after which the worker exits with status 1. The parent (a `Supervisor`,
tensorcom.pipeline._supervisor) prints a rate line to stderr every `report` seconds from the first
batch (or calls `on_report(stats)`), with rates over the sliding window of tensorcom.rates (the last
10 s), raises WorkerError when a worker fails (with its traceback and
sample key) and WorkerDied when one dies silently; either way, and on Ctrl-C, it stops every worker
before returning. Workers watch the parent and exit when it disappears
(tensorcom.pipeline._watch).
"""

from __future__ import annotations

import functools
import itertools
import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from tensorcom.checks import positive
from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.pipeline._supervisor import Supervisor
from tensorcom.pipeline.function_spec import load_function
from tensorcom.pipeline.shared_serving import finish_hub, open_hub
from tensorcom.pipeline.workers import check_picklable
from tensorcom.rates import Throttle
from tensorcom.batch import batch_size
from tensorcom.transport.resume import ResumePlan

PROGRESS_INTERVAL = 0.25  # seconds between a worker's progress messages
DEFAULT_LINGER = None  # a finished worker waits for its consumers to read everything, however slow


def load_factory(spec: str) -> Callable[[], Pipeline]:
    """The pipeline factory named by "package.module:function" or "path/to/file.py:function"
    (tensorcom.pipeline.function_spec.load_function); ValueError when it does not resolve."""
    return load_function(spec, "pipeline factory")


def resolve(spec: Any) -> Pipeline:
    """A Pipeline from a Pipeline, a "module:function" string, or a callable returning a Pipeline."""
    if isinstance(spec, Pipeline):
        return spec
    made = load_factory(spec)() if isinstance(spec, str) else spec()
    if not isinstance(made, Pipeline):
        raise TypeError(f"pipeline factory {spec!r} returned {type(made).__name__}, not a tensorcom Pipeline")
    return made


def check_spec(spec: Any) -> None:
    """Fail early, in the parent, on a pipeline that could not reach a worker process."""
    if isinstance(spec, str):
        load_factory(spec)
    elif isinstance(spec, Pipeline):
        check_picklable(spec, "pipeline")
    elif callable(spec):
        check_picklable(spec, "pipeline factory")
    else:
        raise TypeError(f"serve takes a Pipeline, a 'module:function' string or a callable returning a "
                        f"Pipeline, not {type(spec).__name__}: {spec!r}")


def assign_urls(urls: Any, workers: int | None) -> tuple[list[list[str]], bool]:
    """Per-worker URL lists following the module docstring's rule, and whether they bind."""
    from tensorcom.urls import parse_all

    endpoints = parse_all(urls)
    for e in endpoints:
        if not e.sends:
            raise ValueError(f"{e.url}: serve sends batches; use a sending scheme (zpush, zrpush, zpub, zrpub)")
        if e.sharing:
            raise ValueError(f"{e.url}: {e.scheme}:// URLs are served through a sharing server (serve() "
                             "starts one); workers send with zpush, zrpush, zpub or zrpub")
        if e.transport == "inproc":
            raise ValueError(f"{e.url}: inproc URLs only work inside one process; serve's workers are "
                             "processes, so use ipc:// or tcp://")
    binding = {e.bind for e in endpoints}
    if len(binding) > 1:
        raise ValueError(f"serve URLs must all bind or all connect, got {[e.url for e in endpoints]}")
    if binding == {True}:
        count = len(endpoints) if workers is None else workers
        if len(endpoints) != count:
            raise ValueError(
                f"{len(endpoints)} binding URL(s) for {count} workers: a binding URL ({endpoints[0].url}) can be "
                f"bound by one process only; give one URL per worker (e.g. 'zpub://127.0.0.1:788{{0..{count - 1}}}'), "
                "or use a connecting scheme (zpush, zrpub) to a receiver that binds")
        return [[e.url] for e in endpoints], True
    count = 1 if workers is None else workers
    return [[e.url for e in endpoints] for _ in range(count)], False


def _samples_in(batch: Any) -> int:
    try:
        return batch_size(batch)
    except TypeError:
        return 0


class _Progress:
    """A worker's counts, reported at most every PROGRESS_INTERVAL seconds."""

    def __init__(self) -> None:
        self.batches = self.samples = 0
        self.due = Throttle(PROGRESS_INTERVAL, start=-math.inf)  # the first batch is reported at once

    def add(self, batch: Any) -> bool:
        """Count `batch`; True when a report is due (tensorcom.rates.Throttle)."""
        self.batches, self.samples = self.batches + 1, self.samples + _samples_in(batch)
        return self.due.due()

    def report(self) -> tuple[int, int]:
        return self.batches, self.samples


def send_epochs(pipeline: Pipeline, conn: Any, epochs: int | None, first_epoch: int, stop: Any,
                barrier: Any, skips: dict[int, int] | None = None) -> Iterator[tuple[int, int]]:
    """Send each epoch's batches then an end-of-epoch marker; after each marker wait at `barrier` for
    the other workers, so that no worker's next epoch overtakes another's marker. Yields the counts
    (batches, samples) sent so far when a report is due and after each marker. `skips[epoch]`: batches
    of that epoch the consumer already has (resume), passed over unsent. Messages carry the epoch."""
    progress = _Progress()
    epoch = first_epoch
    while (epochs is None or epoch < first_epoch + epochs) and not stop.is_set():
        pipeline.set_epoch(epoch)
        conn.epoch_number = epoch
        for batch in fast_forward(iter(pipeline), (skips or {}).get(epoch, 0), epoch):
            if stop.is_set():
                return
            conn.send(batch, copy=False)  # the pipeline made it and lets it go: zero-copy, as Connection.serve
            if progress.add(batch):
                yield progress.report()
        conn.end_epoch()
        yield progress.report()  # an epoch's counts reach the report even if the next send blocks
        barrier.wait()
        epoch += 1


def fast_forward(batches: Iterator[Any], count: int, epoch: int) -> Iterator[Any]:
    """`batches` (one epoch of a worker's portion) without its first `count`, which a resumed consumer
    already has; ValueError when the portion is shorter (not the pipeline the consumer was fed from).
    Pipelines are deterministic given (seed, epoch, worker), so this recomputes and drops them; a
    pipeline that restores its own state could take this function's place."""
    skipped = sum(1 for _ in itertools.islice(batches, count))
    if skipped < count:
        raise ValueError(f"resume: the consumer has {count} batches of epoch {epoch} of this worker's portion, "
                         f"but the portion has only {skipped}; is this the pipeline it was fed from?")
    return batches


@dataclass(frozen=True)
class ServeJob:
    """What every serving worker is given, a process of tensorcom.serve or a Ray actor of
    tensorcom.ray: `urls[i]` for worker i, the stream's `plan` (stream id, worker count N, first
    epoch, the batches to skip when resuming), Connection `options` (with "linger"), whether the N
    workers form one marker group (`grouped`; False: each binds a URL of its own and is a group of
    its own), the pipeline `spec` and how many `epochs` (None: forever) when the worker runs them
    itself (serve_portion), the driver's working directory `cwd` (searched first for
    "module:function") and `settle`: each run ends once the receiver confirmed everything it sent
    (Ray's ServerActor, sending to the driver's hub)."""

    urls: list[list[str]]
    plan: ResumePlan
    options: dict
    grouped: bool = True
    spec: Any = None
    epochs: int | None = None
    cwd: str = ""
    settle: bool = False

    @property
    def stream(self) -> str:
        return self.plan.stream

    @property
    def workers(self) -> int:
        return self.plan.workers

    def connect(self, index: int) -> Any:
        """Worker `index`'s Connection: its URLs, its marker group, its portion (stream, index, N)."""
        from tensorcom.transport.connection import Connection

        options = {key: value for key, value in self.options.items() if key != "linger"}
        return Connection(self.urls[index], group=self.stream if self.grouped else None,
                          group_size=self.workers if self.grouped else 1,
                          portion=(self.stream, index, self.workers), **options)

    def skips(self, index: int) -> dict[int, int]:
        """{epoch: batches of worker `index`'s portion the resumed consumer already has}."""
        return {epoch: self.plan.skip(epoch, worker) for (epoch, worker) in self.plan.consumed if worker == index}


def serve_portion(job: ServeJob, stop: Any, barrier: Any, index: int) -> Iterator[tuple[int, int]]:
    """Build the pipeline, send portion `index` epoch by epoch, each message tagged with the portion
    (yielding send_epochs's counts), close the connection: its consumers read everything first (for
    at most options["linger"] seconds when not None), or Connection.close raises Undelivered, which
    fails the worker. After a failure or a stop, what is queued is discarded."""
    pipeline = resolve(job.spec).shard(index, job.workers)
    linger = job.options.get("linger", DEFAULT_LINGER)
    conn = job.connect(index)
    try:
        yield from send_epochs(pipeline, conn, job.epochs, job.plan.epoch, stop, barrier, job.skips(index))
    except BaseException:
        linger = 0.0
        raise
    finally:
        pipeline.close()
        conn.close(linger=0.0 if stop.is_set() else linger)


def serve(pipeline: Any, urls: Any, *, workers: int | None = None, epochs: int | None = 1, first_epoch: int = 0,
          report: float | None = 10.0, on_report: Callable[[dict], None] | None = None,
          connection_options: dict | None = None, linger: float | None = DEFAULT_LINGER, resume: Any = None,
          min_consumers: int = 1, sharing: dict | None = None, curve: Any = None) -> dict:
    """Serve `pipeline` from `workers` processes to `urls` (rules in the module docstring; zshare://
    and zsplit:// URLs: tensorcom.pipeline.shared_serving).

    pipeline: Pipeline, "module:function", or callable returning a Pipeline. workers: default one per
    binding URL, else 1. epochs: how many epochs (None: forever), numbered from `first_epoch`.
    resume: a consumer's `Connection.state_dict()` (or the path of the JSON file `save_state` wrote):
    serve only what that consumer has not had, from its epoch on (the epochs before it count towards
    `epochs`), as the same stream with the same number of workers (see resume_plan).
    report: seconds between rate reports (None or 0: none); on_report(stats) replaces the stderr line.
    connection_options: extra keyword arguments for each worker's Connection (e.g. sndhwm, timeout);
    allow64 defaults to True here, since collated Python ints are int64 (pass False to refuse them).
    linger: how long a finished worker waits for its consumers to read what it sent (None: as long as
    they are connected); a worker whose consumers did not get everything (gone, or `linger` passed)
    fails with Undelivered saying how many batches, so serve raises WorkerError.
    min_consumers (sharing URLs): wait for that many consumers before the first batch; sharing:
    further options of the sharing server (replay, policy, liveness). curve: CURVE keys for what the
    consumers connect to (tensorcom.transport.security.Curve; default: $TENSORCOM_CURVE_*).
    Returns {"batches", "samples", "seconds", ...} when every worker has finished (and, sharing, every
    consumer has everything: "consumers" reports each); raises WorkerError / WorkerDied when one fails,
    TransportError when a sharing server could not deliver everything.
    """
    if workers is not None:
        positive("workers", workers)
    if epochs is not None:
        positive("epochs", epochs)
    check_spec(pipeline)
    hub = open_hub(urls, min_consumers=min_consumers, sharing=sharing, curve=curve)
    if hub is None and curve is not None:
        connection_options = {**(connection_options or {}), "curve": curve}
    try:
        return _serve_to(pipeline, hub.worker_url if hub else urls, hub, workers=workers, epochs=epochs,
                         first_epoch=first_epoch, report=report, on_report=on_report,
                         connection_options=connection_options, linger=linger, resume=resume)
    except BaseException:
        if hub is not None:
            hub.abort()
        raise


def _serve_to(pipeline: Any, urls: Any, hub: Any, *, workers: int | None, epochs: int | None, first_epoch: int,
              report: float | None, on_report: Callable[[dict], None] | None, connection_options: dict | None,
              linger: float | None, resume: Any) -> dict:
    """serve()'s body, sending to `urls` (a hub's worker URL when `hub` is not None)."""
    assigned, binds = assign_urls(urls, workers)
    plan = resume_plan(resume, len(assigned), first_epoch, epochs)
    options = {"allow64": True, **(connection_options or {}), "linger": linger}
    job = ServeJob(assigned, plan, options, grouped=not binds, spec=pipeline,
                   epochs=None if epochs is None else first_epoch + epochs - plan.epoch)
    supervisor = Supervisor(report, on_report, hub)
    try:
        supervisor.launch(functools.partial(serve_portion, job), plan.workers)
        supervisor.wait()
        consumers = None if hub is None else finish_hub(hub, job.epochs)["consumers"]
        supervisor.maybe_report(force=True)
        stats = supervisor.stats(overall=True)
        return stats if consumers is None else {**stats, "consumers": consumers}
    finally:
        supervisor.close()


def resume_plan(resume: Any, workers: int, first_epoch: int, epochs: int | None) -> ResumePlan:
    """The plan of a new stream (fresh id, nothing to skip), or the one `resume` (a consumer state or
    its file) describes; ValueError when it does not fit `workers` or has no epoch left to serve."""
    plan = None if resume is None else ResumePlan.from_state(resume)
    if plan is None:
        return ResumePlan(f"serve-{secrets.token_hex(6)}", workers, first_epoch)
    if plan.workers != workers:
        raise ValueError(f"resume: the consumer was fed by {plan.workers} workers of stream {plan.stream}; "
                         f"serve with workers={plan.workers}, not {workers} (the portions would differ)")
    if plan.epoch < first_epoch or (epochs is not None and plan.epoch >= first_epoch + epochs):
        served = f"{first_epoch} on" if epochs is None else f"{first_epoch} to {first_epoch + epochs - 1}"
        raise ValueError(f"resume: the consumer is in epoch {plan.epoch} of stream {plan.stream}, "
                         f"outside the epochs served ({served})")
    return plan
