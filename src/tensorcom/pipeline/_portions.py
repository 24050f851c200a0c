"""Whole pipeline portions in worker threads or spawned processes, handing back finished items (batches).

    shard_parallel(make, workers=N, processes=True, buffer=2, init=None)

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
"""

from __future__ import annotations

import queue
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
