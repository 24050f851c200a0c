"""Parallel map on threads or processes, and prefetch; bounded buffers, no hangs, no orphans.

    parallel_map(source, fn, workers=N, processes=False, ordered=True, buffer=None, rng_key=None)
    WorkerPool(fn, N, processes).map(source, ...)   the same, with workers kept for the next map
    WorkerPool(fn, N, processes, capacity=M).resize(n)   M workers, n of them computing at once
    prefetching(source, size)
    serial_map(source, fn)   the map in the caller's thread, failing as a worker would

Messages. Every worker runs the one worker loop (tensorcom.pipeline._loop). The consumer (a
generator from `WorkerPool.map`) puts tasks `((generation, position), position, (generation,
position, sample, rng_key))` on an input queue (the payload pickled here for processes); the loop
answers `("item", (generation, position), result)` or `("error", ..., Failure)` (no "end":
one task, one answer) — on a queue for threads, on its own pipe for processes (the process owner,
tensorcom.pipeline.processes). Each
map bumps the pool's generation, so tasks left by a consumer that gave up are skipped and their
results ignored. At most `buffer` samples are between the source and the consumer at any time, so
memory stays bounded whatever the speed of either side. `prefetching` runs the same loop in a thread
on one task, its source.

Shutdown. Workers start on the first `next()`, never before. `parallel_map` owns its pool: whatever
ends the iteration (exhaustion, `break`/`close()`, an exception, Ctrl-C) sets the stop event and joins
the workers; processes still alive a second later are terminated, then killed. A `WorkerPool` keeps
its workers between maps until `close()` or until it is garbage-collected (a weakref finalizer), and
closes itself when a map fails. Worker processes are started with the *spawn* context (never fork:
the parent may hold sockets and threads), ignore SIGINT (the parent decides), and exit by themselves
within a fraction of a second when their parent process disappears (tensorcom.pipeline._watch), so
even a SIGKILL of the parent leaves no orphan.

Errors. A failing `fn` becomes `errors.WorkerError` in the consumer (from the worker's
_failure.Failure: its traceback and the sample's `__key__`); with ordered=True the first failure in
source order is raised, after every result before it, as a sequential map would. A worker process
that dies without reporting (signal, os._exit) becomes `errors.WorkerDied` naming its exit status or
signal as soon as its pipe closes.
"""

from __future__ import annotations

import functools
import pickle
import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator

from tensorcom.errors import WorkerError
from tensorcom.pipeline._failure import Failure
from tensorcom.pipeline._loop import POLL, one_task, worker_loop
from tensorcom.pipeline.processes import Entry, Processes, Threads
from tensorcom.pipeline.stages import RngKey, call, sample_key


class Generation:
    """The pool's current generation, for thread workers (processes share a RawValue instead)."""

    value = 0


