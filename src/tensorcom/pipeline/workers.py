"""Parallel map on threads or processes, and prefetch; bounded buffers, no hangs, no orphans.

    parallel_map(source, fn, workers=N, processes=False, ordered=True, buffer=None, rng_key=None)
    WorkerPool(fn, N, processes).map(source, ...)   the same, with workers kept for the next map
    prefetching(source, size)

Messages. The consumer (a generator from `WorkerPool.map`) puts tasks `(generation, position,
sample, rng_key)` on an input queue; each worker runs `worker_loop`, which answers
`(generation, position, True, result)` or `(generation, position, False, failure)`, where
`failure` is `(worker, repr, traceback text, sample key, exception or None)` — on a queue for
threads, on its own pipe for processes (tensorcom.pipeline._pipes). Each map bumps the pool's generation,
so tasks left by a consumer that gave up are skipped and their results ignored. At most `buffer`
samples are between the source and the consumer at any time, so memory stays bounded whatever the
speed of either side.

Shutdown. Workers start on the first `next()`, never before. `parallel_map` owns its pool: whatever
ends the iteration (exhaustion, `break`/`close()`, an exception, Ctrl-C) sets the stop event and joins
the workers; processes still alive a second later are terminated, then killed. A `WorkerPool` keeps
its workers between maps until `close()` or until it is garbage-collected (a weakref finalizer), and
closes itself when a map fails. Worker processes are started
with the *spawn* context (never fork: the parent may hold sockets and threads), ignore SIGINT (the
parent decides), and exit by themselves within a fraction of a second when their parent process
disappears (a watchdog thread compares `os.getppid()`), so even a SIGKILL of the parent leaves no orphan.

Errors. A failing `fn` becomes `errors.WorkerError` in the consumer, carrying the worker's formatted
traceback and the sample's `__key__`; a worker process that dies without reporting (signal, os._exit)
becomes `errors.WorkerDied` within `poll` seconds.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Iterable, Iterator

from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline import _pipes as procpipe
from tensorcom.pipeline.stages import sample_key, sample_rng

RngKey = tuple[int, int, int, int]  # (seed, epoch, worker, stage); the position completes it
POLL = 0.1  # seconds between checks of stop events and worker liveness


def apply(fn: Callable, sample: Any, rng_key: RngKey | None, position: int) -> Any:
    """fn(sample), or fn(sample, rng) with the Generator for (rng_key, position) when rng_key is set."""
    if rng_key is None:
        return fn(sample)
    return fn(sample, sample_rng(*rng_key, position))


class Generation:
    """The pool's current generation, for thread workers (processes share a RawValue instead)."""

    value = 0


def worker_loop(fn: Callable, inq: Any, outq: Any, stop: Any, current: Any, ident: int, local: bool) -> None:
    """Take `(generation, position, sample, rng_key)` tasks from `inq` until `stop` is set; answer on
    `outq`; skip tasks whose generation is no longer `current.value`.

    The same loop runs in a thread (`local=True`: objects pass as they are, and a failure carries the
    exception itself) or in a process: there tasks arrive as pickled bytes and `outq` is a
    procpipe.PipeSender, which pickles in this thread, so an unpicklable result is reported as this
    sample's failure. A task of None also ends the loop.
    """
    while not stop.is_set():
        try:
            task = inq.get(timeout=POLL)
        except queue.Empty:
            continue
        if task is None:
            return
        generation, position, sample, rng_key = task if local else pickle.loads(task)
        if generation != current.value:
            continue
        try:
            outq.put((generation, position, True, apply(fn, sample, rng_key, position)))
        except Exception as exc:
            key = sample_key(sample) or getattr(exc, "tensorcom_key", None)
            failure = (ident, repr(exc), traceback.format_exc(), key, exc if local else None)
            outq.put((generation, position, False, failure))


