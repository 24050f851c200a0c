"""The one worker loop, run alike by map workers, portion workers, the prefetch thread and serving
workers, in a thread or in a spawned process; and the owner's side of stopping it.

    worker_loop(work, inbox, outbox, stop, ident)   the worker's body
    one_task(payload)                                an inbox holding a single task
    join_or_kill(workers, grace)                     the owner's last word

Messages. The loop takes tasks `(tag, first, payload)` from `inbox` (anything with
`get(timeout=)`: a queue.Queue or a multiprocessing Queue) and, for each value of `work(payload)`,
posts `("item", tag, value)` on `outbox` (anything with `put(message, timeout=)`: a queue, a
multiprocessing Queue, a tensorcom.pipeline._pipes sender); then `("end", tag, count)` (unless
`ends` is False: a map's tasks give one value each, so their ends would tell nothing), or
`("error", tag, Failure)` when `work` or a post raised (an item that cannot be pickled is that
item's failure). `first` is the position of the task's first value in the worker's stream (None when
positions mean nothing), so the Failure names the failing item's position. `tag` is the consumer's
to choose: the map uses (generation, position), a portion its index.

Shutdown. The loop returns when `stop` is set (checked at least every POLL seconds, also while a
bounded outbox is full), when it takes a None task, or when the outbox's far end has gone
(BrokenPipeError). Whoever started the worker sets `stop` and joins it (`join_or_kill`); a value
iterator the loop gave up on is closed in the worker itself.
"""

from __future__ import annotations

import queue
import time
from typing import Any, Callable, Iterable

from tensorcom.pipeline._failure import Failure

POLL = 0.1  # seconds between checks of stop events and worker liveness
Task = tuple  # (tag, first, payload)


def worker_loop(work: Callable[[Any], Iterable], inbox: Any, outbox: Any, stop: Any, ident: int,
                ends: bool = True) -> bool:
    """Run tasks from `inbox` as the module docstring says until stopped or given None; False when
    some task failed (its failure was posted), True otherwise."""
    clean = True
    while not stop.is_set():
        try:
            task = inbox.get(timeout=POLL)
        except queue.Empty:
            continue
        if task is None:
            break
        outcome = _run(work, task, outbox, stop, ident, ends)
        if outcome is None:
            break
        clean = clean and outcome
    return clean


def _run(work: Callable[[Any], Iterable], task: Task, outbox: Any, stop: Any, ident: int, ends: bool) -> bool | None:
    """One task: True when it ended, False when it failed, None when the loop must stop."""
    tag, first, payload = task
    count, values = 0, None
    try:
        values = iter(work(payload))
        for value in values:
            if not post(outbox, ("item", tag, value), stop):
                return None
            count += 1
        message: tuple = ("end", tag, count)
    except Exception as exc:
        message = ("error", tag, Failure.capture(exc, ident, None if first is None else first + count))
    finally:
        close = getattr(values, "close", None)
        if close is not None:
            close()
    if (ends or message[0] == "error") and not post(outbox, message, stop):
        return None
    return message[0] == "end"


def post(outbox: Any, message: tuple, stop: Any) -> bool:
    """Put `message` on `outbox`, waiting while it is full; False once `stop` is set or the outbox's
    far end is gone. Errors of the outbox itself (pickling) propagate."""
    while not stop.is_set():
        try:
            outbox.put(message, timeout=POLL)
            return True
        except queue.Full:
            continue
        except BrokenPipeError:
            return False
    return False


def one_task(payload: Any, tag: Any = 0, first: int | None = 0) -> queue.Queue:
    """An inbox that hands out the task (tag, first, payload) and then None."""
    inbox: queue.Queue = queue.Queue()
    inbox.put((tag, first, payload))
    inbox.put(None)
    return inbox


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
