"""`tensorcom.serve`: run a pipeline in N processes, which send its V portions to ZeroMQ URLs.

    serve(pipeline, urls, workers=N, epochs=1, report=10.0, portions=V)

The pipeline reaches the processes in one of three forms: a `Pipeline` (pickled; its functions must be
module-level), a "module:function" string, or a picklable callable taking nothing and returning a
Pipeline. A served stream has V portions (default V = N; fixed for the stream's life): portion v is
`pipeline.shard(v, V)`, so the V portions cover disjoint parts of the source and which samples form
which batch, and each portion's order, depend on the seed, the epoch and V only, never on N. Process
i serves the portions v with v % N == i (`ServeJob.portions_of`), each on a Connection of its own,
round-robin (tensorcom.pipeline.portion_sending); after each epoch each portion's Connection ends it
(`Connection.end_epoch()`), so a receiver sees V markers per epoch.

URLs (brace-expanded; all binding or all connecting; sending schemes only; no inproc):
  * connecting (zpush, zrpub): every process connects to every URL; the V portions form one marker group
    (shared group id, group_size=V), so a receiver binding one URL ends its epoch after V markers;
  * binding (zpub, zrpush): a port can be bound by one process only, so there must be exactly one URL
    per process — process i binds urls[i] and serves portion i (V = N) — and each is a group of its
    own; the receiver connects to all of them ("zsub://127.0.0.1:788{0..3}") and ends its epoch after
    one marker from each.

Every batch carries its portion (stream id, v of V), the pipeline's epoch and its index (its position
within (epoch, portion)), so a receiver records what it was handed (`Connection.state_dict()`);
`serve(..., resume=STATE)` serves the same stream (its V from the state, any number of processes) from
that point: each portion passes over (`portion_sending.untaken`) the batches the consumer has.
`serve(..., workers="auto")`: V = max_workers portions (or `portions`), served by min_workers
processes at first; the parent's autoscaler (tensorcom.pipeline.autoscale, fed once a second by
_supervisor.Scaling) changes their number only at an epoch boundary: the processes finish the epoch
and close, then N' processes serve the same stream, portions re-dealt v % N' == i (serve_scaled).
Batches go out zero-copy (`send(batch, copy=False)`): the pipeline hands each batch over and must not
modify its arrays after yielding it.

Each serving process (a worker) is a process of the process owner (tensorcom.pipeline.processes)
running the one worker loop on one task, its portions (`serve_portions`), whose values are its counts:
messages to the parent (on the worker's pipe) are ("item", i, (batches, samples, stage record[,
member counts])) after its first batch (the record: seconds per stage of its pipelines,
tensorcom.pipeline.stage_times; a mixture's samples per member), then at most every
portion_sending.PROGRESS_INTERVAL seconds and after each epoch, then ("end", i, count) once its
connections are closed, or ("error", i, Failure), after which the worker exits with status 1. The
parent (a `Supervisor`, tensorcom.pipeline._supervisor) prints a rate line to stderr every `report`
seconds from the first batch (or calls `on_report(stats)`), with rates over the sliding window of
tensorcom.rates (the last 10 s) and where the time went (stages, idle and busy seconds, a verdict),
raises WorkerError when a worker fails (with its traceback and sample key) and WorkerDied when one
dies silently; either way, and on Ctrl-C, it stops every worker before returning. Workers watch the
parent and exit when it disappears (tensorcom.pipeline._watch).
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from tensorcom import settings
from tensorcom.checks import positive
from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.pipeline._supervisor import Scaling, Supervisor
from tensorcom.pipeline.function_spec import load_function
from tensorcom.pipeline.portion_sending import Gate, Lane, send_epochs
from tensorcom.pipeline.shared_serving import finish_hub, open_hub
from tensorcom.pipeline.stage_times import StageClock, timed
from tensorcom.pipeline.workers import check_picklable
from tensorcom.transport.resume import ResumePlan

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


@dataclass(frozen=True)
class ServeJob:
    """What every serving process is given, a process of tensorcom.serve or a Ray actor of
    tensorcom.ray: `urls[i]` for process i (N = len(urls) processes), the stream's `plan` (stream id,
    V portions, first epoch, the batch indices the consumers have when resuming), Connection
    `options` (with "linger"), whether the V portions form one marker group (`grouped`; False: each
    process binds a URL of its own, serves one portion and is a group of its own), the pipeline
    `spec` and how many `epochs` (None: forever) when the process runs them itself (serve_portions),
    the driver's working directory `cwd` (searched first for "module:function") and `settle`: each
    run ends once the receiver confirmed everything it sent (Ray's ServerActor, sending to the
    driver's hub); `timing`: whether the process times its stages (stage_times; False: its counts
    carry no stage record); `cache`: the directory of the pipeline's `cache(None)` stages (pipeline.cache.serve_in).
    Process i serves the portions v with v % N == i (`portions_of`)."""

    urls: list[list[str]]
    plan: ResumePlan
    options: dict
    grouped: bool = True
    spec: Any = None
    epochs: int | None = None
    cwd: str = ""
    settle: bool = False
    timing: bool = True
    cache: str | None = None

    @property
    def stream(self) -> str:
        return self.plan.stream

    @property
    def portions(self) -> int:
        """V, the stream's number of portions."""
        return self.plan.portions

    workers = portions  # the old name

    @property
    def processes(self) -> int:
        """N, the number of serving processes (or Ray actors)."""
        return len(self.urls)

    def portions_of(self, process: int) -> list[int]:
        """The portions process `process` serves: v with v % N == process."""
        return list(range(process, self.portions, self.processes))

    def connect(self, portion: int) -> Any:
        """Portion `portion`'s Connection: the URLs of the process serving it, its marker group (of V),
        its portion (stream, v, V)."""
        from tensorcom.transport.connection import Connection

        options = {key: value for key, value in self.options.items() if key != "linger"}
        return Connection(self.urls[portion % self.processes], group=self.stream if self.grouped else None,
                          group_size=self.portions if self.grouped else 1,
                          portion=(self.stream, portion, self.portions), **options)


