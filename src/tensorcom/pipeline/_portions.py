"""Whole pipeline portions in worker threads or spawned processes, handing back finished items (batches).

    shard_parallel(make, workers=N, processes=True, buffer=2, init=None)

`make(i, n)` is a picklable callable returning the iterator of portion `i` of `n` (for a Pipeline: its
upstream stages on `shard(i, n)`); each worker runs one portion from the source through maps and
batching, as a torch DataLoader worker does, so only finished items (typically batches) cross the
process boundary: once each, pickle protocol 5 with out-of-band buffers over a pipe of its own
(tensorcom.pipeline._pipes), so a batch of arrays is copied once into the pipe and once out of it.

Order. Items are taken round-robin: item 0 of worker 0, item 0 of worker 1, ..., item 1 of worker
0, ...; a worker whose portion is exhausted drops out of the rotation. The order is therefore a pure
function of the portions, the same with threads (processes=False) as with processes.

Messages. Each worker runs the one worker loop (tensorcom.pipeline._loop) on a single task, its
portion: ("item", i, x) for each item, then ("end", i, count) or ("error", i, Failure). A worker
process computes ahead by at most `buffer` items (a _pipes.BufferedSender: a bounded queue drained
by a thread that pickles and writes), so memory stays bounded whatever the consumer's speed.

Shutdown. Workers start on the first next(); whatever ends the iteration (exhaustion, `close()`, an
exception) sets the stop event and joins them; processes still alive a second later are terminated,
then killed. Processes are spawned (never forked), ignore SIGINT, and leave by themselves when their
parent disappears (tensorcom.pipeline._watch). A failing portion raises errors.WorkerError with the
worker's traceback and the sample key when known; a process that dies without a word raises
errors.WorkerDied within _loop.POLL seconds of the consumer waiting on it.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
from collections import deque
from multiprocessing import connection as mpc
from typing import Any, Callable, Iterator

from tensorcom.pipeline import _pipes as procpipe
from tensorcom.pipeline._failure import Failure, died
from tensorcom.pipeline._loop import POLL, join_or_kill, one_task, worker_loop
from tensorcom.pipeline._semaphores import Handover
from tensorcom.pipeline._watch import enter_worker_process
from tensorcom.pipeline.workers import check_picklable, check_sizes


class _Portion:
    """The work of portion worker `ident` of `count`: its payload is `ident`, its values make(ident, count)."""

    def __init__(self, make: Callable, count: int):
        self.make, self.count = make, count

    def __call__(self, ident: int) -> Any:
        return self.make(ident, self.count)


def process_main(make: Callable, ident: int, count: int, writer: Any, stop: Any, buffer: int,
                 init: Callable[[], Any] | None, parent_pid: int) -> None:
    """Entry point of a worker process: ignore Ctrl-C, watch the parent, then run `init` and the
    portion through the worker loop, its messages leaving through a BufferedSender on `writer`."""
    enter_worker_process(parent_pid)

    def unsendable(exc: Exception, sent: int) -> tuple:
        what = f"cannot send item {sent} of portion {ident} to the parent: {exc!r}"
        return ("error", ident, Failure.capture(exc, ident, sent, message=what))

    sender = procpipe.BufferedSender(writer, buffer, stop, unsendable)
    work = _Portion(make, count)
    if init is not None:
        work = _after(init, work)
    worker_loop(work, one_task(ident, tag=ident), sender, stop, ident)
    sender.drain(stop)


def _after(init: Callable[[], Any], work: Callable) -> Callable:
    """`work`, with init() called first (so that a failing init is the portion's failure)."""

    def started(payload: Any) -> Any:
        init()
        return work(payload)

    return started


class _Portions:
    """Running portion workers (threads or spawned processes) and the consumer's ends of their outputs."""

    def __init__(self, make: Callable, count: int, processes: bool, buffer: int, init: Callable | None):
        self.processes, self.closed = processes, False
        if processes:
            ctx = multiprocessing.get_context("spawn")
            self.stop = ctx.Event()
            self.workers, self.readers = [], []
            handover = Handover(ctx, [self.stop])
            try:
                for i in range(count):
                    self._spawn(ctx, make, i, count, buffer, init, handover)
            except BaseException:
                self.close()  # e.g. the pipeline could not be pickled: stop those already started
                raise
            finally:
                handover.release()  # the stop event's names leave /dev/shm
            self.streams = [procpipe.stream_of(r) for r in self.readers]
            return
        self.stop = threading.Event()
        self.queues = [queue.Queue(buffer) for _ in range(count)]
        self.workers = [threading.Thread(target=worker_loop, daemon=True, name=f"tensorcom-portion-{i}",
                                         args=(_Portion(make, count), one_task(i, tag=i), self.queues[i], self.stop, i))
                        for i in range(count)]
        for worker in self.workers:
            worker.start()

    def _spawn(self, ctx: Any, make: Callable, ident: int, count: int, buffer: int, init: Callable | None,
               handover: Handover) -> None:
        """Start worker process `ident` with a pipe of its own."""
        proc, reader = procpipe.spawn_with_pipe(
            ctx, process_main, lambda writer: (make, ident, count, writer, self.stop, buffer, init, os.getpid()),
            f"tensorcom-portion-{ident}", handover)
        self.readers.append(reader)
        self.workers.append(proc)

    def get(self, ident: int) -> tuple:
        """The next message of worker `ident`; WorkerDied when it ended without sending one."""
        while True:
            if not self.processes:
                try:
                    return self.queues[ident].get(timeout=POLL)
                except queue.Empty:
                    if not self.workers[ident].is_alive() and self.queues[ident].empty():
                        raise died("portion worker", ident, self.workers[ident]) from None
                    continue
            reader, proc = self.readers[ident], self.workers[ident]
            if mpc.wait([reader, proc.sentinel], POLL):
                try:
                    return procpipe.receive(self.streams[ident])
                except EOFError:
                    proc.join(timeout=1.0)
                    raise died("portion worker", ident, proc) from None

    def close(self) -> None:
        """Stop every worker and wait for it; processes alive after ~1 s are terminated, then killed."""
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        if self.processes:
            for reader in self.readers:
                reader.close()  # a sender blocked on a full pipe gets BrokenPipeError
        join_or_kill(self.workers, grace=1.0, kill=self.processes)


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
    portions = _Portions(make, workers, processes, buffer, init)
    try:
        turn = deque(range(workers))
        while turn:
            kind, _, value = portions.get(turn[0])
            if kind == "item":
                yield value
                turn.rotate(-1)
            elif kind == "end":
                turn.popleft()
            else:
                raise value.error("portion worker")
    finally:
        portions.close()
