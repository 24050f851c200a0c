"""Multiprocessing primitives for spawned worker processes whose semaphores leave no name in /dev/shm,
whatever happens to the processes.

    ctx = context()                       the spawn context; its Lock, RLock, Semaphore and BoundedSemaphore,
    queue, event = ctx.Queue(), ctx.Event()   so its Event, Condition, Barrier, Queue and Value too, are unnamed
    ctx.Process(target=work, args=(queue, event)).start()

Why. With multiprocessing's spawn context every semaphore is a named POSIX semaphore
(`/dev/shm/sem.mp-*`) that a child opens by name while it unpickles its arguments. The name stays until
the creating process, or its resource tracker at exit, unlinks it; a SIGKILL of the whole process group
(tracker included) while the children are still starting leaves the names for good.

How. A POSIX semaphore is a `sem_t` in shared memory; a named one is a file in /dev/shm that each
process maps. Here the `sem_t`s live in a memfd (`Slab`: an anonymous file, in no directory, SLOT bytes
per semaphore), initialised with sem_init(pshared=1) and wrapped in multiprocessing's own SemLock type
(rebuilt from the address, with no name, as a forked child rebuilds one): acquire and release are the
same calls on the same kind of semaphore, as cheap as before. A child is given the memfd's descriptor
as spawn passes descriptors (multiprocessing.reduction.DupFd, as multiprocessing's own heap passes its
arenas) and maps it; the memory goes with the last process that maps it, however that process ends.
Like multiprocessing's, these primitives can be given to a process only while it is being spawned.

Elsewhere (no memfd_create or sem_init: not Linux) `context()` is multiprocessing's spawn context, and a
`Handover` takes the names out of /dev/shm once every child holds them:

    handover = Handover(ctx, [queue, event, barrier])     in the parent, before starting the workers
    proc = handover.process(target, args, name=..., daemon=True)
    proc.start()                                          for each worker
    handover.release()                                    once all were started

`process()` wraps the target: the child first writes one byte on a pipe of its own (its arguments,
semaphores included, are unpickled before any target runs), then runs `target(*args)`. `release()`
waits until each started child has written its byte or ended, then runs each semaphore's own cleanup
(sem_unlink, and the resource tracker forgets it) at once. Between the primitives' creation and
`release()` the names exist, and a SIGKILL of the process group then leaves them; after `release()` no
new process can be given these primitives (it could not open them). With unnamed primitives (no name
to remove) a Handover makes plain processes and `release()` returns at once.
"""

from __future__ import annotations

import _multiprocessing
import ctypes
import functools
import mmap
import multiprocessing
import os
import platform
import threading
import time
import weakref
from multiprocessing import connection as mpc
from multiprocessing import context as mpcontext
from multiprocessing import reduction, synchronize, util
from typing import Any, Callable

RELEASE_WAIT = 120.0  # seconds release() waits for children still booting before it gives up (names stay)
SLOT = 64  # bytes per semaphore: a sem_t (32 bytes on 64-bit Linux) on a cache line of its own
SLAB = 4096  # bytes per memfd: SLAB // SLOT semaphores


class Slab:
    """SLAB bytes of shared memory in a memfd (`fd`, made here when None), mapped in this process at
    `base` and handed out SLOT bytes at a time by the process that made it. Pickled while a child is
    spawned, it travels as its descriptor, and the child maps the same memory."""

    def __init__(self, fd: int | None = None):
        if fd is None:
            fd = os.memfd_create("tensorcom-semaphores", os.MFD_CLOEXEC)
            os.ftruncate(fd, SLAB)
        self.fd, self.owner, self.used = fd, os.getpid(), 0
        self.map = mmap.mmap(fd, SLAB)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        weakref.finalize(self, os.close, fd)

    def __reduce__(self) -> tuple:
        return _mapped, (reduction.DupFd(self.fd),)


def _mapped(fd: Any) -> Slab:
    """A child's Slab: the memory of the parent's, from the descriptor spawn passed."""
    return Slab(fd.detach())


_slabs: list[Slab] = []  # the slab this process hands semaphores out of now
_slabs_lock = threading.Lock()
_libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None  # sem_init's


