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

Messages from workers to the parent (one multiprocessing queue): ("progress", i, batches, samples),
("done", i, batches, samples), ("error", i, text, traceback, key). The parent prints a rate line to
stderr every `report` seconds (or calls `on_report(stats)`), raises WorkerError when a worker fails
(with its traceback and sample key) and WorkerDied when one dies silently; either way, and on Ctrl-C,
it stops every worker before returning. Workers watch the parent and exit when it disappears.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import queue
import secrets
import signal
import sys
import time
import traceback
from typing import Any, Callable

from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline._pipeline import Pipeline
from tensorcom.pipeline.workers import (
    check_picklable,
    describe_exit,
    join_or_kill,
    watch_parent,
)
from tensorcom.transport.batches import batch_size

PROGRESS_INTERVAL = 0.25  # seconds between a worker's progress messages
DEFAULT_LINGER = 10.0  # seconds a finished worker waits for its last messages to leave


def load_factory(spec: str) -> Callable[[], Pipeline]:
    """The function named by "package.module:function"; ValueError when the name does not resolve.
    As `python -m` does, the current directory is put on sys.path first (spawned workers inherit it)."""
    module_name, colon, name = spec.partition(":")
    if not colon or not module_name or not name:
        raise ValueError(f"a pipeline factory must be written MODULE:FUNCTION, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load pipeline factory {spec!r}: {exc}") from exc
    if not callable(target):
        raise ValueError(f"pipeline factory {spec!r} is not callable")
    return target


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
            raise ValueError(f"{e.url}: {e.scheme}:// is the sharing protocol; serve sends with Connection "
                             "schemes (zpush, zrpush, zpub, zrpub)")
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
    """A worker's counts, posted to the parent at most every PROGRESS_INTERVAL seconds."""

    def __init__(self, index: int, messages: Any):
        self.index, self.messages = index, messages
        self.batches = self.samples = 0
        self.last = time.monotonic()

    def add(self, batch: Any) -> None:
        self.batches, self.samples = self.batches + 1, self.samples + _samples_in(batch)
        if time.monotonic() - self.last > PROGRESS_INTERVAL:
            self.post("progress")

    def post(self, kind: str) -> None:
        self.messages.put((kind, self.index, self.batches, self.samples))
        self.last = time.monotonic()


def send_epochs(pipeline: Pipeline, conn: Any, epochs: int | None, first_epoch: int, progress: _Progress,
                stop: Any, barrier: Any) -> None:
    """Send each epoch's batches then an end-of-epoch marker; after each marker wait at `barrier` for
    the other workers, so that no worker's next epoch overtakes another's marker."""
    epoch = first_epoch
    while (epochs is None or epoch < first_epoch + epochs) and not stop.is_set():
        pipeline.set_epoch(epoch)
        for batch in pipeline:
            if stop.is_set():
                return
            conn.send(batch)
            progress.add(batch)
        conn.end_epoch()
        progress.post("progress")  # an epoch's counts reach the report even if the next send blocks
        barrier.wait()
        epoch += 1


