"""The one owner of worker processes: start N, read their results, tell a dead child, close. Map
workers (tensorcom.pipeline.workers), portion workers (tensorcom.pipeline._portions) and serving
workers (tensorcom.pipeline._supervisor) are built on it; tensorcom.ray's driver keeps the books of
its actors with the same pure Roster.

    owner = Processes("portion worker", N)
    owner.start(Entry(work, buffer=2), shared=[...], name="tensorcom-portion")
    owner.get(index=None, timeout=POLL)    # ("item" | "end" | "error", tag, value), or None
    owner.next(index=None)                  # the same, however long it takes
    owner.close()                           # always: stops them, waits `grace` s, kills
    Threads("map worker", N, work, inbox, outbox)   the same pool as threads, for the caller's process

Processes. Every child is spawned (never forked: the parent may hold sockets and threads), with
primitives (`ctx`: the stop event, what `shared` names) whose semaphores leave no name in /dev/shm
(tensorcom.pipeline._semaphores), and runs `process_main`: it ignores Ctrl-C and leaves by itself
when the parent disappears (tensorcom.pipeline._watch), runs the one worker loop
(tensorcom.pipeline._loop) on `Entry.work`, and answers on a pipe of its own
(tensorcom.pipeline._pipes: pickle 5, arrays copied once), through a bounded queue and a thread
when `Entry.buffer` > 0, so that it computes ahead. A child whose work failed reports ("error", tag,
Failure) and exits with status 1.

Results, death. `get` reads the next message of child `index` (of any child when None) within
`timeout`. A child that ended without its last word ("end" or "error"; with ends=False, none is
last: any end is a death) is a WorkerDied naming its pid and exit status or signal, raised once its
pipe is at its end, or once it has been gone `grace` seconds with nothing left to read (a pipe that
a grandchild still holds open never ends). A child's failure arrives as its "error" message, whose
Failure the caller turns into WorkerError (`failure.error(role)`), in its turn.

Close. `close()` sets the stop event every child watches, closes the pipes (a child blocked on a full
pipe gets BrokenPipeError), joins for `grace` seconds, then terminates, then kills.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing import connection as mpc
from types import SimpleNamespace
from typing import Any, Callable

from tensorcom.errors import WorkerDied
from tensorcom.pipeline import _pipes as procpipe
from tensorcom.pipeline._failure import Failure, died
from tensorcom.pipeline._loop import POLL, join_or_kill, one_task, worker_loop
from tensorcom.pipeline._semaphores import Handover, context
from tensorcom.pipeline._watch import enter_worker_process

LAST_WORDS = ("end", "error")


class Roster:
    """Pure: an owner's record of its `count` children, events in, decisions out.

    Events: `message(i, msg)` (returns msg), `exited(i, pid, exitcode, now)` (the child ended; its
    channel may still hold messages), `closed(i, pid, exitcode)` (its channel is at its end),
    `quiet(i, now)` (its channel had nothing to read at `now`). Decisions: `due()` is the WorkerDied
    of the first child that ended without its last word and has nothing more to say (its channel
    closed, or quiet `grace` seconds after it ended), else None; `finished` is True once every child
    said "end"; `reading(i)` whether child i's channel is still worth reading; `revive(i)`: child i
    runs again and owes its last word (tensorcom.ray's driver gives a restarted actor a new run,
    and keeps the books of its actors' runs here). With ends=False the children have no last word
    (map workers answer tasks until stopped): any end is a death."""

    def __init__(self, role: str, count: int, grace: float = 1.0, ends: bool = True):
        self.role, self.count, self.grace = role, count, grace
        self.last_words = LAST_WORDS if ends else ()
        self.said: dict[int, str] = {}  # child -> its last word
        self.gone: dict[int, tuple[float, Any]] = {}  # child -> (when it ended, SimpleNamespace(pid, exitcode))
        self.silent: set[int] = set()  # ended children with nothing more to say

    def message(self, index: int, message: tuple) -> tuple:
        if message[0] in self.last_words:
            self.said.setdefault(index, message[0])
        return message

    def exited(self, index: int, pid: int | None, exitcode: int | None, now: float) -> None:
        self.gone.setdefault(index, (now, SimpleNamespace(pid=pid, exitcode=exitcode)))

    def closed(self, index: int, pid: int | None, exitcode: int | None) -> None:
        self.gone[index] = (self.gone.get(index, (0.0, None))[0], SimpleNamespace(pid=pid, exitcode=exitcode))
        self.silent.add(index)

    def quiet(self, index: int, now: float) -> None:
        if index in self.gone and now - self.gone[index][0] >= self.grace:
            self.silent.add(index)

    def due(self) -> WorkerDied | None:
        for index in sorted(self.silent - set(self.said)):
            return died(self.role, index, self.gone[index][1])
        return None

    def revive(self, index: int) -> None:
        """Child `index` runs again (a restarted Ray actor given a new run): it owes its last word."""
        self.said.pop(index, None)
        self.gone.pop(index, None)
        self.silent.discard(index)

    def reading(self, index: int) -> bool:
        return index not in self.said and index not in self.silent

    @property
    def finished(self) -> bool:
        return sum(word == "end" for word in self.said.values()) == self.count


@dataclass(frozen=True)
class Entry:
    """What every child runs (process_main): the worker loop on `work`, with tasks from `inbox` (a
    multiprocessing Queue shared by the children) or, when None, the one task (tag index, `first`,
    payload index); `ends` as the loop's; answers through a queue of `buffer` messages and a thread
    when buffer > 0; `init()` first (its failure is the task's). `unit`: what an item belongs to, in
    the failure of an item that cannot be sent ("cannot send item 3 of portion 1 to the parent")."""

    work: Callable
    inbox: Any = None
    first: int | None = 0
    ends: bool = True
    buffer: int = 0
    init: Callable[[], Any] | None = None
    unit: str = "worker"


def process_main(entry: Entry, ident: int, writer: Any, stop: Any, parent_pid: int) -> None:
    """Body of child `ident`: watch the parent, run the worker loop as `entry` says with answers on
    `writer` (its pipe); after a failure, exit with status 1 once the report has gone."""
    enter_worker_process(parent_pid)

    def unsendable(exc: Exception, sent: int) -> tuple:
        what = f"cannot send item {sent} of {entry.unit} {ident} to the parent: {exc!r}"
        return ("error", ident, Failure.capture(exc, ident, sent, message=what))

    sender: Any = procpipe.PipeSender(writer)
    if entry.buffer > 0:
        sender = procpipe.BufferedSender(writer, entry.buffer, stop, unsendable)
    inbox = entry.inbox if entry.inbox is not None else one_task(ident, tag=ident, first=entry.first)
    work = entry.work if entry.init is None else _after(entry.init, entry.work)
    clean = worker_loop(work, inbox, sender, stop, ident, entry.ends)
    if entry.buffer > 0:
        sender.drain(stop)
    if not clean:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _after(init: Callable[[], Any], work: Callable) -> Callable:
    """`work`, with init() called first (so that a failing init is the task's failure)."""

    def started(payload: Any) -> Any:
        init()
        return work(payload)

    return started


class _Owner:
    """What Processes and Threads share: `next(index)` waits for the next message however long it takes."""

    def get(self, index: int | None = None, timeout: float = POLL) -> tuple | None:
        raise NotImplementedError

    def next(self, index: int | None = None) -> tuple:
        """The next message of child `index` (of any when None); WorkerDied when it ended without it."""
        while True:
            message = self.get(index, POLL)
            if message is not None:
                return message


class Processes(_Owner):
    """N spawned children of one `role` ("map worker"), each with its pipe; see the module docstring.
    `daemon`: False for children that start processes of their own (serving workers running a
    pipeline with parallel stages); the parent-death watcher ends them all the same."""

    def __init__(self, role: str, count: int, *, ends: bool = True, grace: float = 1.0, daemon: bool = True):
        self.ctx = context()
        self.stop = self.ctx.Event()
        self.role, self.count, self.grace, self.daemon = role, count, grace, daemon
        self.roster = Roster(role, count, grace, ends)
        self.procs: list = []
        self.readers: list = []
        self.streams: list = []
        self.ready: deque[int] = deque()
        self.closed = False

    def start(self, entry: Entry, shared: tuple | list = (), name: str = "tensorcom-worker") -> None:
        """Spawn the children, child i named f"{name}-{i}" running process_main(entry, i, ...);
        `shared`: the multiprocessing primitives (made with `self.ctx`) that `entry` holds; their
        semaphores have no name in /dev/shm (tensorcom.pipeline._semaphores; where they have one, it
        goes once every child has opened it). A failed start stops those started."""
        handover = Handover(self.ctx, [self.stop, *shared])
        try:
            for i in range(self.count):
                args = lambda writer, i=i: (entry, i, writer, self.stop, os.getpid())  # noqa: E731
                proc, reader = procpipe.spawn_with_pipe(self.ctx, process_main, args, f"{name}-{i}", handover,
                                                        self.daemon)
                self.procs.append(proc)
                self.readers.append(reader)
                self.streams.append(procpipe.stream_of(reader))
        finally:
            handover.release()
            if len(self.procs) < self.count:  # a start failed (an entry that cannot be pickled): stop the rest
                self.close()

    def get(self, index: int | None = None, timeout: float = POLL) -> tuple | None:
        """The next message of child `index` (of any child when None), None when none came within
        `timeout` seconds; WorkerDied when a child it waits on ended without its last word."""
        deadline = time.monotonic() + timeout
        while True:
            child = self._next_ready(index, deadline)  # waits POLL s at most
            if child is not None:
                try:
                    return self.roster.message(child, procpipe.receive(self.streams[child]))
                except EOFError:
                    proc = self.procs[child]
                    proc.join(timeout=1.0)
                    self.roster.closed(child, proc.pid, proc.exitcode)
            failure = self.roster.due()
            if failure is not None:
                raise failure
            if child is None and time.monotonic() >= deadline:
                return None

    def _next_ready(self, index: int | None, deadline: float) -> int | None:
        """A child (`index`, or any when None) with something to read, waiting until `deadline`;
        children found gone are told to the roster."""
        wanted = range(self.count) if index is None else [index]
        while self.ready:
            child = self.ready.popleft()
            if self.roster.reading(child) and (index is None or child == index):
                return child
        readers = {self.readers[i]: i for i in wanted if self.roster.reading(i)}
        sentinels = {self.procs[i].sentinel: i for i in wanted if i not in self.roster.gone}
        found = mpc.wait([*readers, *sentinels], min(POLL, max(0.0, deadline - time.monotonic())))
        now = time.monotonic()
        for i in sentinels.values():  # a forked grandchild may hold the sentinel too: ask the OS
            if self.procs[i].exitcode is not None:
                self.roster.exited(i, self.procs[i].pid, self.procs[i].exitcode, now)
        self.ready.extend(readers[r] for r in found if r in readers)
        for i in set(wanted) - set(self.ready):
            self.roster.quiet(i, now)
        return self.ready.popleft() if self.ready else None

    def close(self) -> None:
        """Stop every child: set the stop event, close the pipes, join for `grace` s, terminate, kill."""
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        for reader in self.readers:
            reader.close()
        join_or_kill(self.procs, grace=self.grace)


class Threads(_Owner):
    """The thread twin of Processes, for pools that run in the caller's process: `count` daemon
    threads named f"{name}-{i}", thread i running the worker loop on `work` with tasks from
    inbox(i) and answers to outbox(i) (queues: one per thread, or one they all share), read by `get`
    as Processes.get reads pipes. `check(index, drained)` raises
    WorkerDied for thread `index` (any thread when None) that has ended, when then drained() (what
    it posted is all read); `close()` sets the stop event and
    joins them for `grace` seconds (a thread cannot be killed)."""

    def __init__(self, role: str, count: int, work: Callable, inbox: Callable[[int], Any],
                 outbox: Callable[[int], Any], *, ends: bool = True, name: str = "tensorcom-worker",
                 grace: float = 1.0):
        self.role, self.grace, self.closed = role, grace, False
        self.stop = threading.Event()
        self.outboxes = [outbox(i) for i in range(count)]
        self.threads = [threading.Thread(target=worker_loop, args=(work, inbox(i), self.outboxes[i], self.stop, i, ends),
                                         daemon=True, name=f"{name}-{i}") for i in range(count)]
        for thread in self.threads:
            thread.start()

    def get(self, index: int | None = None, timeout: float = POLL) -> tuple | None:
        """The next message of thread `index` (None: on the outbox they all share), None after
        `timeout` seconds; WorkerDied when the thread has ended and left nothing to read."""
        outbox = self.outboxes[0 if index is None else index]
        try:
            return outbox.get(timeout=timeout)
        except queue.Empty:
            self.check(index, outbox.empty)
            return None

    def check(self, index: int | None = None, drained: Callable[[], bool] = lambda: True) -> None:
        for i in range(len(self.threads)) if index is None else [index]:
            if not self.threads[i].is_alive() and drained():  # dead first: its last word would be there
                raise died(self.role, i, self.threads[i])

    def close(self) -> None:
        self.closed = True
        self.stop.set()
        join_or_kill(self.threads, grace=self.grace, kill=False)