def serve_portions(job: ServeJob, stop: Any, barrier: Any, index: int, gate: Gate | None = None) -> Iterator[tuple]:
    """Build process `index`'s portions of the pipeline (portion v as worker v of V), send them epoch
    by epoch, each on its own Connection tagged with its portion (yielding send_epochs's counts with
    the stage record of one StageClock that times every portion's pipeline and sends; without one
    when not job.timing),
    close the connections: their consumers read everything first (for at most options["linger"]
    seconds when not None), or Connection.close raises Undelivered, which fails the process. After a
    failure or a stop, what is queued is discarded. `gate` (workers="auto"): the barrier's
    portion_sending.Gate, which may end the run at an epoch boundary (the connections close as above)."""
    if job.cache is not None:
        from tensorcom.pipeline.cache import serve_in

        serve_in(job.cache)
    made = resolve(job.spec)
    linger = job.options.get("linger", DEFAULT_LINGER)
    lanes: list[Lane] = []
    clock = StageClock() if job.timing else None
    try:
        for portion in job.portions_of(index):
            shard = made.shard(portion, job.portions)
            lanes.append(Lane(portion, shard if clock is None else timed(shard, clock), job.connect(portion)))
        yield from send_epochs(lanes, job.epochs, job.plan.epoch, stop, barrier, job.plan.taken, clock, gate)
    except BaseException:
        linger = 0.0
        raise
    finally:
        for lane in lanes:
            lane.source.close()
            lane.conn.close(linger=0.0 if stop.is_set() else linger)


