"""Whole pipeline portions in worker threads or spawned processes, handing back finished items (batches).

    shard_parallel(make, workers=N, processes=True, buffer=2, init=None)
    PortionPool(workers, buffer=2, init=None).run(make, count)   the same on processes kept across epochs

`make(i, n)` is a picklable callable returning the iterator of portion `i` of `n` (for a Pipeline: its
upstream stages on `shard(i, n)`); each worker runs one portion from the source through maps and
batching, as a torch DataLoader worker does, so only finished items (typically batches) cross the
process boundary: once each, pickle protocol 5 with out-of-band buffers over a pipe of its own
(the process owner, tensorcom.pipeline.processes), so a batch of arrays is copied once into the pipe
and once out of it.

Order. Items are taken round-robin: item 0 of worker 0, item 0 of worker 1, ..., item 1 of worker
0, ...; a worker whose portion is exhausted drops out of the rotation. The order is therefore a pure
function of the portions, the same with threads (processes=False) as with processes.

Messages. Each worker runs the one worker loop (tensorcom.pipeline._loop) on a single task, its
portion: ("item", i, x) for each item, then ("end", i, count) or ("error", i, Failure). A worker
process computes ahead by at most `buffer` items (a _pipes.BufferedSender: a bounded queue drained
by a thread that pickles and writes), so memory stays bounded whatever the consumer's speed.

Shutdown. Workers start on the first next(); whatever ends the iteration (exhaustion, `close()`, an
exception) sets the stop event and joins them; processes still alive a second later are terminated,
then killed (tensorcom.pipeline.processes: spawned, never forked; gone with their parent). A failing
portion raises errors.WorkerError with the worker's traceback and the sample key when known; a
process that dies without a word raises errors.WorkerDied once the consumer waits on it.

Pools. A PortionPool's processes start on the first run and then serve one portion task after
another (an epoch each, from a queue of their own) until the pool is closed, garbage-collected, or a
run ends early (the consumer closed it, or it failed). A child that finishes its portion of an
epoch goes on at once with the same portion of `make.following()` (the next epoch from its start),
so that epoch's first items are ready when the consumer asks; a run that asks for anything else
raises the pool's generation (a shared counter), the children drop what they started ahead at the
next item, and their leftovers are skipped. Children see their parent's death as any other's.
"""

from __future__ import annotations

import pickle
import queue
import weakref
from collections import deque
from typing import Any, Callable, Iterator

from tensorcom.pipeline._loop import one_task
from tensorcom.pipeline.processes import Entry, Processes, Threads
from tensorcom.pipeline.workers import check_picklable, check_sizes


class _Portion:
    """The work of portion worker `ident` of `count`: its payload is `ident`, its values make(ident, count)."""

    def __init__(self, make: Callable, count: int):
        self.make, self.count = make, count

    def __call__(self, ident: int) -> Any:
        return self.make(ident, self.count)


def _start(make: Callable, count: int, processes: bool, buffer: int, init: Callable | None) -> Processes | Threads:
    """The running portion workers: spawned processes, each answering on its pipe, or threads, each
    on a queue of `buffer` (tensorcom.pipeline.processes)."""
    if processes:
        owner = Processes("portion worker", count)
        owner.start(Entry(_Portion(make, count), buffer=buffer, init=init, unit="portion"), name="tensorcom-portion")
        return owner
    queues = [queue.Queue(buffer) for _ in range(count)]
    return Threads("portion worker", count, _Portion(make, count), lambda i: one_task(i, tag=i), queues.__getitem__,
                   name="tensorcom-portion")


def shard_parallel(make: Callable[[int, int], Any], *, workers: int, processes: bool = True, buffer: int = 2,
                   init: Callable[[], Any] | None = None) -> Iterator:
    """Yield the items of portions 0..workers-1 of `make(i, workers)`, round-robin, each portion computed
    by a thread or (processes=True) a spawned process that starts on the first next(). Each worker
    runs ahead by at most `buffer` items; `init()` runs first in each worker process (not in
    threads). Raises WorkerError / WorkerDied as the module docstring says."""
    check_sizes(workers, buffer)
    if processes:
        check_picklable(make, "portion function")
        if init is not None:
            check_picklable(init, "init function")
    return _rotate(make, workers, processes, buffer, init)


def _rotate(make: Callable, workers: int, processes: bool, buffer: int, init: Callable | None) -> Iterator:
    portions = _start(make, workers, processes, buffer, init)
    try:
        turn = deque(range(workers))
        while turn:
            kind, _, value = portions.next(turn[0])
            if kind == "item":
                yield value
                turn.rotate(-1)
            elif kind == "end":
                turn.popleft()
            else:
                raise value.error("portion worker")
    finally:
        portions.close()