def serve_worker(spec: Any, index: int, count: int, urls: list[str], group: str | None, group_size: int,
                 options: dict, epochs: int | None, first_epoch: int, messages: Any, stop: Any, barrier: Any,
                 parent_pid: int) -> None:
    """Body of serving process `index` of `count`: build the pipeline, send its share epoch by epoch,
    close the connection (letting queued messages leave for up to options["linger"] seconds)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)
    progress = _Progress(index, messages)
    try:
        from tensorcom.transport.connection import Connection

        pipeline = resolve(spec).shard(index, count)
        options = dict(options)
        linger = options.pop("linger", DEFAULT_LINGER)
        conn = Connection(urls, group=group, group_size=group_size, **options)
        try:
            send_epochs(pipeline, conn, epochs, first_epoch, progress, stop, barrier)
        finally:
            pipeline.close()
            conn.close(linger=0.0 if stop.is_set() else linger)
        progress.post("done")
    except Exception as exc:
        key = exc.key if isinstance(exc, WorkerError) else getattr(exc, "tensorcom_key", None)
        messages.put(("error", index, repr(exc), traceback.format_exc(), key))
        messages.close()
        messages.join_thread()
        os._exit(1)


class _Supervisor:
    """The parent's side: starts the workers, reads their messages, reports, and stops them."""

    def __init__(self, report: float | None, on_report: Callable[[dict], None] | None):
        self.ctx = multiprocessing.get_context("spawn")
        self.messages = self.ctx.Queue()
        self.stop = self.ctx.Event()
        self.barrier: Any = None
        self.procs: list = []
        self.counts: dict[int, tuple[int, int]] = {}
        self.done: set[int] = set()
        self.report, self.on_report = report, on_report
        self.start = self.last_time = time.monotonic()
        self.last_counts = (0, 0)

    def launch(self, args_for: Callable[[int], tuple], count: int) -> None:
        self.barrier = self.ctx.Barrier(count)
        for i in range(count):
            proc = self.ctx.Process(target=serve_worker, args=args_for(i), name=f"tensorcom-serve-{i}")
            proc.start()
            self.procs.append(proc)

    def totals(self) -> tuple[int, int]:
        return sum(b for b, _ in self.counts.values()), sum(s for _, s in self.counts.values())

    def handle(self, message: tuple) -> None:
        kind, index = message[0], message[1]
        if kind == "error":
            _, _, text, remote_tb, key = message
            raise WorkerError(f"serving worker {index} raised {text}", remote_tb, key)
        self.counts[index] = (message[2], message[3])
        if kind == "done":
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
                raise WorkerDied(f"serving worker {index} (pid {proc.pid}) {describe_exit(proc.exitcode)}")

    def stats(self, overall: bool = False) -> dict:
        """Totals, and rates since the last report (since the start when `overall`)."""
        now = time.monotonic()
        batches, samples = self.totals()
        since, (b0, s0) = (self.start, (0, 0)) if overall else (self.last_time, self.last_counts)
        span = max(now - since, 1e-9)
        return {"batches": batches, "samples": samples, "seconds": now - self.start,
                "batches_per_s": (batches - b0) / span, "samples_per_s": (samples - s0) / span,
                "workers": len(self.procs)}

    def maybe_report(self, force: bool = False) -> None:
        if not self.report or (not force and time.monotonic() - self.last_time < self.report):
            return
        stats = self.stats()
        if self.on_report is not None:
            self.on_report(stats)
        else:
            print(f"serve: {stats['batches_per_s']:.1f} batches/s, {stats['samples_per_s']:.1f} samples/s "
                  f"(total {stats['batches']} batches, {stats['samples']} samples, {stats['workers']} workers)",
                  file=sys.stderr, flush=True)
        self.last_time, self.last_counts = time.monotonic(), (stats["batches"], stats["samples"])

    def close(self) -> None:
        """Stop every worker: ask, wait up to 2 s, terminate, then kill."""
        self.stop.set()
        if self.barrier is not None:
            self.barrier.abort()
        join_or_kill(self.procs, grace=2.0)
        self.messages.cancel_join_thread()
        self.messages.close()


def serve(pipeline: Any, urls: Any, *, workers: int | None = None, epochs: int | None = 1, first_epoch: int = 0,
          report: float | None = 10.0, on_report: Callable[[dict], None] | None = None,
          connection_options: dict | None = None, linger: float = DEFAULT_LINGER) -> dict:
    """Serve `pipeline` from `workers` processes to `urls` (rules in the module docstring).

    pipeline: Pipeline, "module:function", or callable returning a Pipeline. workers: default one per
    binding URL, else 1. epochs: how many epochs (None: forever), numbered from `first_epoch`.
    report: seconds between rate reports (None or 0: none); on_report(stats) replaces the stderr line.
    connection_options: extra keyword arguments for each worker's Connection (e.g. sndhwm, timeout);
    allow64 defaults to True here, since collated Python ints are int64 (pass False to refuse them).
    linger: seconds a finished worker lets its last queued messages leave before it closes.
    Returns {"batches", "samples", "seconds", ...} when every worker has finished; raises WorkerError /
    WorkerDied when one fails.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise ValueError(f"epochs must be a positive integer or None, got {epochs!r}")
    check_spec(pipeline)
    assigned, binds = assign_urls(urls, workers)
    count = len(assigned)
    group = None if binds else f"serve-{secrets.token_hex(6)}"
    group_size = 1 if binds else count
    options = {"allow64": True, **(connection_options or {}), "linger": linger}
    supervisor = _Supervisor(report, on_report)
    try:
        supervisor.launch(lambda i: (pipeline, i, count, assigned[i], group, group_size, options, epochs,
                                     first_epoch, supervisor.messages, supervisor.stop, supervisor.barrier,
                                     os.getpid()), count)
        supervisor.wait()
        supervisor.maybe_report(force=True)
        return supervisor.stats(overall=True)
    finally:
        supervisor.close()