def serve(pipeline: Any, urls: Any, *, workers: int | str | None = None, epochs: int | None = 1, first_epoch: int = 0,
          report: float | None = 10.0, on_report: Callable[[dict], None] | None = None,
          connection_options: dict | None = None, linger: float | None = DEFAULT_LINGER, resume: Any = None,
          min_consumers: int = 1, sharing: dict | None = None, curve: Any = None, portions: int | None = None,
          metrics: str | None = None, min_workers: int | None = None, max_workers: int | None = None,
          scaler: Any = None, timing: bool | None = None, cache: str | None = None) -> dict:
    """Serve `pipeline` from `workers` processes to `urls` (rules in the module docstring; zshare://
    and zsplit:// URLs: tensorcom.pipeline.shared_serving).

    pipeline: Pipeline, "module:function", or callable returning a Pipeline. workers: processes, default
    one per binding URL, else 1 (at most `portions` run). portions: V, the stream's portions (default:
    workers). epochs: how many epochs (None: forever), numbered from `first_epoch`.
    workers="auto": workers that scale themselves (see auto_scaling): from `min_workers` (default 1)
    to `max_workers` (default os.cpu_count(), at most V) processes, V = `portions` or max_workers,
    the number changing only at epoch boundaries; `scaler`: what decides (default an
    tensorcom.pipeline.autoscale.Autoscaler), connecting or sharing URLs only.
    resume: a consumer's `Connection.state_dict()` (or the path of the JSON file `save_state` wrote;
    `merge_states` of a zsplit job's ranks): serve only what the consumers have not had, from their
    epoch on (the epochs before it count towards `epochs`), as the same stream with the same V
    portions, from any number of processes (see resume_plan).
    report: seconds between rate reports (None or 0: none); on_report(stats) replaces the stderr line.
    connection_options: extra keyword arguments for each worker's Connection (e.g. sndhwm, timeout);
    allow64 defaults to True here, since collated Python ints are int64 (pass False to refuse them).
    linger: how long a finished worker waits for its consumers to read what it sent (None: as long as
    they are connected); a worker whose consumers did not get everything (gone, or `linger` passed)
    fails with Undelivered saying how many batches, so serve raises WorkerError.
    min_consumers (sharing URLs): wait for that many consumers before the first batch; sharing:
    further options of the sharing server (replay, policy, liveness). curve: CURVE keys for what the
    consumers connect to (tensorcom.transport.security.Curve; default: $TENSORCOM_CURVE_*).
    metrics: "HOST:PORT" (port 0: a free one) to serve /metrics, /status.json and a status page while
    it runs (tensorcom.pipeline.observe; docs/observability.md).
    timing: whether the processes time their stages (default: tensorcom.settings.timing(), on unless
    $TENSORCOM_TIMING=0); off, the reports have no stages and the verdict rests on the consumers'
    data wait alone (known to a sharing server; the consumers always measure it). workers="auto"
    always times: its autoscaler reads the processes' idle and busy shares from the stage times.
    cache: the directory of the pipeline's `cache(None)` stages (decoded images, tensorcom.pipeline.cache).
    Returns {"batches", "samples", "seconds", ...} when every worker has finished (and, sharing, every
    consumer has everything: "consumers" reports each); raises WorkerError / WorkerDied when one fails,
    TransportError when a sharing server could not deliver everything.
    """
    if workers != "auto" and workers is not None:
        positive("workers", workers)
    if workers != "auto" and (min_workers is not None or max_workers is not None or scaler is not None):
        raise ValueError(f"min_workers, max_workers and scaler go with workers='auto', not workers={workers!r}")
    if epochs is not None:
        positive("epochs", epochs)
    check_spec(pipeline)
    hub = open_hub(urls, min_consumers=min_consumers, sharing=sharing, curve=curve,
                   make_pipeline=functools.partial(resolve, pipeline))
    if hub is None and curve is not None:
        connection_options = {**(connection_options or {}), "curve": curve}
    try:
        return _serve_to(pipeline, hub.worker_url if hub else urls, hub, workers=workers, epochs=epochs,
                         first_epoch=first_epoch, report=report, on_report=on_report,
                         connection_options=connection_options, linger=linger, resume=resume,
                         portions=portions, metrics=metrics, timing=settings.timing() if timing is None else timing,
                         scaling=(min_workers, max_workers, scaler) if workers == "auto" else None,
                         cache=None if cache is None else os.fspath(cache))
    except BaseException:
        if hub is not None:
            hub.abort()
        raise


def _serve_to(pipeline: Any, urls: Any, hub: Any, *, workers: int | None, epochs: int | None, first_epoch: int,
              report: float | None, on_report: Callable[[dict], None] | None, connection_options: dict | None,
              linger: float | None, resume: Any, portions: int | None, metrics: str | None = None,
              scaling: tuple | None = None, timing: bool = True, cache: str | None = None) -> dict:
    """serve()'s body, sending to `urls` (a hub's worker URL when `hub` is not None); `scaling`:
    (min_workers, max_workers, scaler) for workers="auto"."""
    if scaling is not None:
        scaling, workers, portions = auto_scaling(*scaling, urls=urls, resume=resume, portions=portions)
    assigned, binds = assign_urls(urls, workers)
    plan = resume_plan(resume, len(assigned), first_epoch, epochs, portions)
    if binds and plan.portions != len(assigned):
        raise ValueError(f"{len(assigned)} binding URL(s) for a stream of {plan.portions} portions: each serving "
                         f"process binds one URL and serves one portion; give {plan.portions} URLs, or use a "
                         "connecting scheme (zpush, zrpub), with which any number of processes serves any portions")
    options = {"allow64": True, **(connection_options or {}), "linger": linger}
    job = ServeJob(assigned[:plan.portions], plan, options, grouped=not binds, spec=pipeline,
                   epochs=None if epochs is None else first_epoch + epochs - plan.epoch,
                   timing=timing or scaling is not None, cache=cache)  # workers="auto" reads the stage times
    supervisor = Supervisor(report, on_report, hub)
    from tensorcom.pipeline.observe import serve_metrics  # the parent's alone: no HTTP server in a worker

    endpoint = serve_metrics(metrics, supervisor, hub)  # reads the supervisor's figures at each request
    try:
        if scaling is None:
            supervisor.launch(functools.partial(serve_portions, job), job.processes)
            supervisor.wait()
        else:
            serve_scaled(supervisor, job, scaling)
        consumers = None if hub is None else finish_hub(hub, job.epochs)["consumers"]
        supervisor.maybe_report(force=True)
        stats = supervisor.stats(overall=True)
        return stats if consumers is None else {**stats, "consumers": consumers}
    finally:
        supervisor.close()
        if endpoint is not None:
            endpoint.close()