class _Tasks:
    """The work of a pooled portion worker (runs in the child, a single task: its index `ident`):
    take (generation, pickled (make, count)) tasks from its own inbox, and for each yield
    ("item", generation, value) for the values of make(ident, count), then ("done", generation, n),
    stopping early once the pool's generation has passed the task's; return on a None task."""

    def __init__(self, inboxes: list, current: Any):
        self.inboxes, self.current = inboxes, current

    def __call__(self, ident: int) -> Iterator[tuple]:
        while (task := self.inboxes[ident].get()) is not None:
            generation, payload = task
            make, count = pickle.loads(payload)
            values, sent = iter(make(ident, count)), 0
            try:
                for value in values:
                    if self.current.value > generation:
                        break  # started ahead for a run that did not come
                    yield "item", generation, value
                    sent += 1
            finally:
                getattr(values, "close", lambda: None)()
            yield "done", generation, sent


class PortionPool:
    """`workers` portion worker processes kept across runs (module docstring: Pools). `run(make,
    count)` yields what shard_parallel(make, workers=count) would, round-robin, with count <= workers;
    `make` may offer `following()` (the maker of the next run, to start ahead) and `key()` (what
    makes two makers the same run). One run at a time (`busy`); close() stops the processes."""

    def __init__(self, workers: int, buffer: int = 2, init: Callable[[], Any] | None = None):
        self.size, self.buffer = workers, check_sizes(workers, buffer)
        self.init = init
        if init is not None:
            check_picklable(init, "init function")
        self.busy = False
        self.owner: Processes | None = None
        self.ahead: Any = None  # the key of the run the children started ahead
        self._finalizer: Any = None

    def _start(self) -> Processes:
        if self.owner is None or self.owner.closed:
            owner = Processes("portion worker", self.size)
            inboxes = [owner.ctx.Queue() for _ in range(self.size)]
            self.current, self.inboxes, self.ahead = owner.ctx.RawValue("q", 0), inboxes, None
            entry = Entry(_Tasks(inboxes, self.current), first=None, buffer=self.buffer, init=self.init, unit="portion")
            self.owner = owner
            self._finalizer = weakref.finalize(self, _stop_pool, owner, inboxes)
            owner.start(entry, shared=inboxes, name="tensorcom-portion")
        return self.owner

    def _queue(self, generation: int, payload: bytes, slots: range) -> None:
        for slot in slots:
            self.inboxes[slot].put((generation, payload))

    def run(self, make: Callable, count: int) -> Iterator:
        if self.busy:
            raise RuntimeError("this PortionPool is already running; finish or close that run first")
        if not 1 <= count <= self.size:
            raise ValueError(f"a run of {count} portions on a pool of {self.size}")
        self.busy = True
        return self._run(make, count)

    def _run(self, make: Callable, count: int) -> Iterator:
        finished = False
        try:
            owner = self._start()
            key = getattr(make, "key", lambda: None)()
            if key is None or key != self.ahead:
                self.current.value += 2  # whatever was started ahead is dropped
                self._queue(self.current.value, _task(make, count), range(count))
            else:
                self.current.value += 1  # the run started ahead is this one
            generation, self.ahead = self.current.value, None
            following = getattr(make, "following", lambda: None)() if count == self.size else None
            yield from self._rotate(owner, generation, count, following)
            self.ahead = None if following is None else following.key()
            finished = True
        finally:
            self.busy = False
            if not finished:
                self.close()

    def _rotate(self, owner: Processes, generation: int, count: int, following: Any) -> Iterator:
        """The items of run `generation`, round-robin; each child whose portion ends is given
        `following` (when not None) at once."""
        turn, payload = deque(range(count)), None
        while turn:
            slot = turn[0]
            kind, _, value = owner.next(slot)
            if kind != "item":
                raise value.error("portion worker") if kind == "error" else RuntimeError("a portion worker quit")
            what, made, item = value
            if made != generation:
                continue  # left over from a run started ahead and dropped
            if what == "item":
                yield item
                turn.rotate(-1)
                continue
            turn.popleft()
            if following is not None:
                payload = payload or _task(following, count)
                self._queue(generation + 1, payload, range(slot, slot + 1))

    def close(self) -> None:
        """Stop the processes (a later run starts new ones)."""
        if self._finalizer is not None:
            self._finalizer()


def _task(make: Callable, count: int) -> bytes:
    """The pickled task (make, count); check_picklable's TypeError when make cannot be pickled."""
    try:
        return pickle.dumps((make, count), pickle.HIGHEST_PROTOCOL)
    except Exception:
        check_picklable(make, "portion function")
        raise


def _stop_pool(owner: Processes, inboxes: list) -> None:
    for inbox in inboxes:
        inbox.put(None)
    owner.close()
    for inbox in inboxes:
        inbox.cancel_join_thread()
        inbox.close()
