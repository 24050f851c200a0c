"""The names of the POSIX semaphores behind multiprocessing's primitives, taken out of /dev/shm as soon
as every worker process holds them.

    handover = Handover(ctx, [queue, event, barrier])     in the parent, before starting the workers
    proc = handover.process(target, args, name=..., daemon=True)
    proc.start()                                          for each worker
    handover.release()                                    once all were started

Why. With the spawn context a multiprocessing Lock, Semaphore, Event, Condition, Barrier or Queue is a
named semaphore (`/dev/shm/sem.mp-*`): a spawned child opens it by that name while it unpickles its
arguments, and the name stays until the creating process (or its resource tracker, at exit) unlinks
it. A SIGKILL of the whole process group, resource tracker included, would leave the names behind for
good. Once every child has opened the semaphores the name is useless, so it is removed then: the
objects keep working in every process that holds them, and nothing is left in /dev/shm whatever
happens to any of the processes afterwards.

How the parent knows. `process()` wraps the target: the child first writes one byte on a pipe of its
own (its arguments, semaphores included, are unpickled before any target runs), then runs
`target(*args)`. `release()` waits until each started child has written its byte or ended, then runs
each semaphore's own cleanup (sem_unlink, and the resource tracker forgets it) at once. What is left:
between the primitives' creation and `release()` (while the children boot), the names exist; a SIGKILL
of the process group then still leaves them. After `release()` no new process can be given these
primitives (it could not open them).
"""

from __future__ import annotations

import time
from multiprocessing import connection as mpc
from multiprocessing import synchronize, util
from typing import Any, Callable

RELEASE_WAIT = 120.0  # seconds release() waits for children still booting before it gives up (names stay)


def semlocks(objects: list, depth: int = 3) -> list:
    """The multiprocessing SemLocks in `objects` and in their attributes (a Queue's locks and
    semaphore, an Event's condition and flag, a Barrier's condition), down to `depth` levels."""
    found: list = []
    for obj in objects:
        if isinstance(obj, synchronize.SemLock):
            found.append(obj)
        elif depth > 0 and hasattr(obj, "__dict__"):
            found.extend(semlocks(list(vars(obj).values()), depth - 1))
    return found


def unlink(locks: list) -> int:
    """Run the cleanup multiprocessing registered for each named SemLock of this process now: its
    name leaves /dev/shm and the resource tracker forgets it; the semaphore itself keeps working.
    Returns how many names were removed."""
    names = {lock._semlock.name for lock in locks if getattr(lock._semlock, "name", None)}
    removed = 0
    for finalizer in list(util._finalizer_registry.values()):
        args = getattr(finalizer, "_args", None)
        if getattr(finalizer, "_callback", None) is synchronize.SemLock._cleanup and args and args[0] in names:
            try:
                finalizer()
                removed += 1
            except OSError:  # already gone: nothing left to remove
                pass
    return removed


def _announce(ready: Any, target: Callable, *args: Any) -> None:
    """A child's entry point: say "I hold my arguments" on `ready`, then run target(*args)."""
    try:
        ready.send_bytes(b"1")
    except OSError:  # the parent has gone; the target's own checks will see it
        pass
    ready.close()
    target(*args)


class Handover:
    """Processes that are given `primitives` (multiprocessing objects made with `ctx`), and the removal
    of the primitives' semaphore names once every one of them holds them (module docstring)."""

    def __init__(self, ctx: Any, primitives: list):
        self.ctx = ctx
        self.locks = semlocks(primitives)
        self.children: list[tuple[Any, Any, Any]] = []  # (reader, writer, process)

    def process(self, target: Callable, args: tuple, **kwargs: Any) -> Any:
        """An unstarted ctx.Process running target(*args) (after announcing itself); kwargs as for
        ctx.Process (name, daemon)."""
        reader, writer = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(target=_announce, args=(writer, target, *args), **kwargs)
        self.children.append((reader, writer, proc))
        return proc

    def release(self, timeout: float = RELEASE_WAIT) -> bool:
        """Wait until every started process has announced itself or ended, then remove the names;
        True when removed, False when some child was still booting after `timeout` seconds (the names
        then stay until the primitives are collected or this process exits, as without a handover)."""
        waiting = {}
        for reader, writer, proc in self.children:
            writer.close()  # the child's copy is the one that counts
            if proc.pid is not None:  # started
                waiting[reader] = proc.sentinel
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            ready = set(mpc.wait([*waiting, *waiting.values()], timeout=min(1.0, deadline - time.monotonic())))
            for reader, sentinel in list(waiting.items()):
                if reader in ready or sentinel in ready:
                    del waiting[reader]
        for reader, _, _ in self.children:
            reader.close()
        self.children = []
        if waiting:
            return False
        unlink(self.locks)
        return True