def map_task(fn: Callable, current: Any, payload: Any) -> tuple:
    """The work of a map worker for one task: (fn(sample),), or () when the task's generation is no
    longer `current.value`. A payload from the parent of a process arrives pickled."""
    generation, position, sample, rng_key = pickle.loads(payload) if isinstance(payload, bytes) else payload
    return (call(fn, sample, rng_key, position),) if generation == current.value else ()


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
    """Running map workers, threads or spawned processes (tensorcom.pipeline.processes), and the
    queues they share: tasks in; answers out on one queue (threads) or each worker's pipe."""

    def __init__(self, fn: Callable, count: int, processes: bool):
        self.processes = processes
        self.owner: Any
        if processes:
            self.owner = Processes("map worker", count, ends=False)
            self.inq, self.current = self.owner.ctx.Queue(), self.owner.ctx.RawValue("q", 0)
            self.owner.start(Entry(functools.partial(map_task, fn, self.current), inbox=self.inq, ends=False),
                             shared=[self.inq], name="tensorcom-map")
            return
        self.inq, self.outq, self.current = queue.Queue(), queue.Queue(), Generation()
        self.owner = Threads("map worker", count, functools.partial(map_task, fn, self.current),
                             lambda i: self.inq, lambda i: self.outq, ends=False, name="tensorcom-map")

    @property
    def closed(self) -> bool:
        return self.owner.closed

    def put(self, generation: int, position: int, sample: Any, rng_key: RngKey | None) -> None:
        """Queue one task; for processes its payload is pickled here, so a bad sample fails in the caller."""
        payload: Any = (generation, position, sample, rng_key)
        if self.processes:
            try:
                payload = pickle.dumps(payload, pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise WorkerError(f"sample {position} cannot be sent to a worker process: {exc!r}",
                                  key=sample_key(sample)) from exc
        self.inq.put(((generation, position), position, payload))

    def get(self) -> tuple:
        """The next answer; WorkerDied when a worker ended without answering."""
        return self.owner.next()

    def close(self) -> None:
        """Stop every worker and wait for it; processes still alive after ~1 s are terminated, then killed."""
        self.owner.close()
        if self.processes:
            self.inq.cancel_join_thread()
            self.inq.close()


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

    def __init__(self, fn: Callable, workers: int, processes: bool = False, capacity: int | None = None):
        check_sizes(workers, None)
        if processes:
            check_picklable(fn, "map function")
        self.fn, self.size, self.processes = fn, workers, processes
        if capacity is not None:
            check_sizes(capacity, None)
        self.capacity = workers if capacity is None else capacity
        self.resize(workers)
        self.busy = False
        self.tuner: Callable[[WorkerPool, float], None] | None = None  # autoscale.Tuner: tuner(pool, waited)
        self.waited = 0.0  # seconds the maps' consumers waited for results (measured with a tuner only)
        self._workers: _Workers | None = None
        self._finalizer: Any = None

    def resize(self, workers: int) -> None:
        """Let `workers` (1..capacity) of the pool's workers compute at once, from the next task on,
        during a map too. The pool starts `capacity` workers; below it, at most `workers` tasks are
        in their hands (the others wait on the task queue, using no CPU), so a shrink lets the
        tasks in flight finish and a grow hands out more: results, their order and their values are
        those of any other size."""
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= self.capacity:
            raise ValueError(f"workers must be from 1 to the pool's capacity {self.capacity}, got {workers!r}")
        self.size = workers

    def map(self, source: Iterable, *, ordered: bool = True, buffer: int | None = None,
            rng_key: RngKey | None = None) -> Iterator:
        """Yield fn(sample) for each sample of `source` (see `parallel_map`)."""
        return self._map(source, ordered, check_sizes(self.size, buffer), rng_key, buffer is None)

    def _map(self, source: Iterable, ordered: bool, buffer: int, rng_key: RngKey | None,
             follow: bool = False) -> Iterator:
        if self.busy:
            raise RuntimeError("this WorkerPool is already running a map; finish or close that one first")
        self.busy = True
        try:
            if self._workers is None or self._workers.closed:
                self._workers = _Workers(self.fn, self.capacity, self.processes)
                self._finalizer = weakref.finalize(self, self._workers.close)
            self._workers.current.value += 1
            yield from _drive(iter(source), self._workers, buffer, ordered, rng_key, self, follow)
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


def serial_map(source: Iterable, fn: Callable) -> Iterator:
    """Yield fn(sample) for each sample of `source` in the caller's thread; a failure is raised as
    the WorkerError a map worker's would be (with traceback, key and the exception as its cause)."""
    for sample in source:
        try:
            result = call(fn, sample, None, 0)
        except Exception as exc:
            raise Failure.capture(exc).error("map") from exc
        yield result


def _owned(pool: WorkerPool, results: Iterator) -> Iterator:
    try:
        yield from results
    finally:
        results.close()
        pool.close()


def _drive(samples: Iterator, workers: _Workers, buffer: int, ordered: bool, rng_key: RngKey | None,
           pool: WorkerPool | None = None, follow: bool = False) -> Iterator:
    """Feed `workers` from `samples` keeping at most `buffer` outstanding; yield results. A failure
    is raised in its turn when ordered (after every result before it), at once otherwise. With the
    `pool` the workers belong to: the buffer 2 × pool.size when `follow`, at most pool.size tasks in
    the workers' hands while it is below its capacity, and with its tuner, the wait for results
    measured and the tuner called after each."""
    generation = workers.current.value
    submitted = received = yielded = 0
    pending: dict[int, tuple] = {}
    exhausted = False
    while True:
        size = pool.size if pool is not None else buffer
        buffer = 2 * size if follow else buffer
        hands = size if pool is not None and size < pool.capacity else buffer
        while not exhausted and submitted - yielded < buffer and submitted - received < hands:
            try:
                workers.put(generation, submitted, next(samples), rng_key)
                submitted += 1
            except StopIteration:
                exhausted = True
        if received == submitted:
            return
        if pool is None or pool.tuner is None:
            kind, (answer_generation, position), value = workers.get()
        else:
            began = time.perf_counter()
            kind, (answer_generation, position), value = workers.get()
            pool.waited += time.perf_counter() - began
            pool.tuner(pool, pool.waited)
        if answer_generation != generation:
            continue  # left over from an earlier map that was abandoned
        received += 1
        pending[position if ordered else yielded] = (kind, value)
        while yielded in pending:
            kind, value = pending.pop(yielded)
            yielded += 1
            if kind == "error":
                raise value.error("map worker")
            yield value


def prefetching(source: Iterable, size: int) -> Iterator:
    """Yield the items of `source`, produced ahead by a worker loop on a background thread into a
    queue of `size`; an exception of the source is re-raised here as it was. The thread closes the
    source when done; closing this generator stops and joins the thread."""
    if size < 1:
        raise ValueError(f"prefetch size must be at least 1, got {size!r}")
    outq: queue.Queue = queue.Queue(size)
    stop = threading.Event()
    thread = threading.Thread(target=worker_loop, args=(iter, one_task(iter(source)), outq, stop, 0), daemon=True,
                              name="tensorcom-prefetch")
    thread.start()
    try:
        while True:
            try:
                kind, _, value = outq.get(timeout=POLL)
            except queue.Empty:
                if not thread.is_alive() and outq.empty():
                    raise RuntimeError("the prefetch thread ended without finishing its source") from None
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value.cause if value.cause is not None else value.error("prefetch worker")
            yield value
    finally:
        stop.set()
        thread.join(timeout=5.0)
