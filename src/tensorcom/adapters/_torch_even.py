"""Even ends under torch.distributed: every rank yields the same number of batches in each pass.

    group = even_group(even, group)                     None: no evening (one rank, or turned off)
    for batch in even_pass(fetcher, group, counts): ...  counts.dropped grows by what was left over

Before each step the ranks agree, with one all_reduce(MIN) of a small int over a gloo group (a CPU
collective: it never waits on the GPU), on the worst state among them:

    HAVE (3)      every rank has its next batch: each yields one
    WAITING (2)   a rank's stream has nothing yet: nobody yields; the ranks that have a batch may read
                  one more from their stream (see below), and they ask again
    ENDED (1)     a rank's pass has ended: every rank ends its pass; what the others still had of
                  theirs is dropped (a stream is read to its end-of-epoch, so its next pass is the next epoch)
    FAILED (0)    a rank's source raised: that rank re-raises its error, every other rank raises
                  WorkerError with its text, so none waits for a step that will not come

So a pass yields min over ranks of the batches each had: drop_last across ranks, decided as it goes
(the ranks need not know their counts ahead: a zsplit server's split follows the consumers' speed).

Why streams are read ahead in a thread (`Readahead`): a zsplit server ends an epoch for its consumers
only when every batch of it is acknowledged, and a consumer acknowledges a batch when it reads it. A
rank waiting for its end-of-epoch depends on the others reading their last batches; if they sat in the
agreement with unread batches in their sockets, nobody would move. The reader thread keeps reading
(up to `ahead` batches, one more for each round in which another rank waits), so the end comes. A local
source (a Pipeline on this rank's portion) never waits on other ranks and is read in place (`Direct`).
"""

from __future__ import annotations

import collections
import math
import threading
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

FAILED, ENDED, WAITING, HAVE = 0, 1, 2, 3
POLL_SECONDS = 0.05  # how long a rank whose stream has nothing waits before it tells the others
END = object()  # what a fetcher holds after the last item of a pass
_EMPTY = object()


@dataclass
class Counts:
    """What evening did: `passes` agreed on, `batches` yielded, `dropped` (received but not yielded)."""

    passes: int = 0
    batches: int = 0
    dropped: int = 0


def state_of(item: Any) -> int:
    """The agreement state of a fetched item (END, an exception, or a batch)."""
    if item is END:
        return ENDED
    return FAILED if isinstance(item, BaseException) else HAVE


class Direct:
    """One pass of a local source, read in the calling thread (its next item never waits on another rank)."""

    def __init__(self, iterator: Iterator[Any]):
        self.iterator, self.head = iterator, _EMPTY

    def poll(self, wait: float) -> int:
        if self.head is _EMPTY:
            try:
                self.head = next(self.iterator)
            except StopIteration:
                self.head = END
            except Exception as exc:  # told to every rank, then re-raised here
                self.head = exc
        return state_of(self.head)

    def take(self) -> Any:
        item, self.head = self.head, _EMPTY
        return item

    def allow_more(self) -> None:
        """A local source needs no reading ahead."""

    def finish(self, drain: bool = True) -> int:
        """End the pass (a local source is never drained: the next pass starts afresh); returns the
        batches dropped: the one in hand, if any (the rest is never computed)."""
        dropped = int(self.head is not _EMPTY and state_of(self.head) == HAVE)
        self.head = _EMPTY
        close = getattr(self.iterator, "close", None)
        if close is not None:
            close()
        return dropped

    def join(self, timeout: float | None = None) -> bool:
        """Nothing runs beside the caller: True."""
        return True


class Shelf:
    """What a reader thread and the training loop share: items read (batches, then END or an exception),
    the most the reader may hold (`limit`), and the stop flag; guarded by `cond`."""

    def __init__(self, limit: int):
        self.items: collections.deque = collections.deque()
        self.limit, self.stop = limit, False
        self.cond = threading.Condition()


def read_ahead(iterator: Iterator[Any], shelf: Shelf) -> None:
    """Reader thread loop: move the items of `iterator` (one pass of a stream) onto `shelf` while it holds
    fewer than `shelf.limit`, then END, or the exception the iterator raised. Returns when the pass is
    over or `shelf.stop` is set (by its owner, the Readahead, whose finish() or join() ends it)."""
    final: Any = END
    try:
        for item in iterator:
            with shelf.cond:
                shelf.cond.wait_for(lambda: shelf.stop or len(shelf.items) < shelf.limit)
                if shelf.stop:
                    return
                shelf.items.append(item)
                shelf.cond.notify_all()
    except BaseException as exc:  # handed to the training loop, which re-raises it
        final = exc
    with shelf.cond:
        shelf.items.append(final)
        shelf.cond.notify_all()


