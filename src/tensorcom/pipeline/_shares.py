"""Whole pipeline shares in worker threads or spawned processes, handing back finished items (batches).

    shard_parallel(make, workers=N, processes=True, buffer=2, init=None)

`make(i, n)` is a picklable callable returning the iterator of share `i` of `n` (for a Pipeline: its
upstream stages on `shard(i, n)`); each worker runs one share from the source through maps and
batching, as a torch DataLoader worker does, so only finished items (typically batches) cross the
process boundary: once each, pickle protocol 5 with out-of-band buffers over a pipe of its own
(tensorcom.pipeline._pipes), so a batch of arrays is copied once into the pipe and once out of it.

Order. Items are taken round-robin: item 0 of worker 0, item 0 of worker 1, ..., item 1 of worker
0, ...; a worker whose share is exhausted drops out of the rotation. The order is therefore a pure
function of the shares, the same with threads (processes=False) as with processes.

Messages. Each worker puts ("item", x) for each item of its share, then ("end", count) or
("error", (worker, repr, traceback text, sample key)). A worker computes ahead by at most `buffer`
items (a bounded queue drained by a sender thread that pickles and writes), so memory stays bounded
whatever the consumer's speed.

Shutdown. Workers start on the first next(); whatever ends the iteration (exhaustion, `close()`, an
exception) sets the stop event and joins them; processes still alive a second later are terminated,
then killed. Processes are spawned (never forked), ignore SIGINT, and leave by themselves when their
parent disappears (workers.watch_parent). A failing share raises errors.WorkerError with the
worker's traceback and the sample key when known; a process that dies without a word raises
errors.WorkerDied within workers.POLL seconds of the consumer waiting on it.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import traceback
from collections import deque
from multiprocessing import connection as mpc
from typing import Any, Callable, Iterator

from tensorcom.errors import WorkerDied, WorkerError
from tensorcom.pipeline import _pipes as procpipe
from tensorcom.pipeline.workers import (
    POLL,
    check_picklable,
    check_sizes,
    describe_exit,
    join_or_kill,
    put_unless_stopped,
    watch_parent,
)


def share_loop(make: Callable, ident: int, count: int, outq: queue.Queue, stop: Any) -> None:
    """Iterate share `ident` of `count` (from `make`) into `outq` as ("item", x) messages, then
    ("end", n) or ("error", failure); returns early once `stop` is set. Runs in a thread or a process."""
    produced = 0
    try:
        items = make(ident, count)
        for item in items:
            if not put_unless_stopped(outq, ("item", item), stop):
                return
            produced += 1
        put_unless_stopped(outq, ("end", produced), stop)
    except Exception as exc:
        failure = (ident, repr(exc), traceback.format_exc(), getattr(exc, "tensorcom_key", None))
        put_unless_stopped(outq, ("error", failure), stop)


def sender_loop(outq: queue.Queue, sender: procpipe.PipeSender, ident: int, stop: Any) -> None:
    """Thread body in a worker process: write each message of `outq` to the parent's pipe until "end"
    or "error" has gone; an item that cannot be pickled is sent as that worker's error instead."""
    sent = 0
    while not stop.is_set():
        try:
            message = outq.get(timeout=POLL)
        except queue.Empty:
            continue
        try:
            sender.put(message)
            sent += 1
        except BrokenPipeError:
            return  # the parent has gone or closed its end
        except Exception as exc:
            what = f"cannot send item {sent} of share {ident} to the parent: {exc!r}"
            sender.put(("error", (ident, what, traceback.format_exc(), None)))
            stop.set()  # this process's own stop (see process_main): the other workers go on until closed
            return
        if message[0] != "item":
            return