def auto_scaling(minimum: int | None, maximum: int | None, scaler: Any, *, urls: Any, resume: Any,
                 portions: int | None) -> tuple[Scaling, int, int]:
    """(the Scaling, the processes to start with, V) for workers="auto": V is `portions`, else the
    resumed state's, else `maximum` (default os.cpu_count()); from `minimum` to min(maximum, V,
    cores) processes run. ValueError for a bad minimum (also: above V or the cores) or maximum, or
    binding URLs (each binds for one process: their number cannot change)."""
    from tensorcom.pipeline.autoscale import Autoscaler, MachineIdle

    cores = os.cpu_count() or 1
    minimum = positive("min_workers", 1 if minimum is None else minimum)
    maximum = positive("max_workers", cores if maximum is None else maximum)
    if minimum > maximum:
        raise ValueError(f"workers='auto': min_workers={minimum} is above max_workers={maximum}")
    if assign_urls(urls, None)[1]:
        raise ValueError(f"workers='auto' needs connecting URLs (zpush, zrpub) or a sharing server (zshare, "
                         f"zsplit): a binding URL ({urls!r}) is bound by one process, so their number cannot change")
    resumed = None if resume is None else ResumePlan.from_state(resume)
    count = portions or (resumed.portions if resumed else maximum)
    if minimum > min(count, cores):
        raise ValueError(f"workers='auto': min_workers={minimum} is more than the stream's {count} portions or "
                         f"the machine's {cores} cores")
    ceiling = min(maximum, count, cores)
    scaler = scaler if scaler is not None else Autoscaler(minimum, ceiling, cores)
    return Scaling(scaler, minimum, ceiling, MachineIdle()), minimum, count


def serve_scaled(supervisor: Supervisor, job: ServeJob, scaling: Scaling) -> None:
    """Run `job` as sets of processes: each set serves whole epochs until `scaling` asks for another
    number (portion_sending.Gate: they all stop at the same epoch boundary, their connections closed
    once the consumers have everything), then `scaling.target` processes serve the same stream (same
    V, portions re-dealt v % N == i) from the next epoch. Returns when the epochs are served."""
    end = None if job.epochs is None else job.plan.epoch + job.epochs
    while True:
        gate = Gate(multiprocessing.get_context("spawn"))
        supervisor.launch(functools.partial(serve_portions, job, gate=gate), job.processes, action=gate)
        supervisor.wait(lambda: scaling.tick(supervisor, gate))
        following = gate.next_epoch
        if not gate.stopping or (end is not None and following >= end):
            return
        job = dataclasses.replace(job, urls=[job.urls[0]] * scaling.target,
                                  plan=dataclasses.replace(job.plan, epoch=following),
                                  epochs=None if end is None else end - following)


def resume_plan(resume: Any, workers: int, first_epoch: int, epochs: int | None,
                portions: int | None = None) -> ResumePlan:
    """The plan of a new stream (fresh id, `portions` portions, default one per serving process
    `workers`, nothing taken), or the one `resume` (a consumer state or its file) describes, whose
    number of portions any number of processes serves; ValueError when `portions` differs from the
    state's or the state has no epoch left to serve."""
    if portions is not None:
        positive("portions", portions)
    plan = None if resume is None else ResumePlan.from_state(resume)
    if plan is None:
        return ResumePlan(f"serve-{secrets.token_hex(6)}", portions or workers, first_epoch)
    if portions is not None and portions != plan.portions:
        raise ValueError(f"resume: stream {plan.stream} has {plan.portions} portions (the consumer state says so); "
                         f"portions={portions} cannot resume it (leave portions out)")
    if plan.epoch < first_epoch or (epochs is not None and plan.epoch >= first_epoch + epochs):
        served = f"{first_epoch} on" if epochs is None else f"{first_epoch} to {first_epoch + epochs - 1}"
        raise ValueError(f"resume: the consumer is in epoch {plan.epoch} of stream {plan.stream}, "
                         f"outside the epochs served ({served})")
    return plan