class Readahead:
    """One pass of a stream (a Connection), read by a thread into a Shelf; the stream is used by that
    thread alone until `finish()` has joined it."""

    def __init__(self, iterator: Iterator[Any], ahead: int):
        self.ahead, self.shelf = ahead, Shelf(ahead)
        self.thread = threading.Thread(target=read_ahead, args=(iterator, self.shelf), daemon=True,
                                       name="tensorcom-readahead")
        self.thread.start()

    def poll(self, wait: float) -> int:
        shelf = self.shelf
        with shelf.cond:
            shelf.cond.wait_for(lambda: shelf.items, timeout=wait)
            return state_of(shelf.items[0]) if shelf.items else WAITING

    def take(self) -> Any:
        with self.shelf.cond:
            item = self.shelf.items.popleft()
            self.shelf.limit = self.ahead  # the others had theirs: back to the usual depth
            self.shelf.cond.notify_all()
            return item

    def allow_more(self) -> None:
        """Another rank waits: read one more than is held, so this rank's stream keeps moving."""
        with self.shelf.cond:
            self.shelf.limit = max(self.shelf.limit, len(self.shelf.items) + 1)
            self.shelf.cond.notify_all()

    def finish(self, drain: bool = True) -> int:
        """End the pass. With `drain`: read the stream to its end-of-epoch (so its next pass is the next
        epoch), join the reader and return the batches dropped. Without: tell the reader to stop and
        return 0 at once (the reader may first have to wait for its stream's next message; `join()`
        waits for it)."""
        shelf = self.shelf
        with shelf.cond:
            if drain:
                shelf.limit = math.inf  # the reader takes the rest of the pass
            else:
                shelf.stop = True
            shelf.cond.notify_all()
        if not drain:
            return 0
        dropped = 0
        while True:
            with shelf.cond:
                shelf.cond.wait_for(lambda: shelf.items)
                item = shelf.items.popleft()
            if item is END:
                break
            if isinstance(item, BaseException):
                warnings.warn(f"reading the rest of a pass to keep the ranks even: {item!r}", RuntimeWarning,
                              stacklevel=2)
                break
            dropped += 1
        self.join()
        return dropped

    def join(self, timeout: float | None = None) -> bool:
        """Stop the reader and wait for it (at most `timeout` seconds); True when it has ended."""
        with self.shelf.cond:
            self.shelf.stop = True
            self.shelf.cond.notify_all()
        self.thread.join(timeout)
        return not self.thread.is_alive()


def even_group(even: bool | None, group: Any) -> Any:
    """The process group to keep even over, or None: `even` False; None (auto) without an initialized
    torch.distributed or with one rank. ValueError when `even` is True and torch.distributed is not
    initialized. Without `group`, the default group when its backend has gloo, else a gloo group over
    the same ranks (made once, collectively, on first use)."""
    import torch.distributed as dist

    if even is False:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        if even:
            raise ValueError("even=True needs torch.distributed initialized first (init_process_group)")
        return None
    group = _coordination_group() if group is None else group
    if dist.get_world_size(group) == 1 and not even:
        return None
    return group


_GLOO: dict[int, Any] = {}  # id(default group) -> the gloo group made for it


def _coordination_group() -> Any:
    import torch.distributed as dist

    if "gloo" in str(dist.get_backend()):
        return dist.group.WORLD
    key = id(dist.group.WORLD)
    if key not in _GLOO:
        _GLOO.clear()
        _GLOO[key] = dist.new_group(backend="gloo")
    return _GLOO[key]


def agree(state: int, group: Any) -> int:
    """The lowest state over the ranks of `group` (one all_reduce of one int32 on the CPU)."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([state], dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MIN, group=group)
    return int(value[0])


def raise_failure(own: BaseException | None, group: Any) -> None:
    """Every rank calls this when one failed: the failed rank re-raises its error, the others raise
    WorkerError with the failed ranks' tracebacks."""
    import torch.distributed as dist

    from tensorcom.errors import WorkerError

    text = None if own is None else "".join(traceback.format_exception(own))
    texts: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(texts, text, group=group)
    if own is not None:
        raise own
    failed = {rank: t for rank, t in enumerate(texts) if t is not None}
    first = next(iter(failed.values()), "no error text").strip().splitlines()[-1]
    raise WorkerError(f"the data source of rank(s) {sorted(failed)} failed ({first}); this rank stops too",
                      "\n".join(failed.values()))


def even_pass(fetcher: Any, group: Any, counts: Counts) -> Iterator[Any]:
    """The batches of one pass of `fetcher` (Direct or Readahead), as many on every rank of `group`
    (rules in the module docstring); `counts` records what was yielded and dropped."""
    verdict = WAITING
    try:
        while verdict in (HAVE, WAITING):
            state = fetcher.poll(POLL_SECONDS)
            verdict = agree(state, group)
            if verdict == HAVE:
                counts.batches += 1
                yield fetcher.take()
            elif verdict == WAITING and state == HAVE:
                fetcher.allow_more()
    except BaseException:  # left early (an exception, or the loop broke off): stop without draining
        fetcher.finish(drain=False)
        raise
    if verdict == FAILED:
        own = fetcher.take() if state == FAILED else None
        fetcher.finish(drain=False)
        raise_failure(own, group)
    counts.passes += 1
    counts.dropped += fetcher.finish()