def process_main(make: Callable, ident: int, count: int, writer: Any, stop: Any, buffer: int,
                 init: Callable[[], Any] | None, parent_pid: int) -> None:
    """Entry point of a worker process: ignore Ctrl-C, watch the parent, run `init`, then compute
    the share on this thread while a sender thread writes the results to `writer`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)
    stop = _Either(stop, threading.Event())
    outq: queue.Queue = queue.Queue(buffer)
    sender = threading.Thread(target=sender_loop, args=(outq, procpipe.PipeSender(writer), ident, stop),
                              name="tensorcom-share-sender", daemon=True)
    sender.start()
    try:
        if init is not None:
            init()
        share_loop(make, ident, count, outq, stop)
    except Exception as exc:  # init failed
        put_unless_stopped(outq, ("error", (ident, repr(exc), traceback.format_exc(), None)), stop)
    while sender.is_alive() and not stop.is_set():
        sender.join(timeout=POLL)


class _Either:
    """A stop signal set by the parent (`shared`, for every worker) or by this process (`local`)."""

    def __init__(self, shared: Any, local: threading.Event):
        self.shared, self.local = shared, local

    def is_set(self) -> bool:
        return self.local.is_set() or self.shared.is_set()

    def set(self) -> None:
        self.local.set()


class _Shares:
    """Running share workers (threads or spawned processes) and the consumer's ends of their outputs."""

    def __init__(self, make: Callable, count: int, processes: bool, buffer: int, init: Callable | None):
        self.processes, self.closed = processes, False
        if processes:
            ctx = multiprocessing.get_context("spawn")
            self.stop = ctx.Event()
            self.workers, self.readers = [], []
            try:
                for i in range(count):
                    self._spawn(ctx, make, i, count, buffer, init)
            except BaseException:
                self.close()  # e.g. the pipeline could not be pickled: stop those already started
                raise
            self.streams = [procpipe.stream_of(r) for r in self.readers]
            return
        self.stop = threading.Event()
        self.queues = [queue.Queue(buffer) for _ in range(count)]
        self.workers = [threading.Thread(target=share_loop, args=(make, i, count, self.queues[i], self.stop),
                                         daemon=True, name=f"tensorcom-share-{i}") for i in range(count)]
        for worker in self.workers:
            worker.start()

    def _spawn(self, ctx: Any, make: Callable, ident: int, count: int, buffer: int, init: Callable | None) -> None:
        """Start worker process `ident` with a pipe of its own."""
        reader, writer = ctx.Pipe(duplex=False)
        procpipe.widen(writer)
        proc = ctx.Process(target=process_main, daemon=True, name=f"tensorcom-share-{ident}",
                           args=(make, ident, count, writer, self.stop, buffer, init, os.getpid()))
        self.readers.append(reader)
        try:
            proc.start()
        finally:
            writer.close()  # the child holds it; EOF here once the child is gone
        self.workers.append(proc)

    def get(self, ident: int) -> tuple:
        """The next message of worker `ident`; WorkerDied when it ended without sending one."""
        while True:
            if not self.processes:
                try:
                    return self.queues[ident].get(timeout=POLL)
                except queue.Empty:
                    if not self.workers[ident].is_alive() and self.queues[ident].empty():
                        raise WorkerDied(f"share worker thread {ident} ended unexpectedly") from None
                    continue
            reader, proc = self.readers[ident], self.workers[ident]
            if mpc.wait([reader, proc.sentinel], POLL):
                try:
                    return procpipe.receive(self.streams[ident])
                except EOFError:
                    proc.join(timeout=1.0)
                    raise WorkerDied(f"share worker process {ident} (pid {proc.pid}) {describe_exit(proc.exitcode)}") from None

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
    """Yield the items of shares 0..workers-1 of `make(i, workers)`, round-robin, each share computed
    by a thread or (processes=True) a spawned process that starts on the first next(). Each worker
    runs ahead by at most `buffer` items; `init()` runs first in each worker process (not in
    threads). Raises WorkerError / WorkerDied as the module docstring says."""
    check_sizes(workers, buffer)
    if processes:
        check_picklable(make, "share function")
        if init is not None:
            check_picklable(init, "init function")
    return _rotate(make, workers, processes, buffer, init)


def _rotate(make: Callable, workers: int, processes: bool, buffer: int, init: Callable | None) -> Iterator:
    shares = _Shares(make, workers, processes, buffer, init)
    try:
        turn = deque(range(workers))
        while turn:
            kind, value = shares.get(turn[0])
            if kind == "item":
                yield value
                turn.rotate(-1)
            elif kind == "end":
                turn.popleft()
            else:
                ident, text, remote_tb, key = value
                raise WorkerError(f"share worker {ident} raised {text}", remote_tb, key)
    finally:
        shares.close()
