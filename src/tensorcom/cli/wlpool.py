"""An ordered parallel map over spawned worker processes, for wl-map, wl-xargs and wl-test.

`ordered_map(func, items, processes)` yields `func(item)` for every item, in input order.
Messages: the consumer puts `(index, item)` on a task queue and `None` once per worker to stop it;
each worker puts `(index, True, result)` or `(index, False, (message, traceback, key))` on the
result queue. The consumer (the generator) owns the workers: it starts them on first iteration and,
however the iteration ends (exhausted, error, close), stops, joins and if needed kills them. Workers
also exit on their own when their parent process is gone, so no worker outlives the tool.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import traceback
from typing import Any, Callable, Iterable, Iterator

from tensorcom.errors import TensorcomError, WorkerDied, WorkerError

_POLL_S = 0.5
_parent_pid: int | None = None  # set in worker processes: the consumer's pid
_stop_requested = False  # set by SIGTERM in worker processes


def should_stop() -> bool:
    """True in a worker process that got SIGTERM or whose consumer has exited (False outside workers).

    Long waits in a task (wl-xargs waiting for its command) poll this and give up."""
    return _stop_requested or (_parent_pid is not None and os.getppid() != _parent_pid)


def _request_stop(*_: Any) -> None:
    """SIGTERM handler of workers: only set a flag, so no exception can cut a task's cleanup short."""
    global _stop_requested
    _stop_requested = True


def call(func: Callable[[Any], Any], item: Any) -> Any:
    """func(item), with any exception that is not ours wrapped in a WorkerError naming the sample key."""
    try:
        return func(item)
    except TensorcomError:
        raise
    except Exception as exc:
        raise WorkerError(f"{type(exc).__name__}: {exc}", traceback.format_exc(), key=_key(item)) from exc


def _key(item: Any) -> str | None:
    """The sample key of `item` when it is a sample dict."""
    return item.get("__key__") if isinstance(item, dict) else None


def _worker(func: Callable[[Any], Any], tasks, results, parent_pid: int) -> None:
    """Worker loop: apply func to tasks until a None task arrives or the parent process is gone.

    SIGTERM sets a flag: the worker stops before its next task, and tasks that wait poll should_stop().
    SIGINT (Ctrl-C reaches the whole process group) is left to the consumer, which then stops us.
    """
    global _parent_pid
    _parent_pid = parent_pid
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while not should_stop():
        try:
            task = tasks.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if task is None:
            return
        index, item = task
        try:
            results.put((index, True, func(item)))
        except Exception as exc:
            results.put((index, False, _failure(exc, item)))


def _failure(exc: Exception, item: Any) -> tuple[str, str, str | None]:
    """(message, traceback, key) describing a failed task, for the consumer to raise as WorkerError."""
    if isinstance(exc, WorkerError):  # already names its key
        return str(exc).splitlines()[0], exc.remote_traceback or traceback.format_exc(), None
    message = str(exc) if isinstance(exc, TensorcomError) else f"{type(exc).__name__}: {exc}"
    return (message.splitlines()[0] if message else type(exc).__name__), traceback.format_exc(), _key(item)


def ordered_map(func: Callable[[Any], Any], items: Iterable[Any], processes: int,
                window: int | None = None) -> Iterator[Any]:
    """Yield func(item) for each item, computed in `processes` spawned workers, in input order.

    `func` must be picklable (a module-level function or a functools.partial of one). At most
    `window` items (default 4 per worker) are in flight. A worker exception is raised here as a
    WorkerError with the worker's traceback and the sample key; a worker that dies as WorkerDied.
    """
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes!r}")
    window = window or 4 * processes
    context = multiprocessing.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    workers = [context.Process(target=_worker, args=(func, tasks, results, os.getpid()), daemon=True)
               for _ in range(processes)]
    for proc in workers:
        proc.start()
    finished = False
    try:
        yield from _drive(iter(items), tasks, results, workers, window)
        finished = True
    finally:
        _shutdown(workers, tasks, results, graceful=finished)


def _drive(items: Iterator[Any], tasks, results, workers: list, window: int) -> Iterator[Any]:
    """Feed tasks, collect results, and yield them (or raise their failures) in index order."""
    done: dict[int, Any] = {}
    sent = emitted = 0
    exhausted = False
    while True:
        while not exhausted and sent - emitted < window:
            item = next(items, _END)
            if item is _END:
                exhausted = True
                break
            tasks.put((sent, item))
            sent += 1
        if exhausted and emitted == sent:
            return
        index, ok, payload = _next_result(results, workers)
        done[index] = (ok, payload)
        while emitted in done:  # a failure is raised in its turn, so the first failing item is reported
            ok, payload = done.pop(emitted)
            if not ok:
                message, remote_traceback, key = payload
                raise WorkerError(message, remote_traceback, key=key)
            yield payload
            emitted += 1


_END = object()


def _next_result(results, workers: list) -> tuple:
    """The next (index, ok, payload) from the result queue; WorkerDied if a worker ended meanwhile."""
    while True:
        try:
            return results.get(timeout=_POLL_S)
        except queue.Empty:
            dead = [p for p in workers if not p.is_alive()]
            if dead:
                raise WorkerDied(f"worker process {dead[0].pid} ended with exit code {dead[0].exitcode}")


def _shutdown(workers: list, tasks, results, graceful: bool) -> None:
    """Stop the workers (a None task each when `graceful`, else SIGTERM at once), join them, killing
    any that do not stop, and release the queues."""
    for proc in workers if not graceful else ():
        if proc.is_alive():
            proc.terminate()
    for _ in workers:
        try:
            tasks.put_nowait(None)
        except (ValueError, OSError, queue.Full):
            break
    for proc in workers:
        proc.join(timeout=3)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=3)
    for q in (tasks, results):
        q.cancel_join_thread()
        q.close()