def watch_parent(parent_pid: int, interval: float = 0.2) -> threading.Thread:
    """Start a daemon thread that ends this process (os._exit(1)) once `parent_pid` is no longer its parent."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=watch, name="tensorcom-parent-watch", daemon=True)
    thread.start()
    return thread


def process_main(fn: Callable, inq: Any, writer: Any, stop: Any, current: Any, ident: int, parent_pid: int) -> None:
    """Entry point of a worker process: ignore Ctrl-C, watch the parent, run `worker_loop` with
    results going to `writer` (this worker's pipe to the parent)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)
    worker_loop(fn, inq, procpipe.PipeSender(writer), stop, current, ident, local=False)


def check_picklable(obj: Any, what: str) -> None:
    """Raise TypeError (saying how to fix it) when `obj` cannot be sent to a spawned process."""
    try:
        pickle.dumps(obj)
    except Exception as exc:
        raise TypeError(
            f"{what} {obj!r} cannot be sent to a worker process ({exc}); use a module-level function "
            "or a picklable callable object, not a lambda or a nested function"
        ) from exc


class _Workers:
    """Running workers with their queues, pipes and stop event; threads or spawned processes."""

    def __init__(self, fn: Callable, count: int, processes: bool):
        self.processes = processes
        self.closed = False
        if processes:
            self._start_processes(fn, count)
            return
        self.inq, self.outq, self.stop, self.current = queue.Queue(), queue.Queue(), threading.Event(), Generation()
        self.workers = [
            threading.Thread(target=worker_loop, args=(fn, self.inq, self.outq, self.stop, self.current, i, True),
                             daemon=True, name=f"tensorcom-map-{i}")
            for i in range(count)
        ]
        for worker in self.workers:
            worker.start()

    def _start_processes(self, fn: Callable, count: int) -> None:
        """Spawn the workers; each writes its results to a pipe of its own (see tensorcom.pipeline._pipes)."""
        ctx = multiprocessing.get_context("spawn")
        self.inq, self.stop, self.current = ctx.Queue(), ctx.Event(), ctx.RawValue("q", 0)
        self.workers, readers = [], []
        for i in range(count):
            reader, writer = ctx.Pipe(duplex=False)
            procpipe.widen(writer)
            proc = ctx.Process(target=process_main, args=(fn, self.inq, writer, self.stop, self.current, i, os.getpid()),
                               daemon=True, name=f"tensorcom-map-{i}")
            proc.start()
            writer.close()  # the child holds it now; the parent sees EOF when the child is gone
            self.workers.append(proc)
            readers.append(reader)
        self.results = procpipe.ResultPipes(readers, [p.sentinel for p in self.workers], self.check_alive)

    def put(self, task: tuple) -> None:
        """Queue one task; for processes it is pickled here, so a bad sample fails in the caller."""
        if self.processes:
            try:
                task = pickle.dumps(task, pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise WorkerError(f"sample {task[1]} cannot be sent to a worker process: {exc!r}",
                                  key=sample_key(task[2])) from exc
        self.inq.put(task)

    def get(self) -> tuple:
        """The next answer; WorkerDied when a worker ended without answering."""
        while True:
            if not self.processes:
                try:
                    return self.outq.get(timeout=POLL)
                except queue.Empty:
                    self.check_alive()
                    continue
            try:
                message = self.results.get(POLL)
            except EOFError:
                for proc in self.workers:
                    proc.join(timeout=POLL)
                self.check_alive()
                raise WorkerDied("a map worker process closed its result pipe") from None
            if message is not None:
                return message

    def check_alive(self) -> None:
        for ident, worker in enumerate(self.workers):
            if not self.processes:
                if not worker.is_alive():
                    raise WorkerDied(f"map worker thread {ident} ended unexpectedly")
            elif worker.exitcode is not None:
                raise WorkerDied(f"map worker process {ident} (pid {worker.pid}) {describe_exit(worker.exitcode)}")

    def close(self) -> None:
        """Stop every worker and wait for it; processes still alive after ~1 s are terminated, then killed."""
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        join_or_kill(self.workers, grace=1.0, kill=self.processes)
        if self.processes:
            self.inq.cancel_join_thread()
            self.inq.close()
            self.results.close()


def _failure(failure: tuple) -> WorkerError:
    ident, text, remote_tb, key, exc = failure
    error = WorkerError(f"map worker {ident} raised {text}", remote_tb, key)
    error.__cause__ = exc
    return error


def check_sizes(workers: int, buffer: int | None) -> int:
    """Validate the worker count and return the buffer size (default 2 × workers)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    buffer = 2 * workers if buffer is None else buffer
    if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
        raise ValueError(f"buffer must be at least 1, got {buffer!r}")
    return buffer


class WorkerPool:
    """`fn` on `workers` threads, or spawned processes with processes=True; one map at a time, and
    the workers stay up between maps (started by the first map's first next()). close() stops them;
    so does garbage collection of the pool, and any failure of a map."""

    def __init__(self, fn: Callable, workers: int, processes: bool = False):
        check_sizes(workers, None)
        if processes:
            check_picklable(fn, "map function")
        self.fn, self.size, self.processes = fn, workers, processes
        self.busy = False
        self._workers: _Workers | None = None
        self._finalizer: Any = None

    def map(self, source: Iterable, *, ordered: bool = True, buffer: int | None = None,
            rng_key: RngKey | None = None) -> Iterator:
        """Yield fn(sample) for each sample of `source` (see `parallel_map`)."""
        return self._map(source, ordered, check_sizes(self.size, buffer), rng_key)

    def _map(self, source: Iterable, ordered: bool, buffer: int, rng_key: RngKey | None) -> Iterator:
        if self.busy:
            raise RuntimeError("this WorkerPool is already running a map; finish or close that one first")
        self.busy = True
        try:
            if self._workers is None or self._workers.closed:
                self._workers = _Workers(self.fn, self.size, self.processes)
                self._finalizer = weakref.finalize(self, self._workers.close)
            self._workers.current.value += 1
            yield from _drive(iter(source), self._workers, buffer, ordered, rng_key)
        except GeneratorExit:
            raise
        except BaseException:
            self.close()
            raise
        finally:
            self.busy = False
            if self._workers is not None and not self._workers.closed:
                self._workers.current.value += 1  # whatever is still queued is now stale

    def close(self) -> None:
        """Stop the workers (a later map starts new ones)."""
        if self._finalizer is not None:
            self._finalizer()


def parallel_map(source: Iterable, fn: Callable, *, workers: int, processes: bool = False, ordered: bool = True,
                 buffer: int | None = None, rng_key: RngKey | None = None) -> Iterator:
    """Yield fn(sample) for each sample of `source`, computed by `workers` threads or processes that
    start on the first next() and stop when the iteration ends.

    `ordered` keeps the source's order; otherwise results come as they finish. `buffer` (default
    2 × workers) bounds the samples taken from the source and not yet yielded. With `rng_key`, fn is
    called as fn(sample, rng) with `stages.sample_rng(*rng_key, position)`, the same in any worker.
    Raises WorkerError / WorkerDied as described in the module docstring.
    """
    pool = WorkerPool(fn, workers, processes)
    return _owned(pool, pool.map(source, ordered=ordered, buffer=buffer, rng_key=rng_key))


def _owned(pool: WorkerPool, results: Iterator) -> Iterator:
    try:
        yield from results
    finally:
        results.close()
        pool.close()


def _drive(samples: Iterator, workers: _Workers, buffer: int, ordered: bool, rng_key: RngKey | None) -> Iterator:
    """Feed `workers` from `samples` keeping at most `buffer` outstanding; yield results."""
    generation = workers.current.value
    submitted = received = yielded = 0
    pending: dict[int, Any] = {}
    exhausted = False
    while True:
        while not exhausted and submitted - yielded < buffer:
            try:
                workers.put((generation, submitted, next(samples), rng_key))
                submitted += 1
            except StopIteration:
                exhausted = True
        if received == submitted:
            return
        answer_generation, position, ok, value = workers.get()
        if answer_generation != generation:
            continue  # left over from an earlier map that was abandoned
        received += 1
        if not ok:
            raise _failure(value)
        if not ordered:
            yielded += 1
            yield value
            continue
        pending[position] = value
        while yielded in pending:
            item = pending.pop(yielded)
            yielded += 1
            yield item


def prefetch_loop(source: Iterator, outq: queue.Queue, stop: threading.Event) -> None:
    """Thread body for `prefetching`: put ("item", x) for each x of `source`, then ("end", None) or
    ("error", exc); gives up when `stop` is set. Closes `source` in this thread when done."""
    try:
        for item in source:
            if not put_unless_stopped(outq, ("item", item), stop):
                return
        put_unless_stopped(outq, ("end", None), stop)
    except BaseException as exc:  # handed to the consumer, which re-raises it
        put_unless_stopped(outq, ("error", exc), stop)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def join_or_kill(workers: list, grace: float, kill: bool = True) -> None:
    """Join threads or processes for up to `grace` seconds in all; with `kill`, processes still alive
    then are terminated, and killed if they outlive that by a second."""
    deadline = time.monotonic() + grace
    for worker in workers:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
    for proc in workers if kill else []:
        for action in (proc.terminate, proc.kill):
            if proc.is_alive():
                action()
                proc.join(timeout=1.0)


def describe_exit(code: int | None) -> str:
    """How a process with exit code `code` ended, for WorkerDied messages ("exited with status 1")."""
    if code is None:
        return "closed its pipe"
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


def put_unless_stopped(outq: queue.Queue, message: tuple, stop: Any) -> bool:
    """Put `message` on the bounded `outq`, giving up (False) once `stop` is set."""
    while not stop.is_set():
        try:
            outq.put(message, timeout=POLL)
            return True
        except queue.Full:
            continue
    return False


def prefetching(source: Iterable, size: int) -> Iterator:
    """Yield the items of `source`, produced ahead by a background thread into a queue of `size`."""
    if size < 1:
        raise ValueError(f"prefetch size must be at least 1, got {size!r}")
    outq: queue.Queue = queue.Queue(size)
    stop = threading.Event()
    thread = threading.Thread(target=prefetch_loop, args=(iter(source), outq, stop), daemon=True, name="tensorcom-prefetch")
    thread.start()
    try:
        while True:
            try:
                kind, value = outq.get(timeout=POLL)
            except queue.Empty:
                if not thread.is_alive() and outq.empty():
                    raise RuntimeError("the prefetch thread ended without finishing its source") from None
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join(timeout=5.0)