def _new_semaphore(value: int) -> tuple[Slab, int]:
    """(slab, offset) of a fresh process-shared sem_t holding `value`. A slab inherited through a
    fork is never handed out from (the parent hands out the same offsets)."""
    with _slabs_lock:
        if not _slabs or _slabs[0].owner != os.getpid() or _slabs[0].used + SLOT > SLAB:
            _slabs[:] = [Slab()]
        slab = _slabs[0]
        offset, slab.used = slab.used, slab.used + SLOT
    if _libc.sem_init(ctypes.c_void_p(slab.base + offset), 1, ctypes.c_uint(value)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"sem_init: {os.strerror(error)}")
    return slab, offset


class _Unnamed:
    """What the unnamed Lock, RLock, Semaphore and BoundedSemaphore add to multiprocessing's: the
    semaphore is at `offset` in `slab`, and that is what a spawned child is given."""

    _slab: Slab
    _offset: int
    _semlock: Any
    _make_methods: Callable[[], None]

    def _make(self, kind: int, value: int, maxvalue: int) -> None:
        self._wrap(*_new_semaphore(value), kind, maxvalue)

    def _wrap(self, slab: Slab, offset: int, kind: int, maxvalue: int) -> None:
        self._slab, self._offset, self._is_fork_ctx = slab, offset, False
        self._semlock = _multiprocessing.SemLock._rebuild(slab.base + offset, kind, maxvalue, None)
        self._make_methods()

    def __getstate__(self) -> tuple:
        mpcontext.assert_spawning(self)
        return self._slab, self._offset, self._semlock.kind, self._semlock.maxvalue

    def __setstate__(self, state: tuple) -> None:
        self._wrap(*state)


class Lock(_Unnamed, synchronize.Lock):
    def __init__(self) -> None:
        self._make(synchronize.SEMAPHORE, 1, 1)


class RLock(_Unnamed, synchronize.RLock):
    def __init__(self) -> None:
        self._make(synchronize.RECURSIVE_MUTEX, 1, 1)


class Semaphore(_Unnamed, synchronize.Semaphore):
    def __init__(self, value: int = 1) -> None:
        self._make(synchronize.SEMAPHORE, value, synchronize.SEM_VALUE_MAX)


class BoundedSemaphore(_Unnamed, synchronize.BoundedSemaphore):
    def __init__(self, value: int = 1) -> None:
        self._make(synchronize.SEMAPHORE, value, value)


class UnnamedContext(mpcontext.SpawnContext):
    """multiprocessing's spawn context, whose semaphores (and so every primitive built on them) have
    no name (module docstring)."""

    def Lock(self) -> synchronize.Lock:  # noqa: N802 (multiprocessing's names)
        return Lock()

    def RLock(self) -> synchronize.RLock:  # noqa: N802
        return RLock()

    def Semaphore(self, value: int = 1) -> synchronize.Semaphore:  # noqa: N802
        return Semaphore(value)

    def BoundedSemaphore(self, value: int = 1) -> synchronize.BoundedSemaphore:  # noqa: N802
        return BoundedSemaphore(value)


@functools.lru_cache(maxsize=None)
def context() -> Any:
    """The context worker processes are spawned with: an UnnamedContext where memfd_create and sem_init
    work and the C library is glibc (Linux), else multiprocessing's spawn context (whose names a
    Handover removes). glibc only: a SemLock ends with sem_close, which glibc refuses for a semaphore it
    did not open by name (EINVAL, nothing done) and other C libraries may not."""
    if platform.libc_ver()[0] != "glibc":
        return multiprocessing.get_context("spawn")
    try:
        with Lock():  # made, taken and given back: this platform has all it takes
            pass
    except (AttributeError, OSError, TypeError, ValueError):  # no memfd_create, sem_init or SemLock._rebuild
        return multiprocessing.get_context("spawn")
    return UnnamedContext()


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
        self.locks = [lock for lock in semlocks(primitives) if lock._semlock.name]  # unnamed: nothing to remove
        self.children: list[tuple[Any, Any, Any]] = []  # (reader, writer, process)

    def process(self, target: Callable, args: tuple, **kwargs: Any) -> Any:
        """An unstarted ctx.Process running target(*args) (after announcing itself); kwargs as for
        ctx.Process (name, daemon); a plain one when there is no name to remove."""
        if not self.locks:
            return self.ctx.Process(target=target, args=args, **kwargs)
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
