"""A restarted consumer catching up inside a live `zshare` stream: which batches it lacks, where they
come from, and when it goes live. Pure (no zmq): the share book feeds it events and acts on what it
answers.

    core = CatchUp()
    core.passing(item)                          a batch or an epoch's end entered the served stream
    core.dropped(item)                          an item left the replay buffer
    core.join(peer, record, buffered, head)     a consumer joined with its record -> [Regenerate] (None:
                                                the record says nothing of this stream: a plain join)
    core.regenerated(item)                      a batch the catch-up worker made again arrived
    core.sends(peer, free) -> [Item | GoLive]   what to deliver to it now (batches within `free`)
    core.remaining(peer) -> int                 batches it still lacks (the "catching up N" of reports)

Items: every batch of the stream carries its `portion` (stream, v, V, index): index is the batch's
position within (epoch, portion v). The core counts, per (stream, epoch, v), the batches that
entered the stream (the live position of each portion).

The rule. A consumer restarted from its record (version 2: per (epoch, v) the intervals of batch
indices it took; version 1: the first `batches`) whose first incomplete epoch is E (the record's,
or the latest in which it took a batch: a stream's epochs come one after the other, so it had the
ends of those before; a zjoin record has no end markers), joining while
the stream's epoch is L >= E, lacks: every batch of (e, v) for E <= e <= L with an index below the
portion's live position that it did not take, and the ends of epochs E..L-1 (an epoch before L of
which it took every batch counts as complete: a zjoin consumer's state records no ends). Those still in the
replay buffer come from there (`buffered`), the others are regenerated (`Regenerate`: the serving
layer's catch-up worker makes them again and they arrive through `regenerated`). Everything added
to the stream after the join (from item `head` on) is its live part. It is delivered, per portion,
in index order, each epoch's batches before that epoch's end, epoch after epoch; then `GoLive(cursor)`:
the book sends it the live stream from item `cursor` on. While it catches up it does not hold the
replay buffer (the others are not held up): a live item that leaves the buffer before it is live
is kept for it (its batches join what it lacks, an end closes that epoch) and the cursor moves past.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tensorcom.transport.resume import ResumePlan
from tensorcom.transport.sharing._records import Item

MAX_EPOCHS = 64  # epochs of portion counts kept (how far back a restarted consumer may resume)


@dataclass(frozen=True)
class Regenerate:
    """Ask the serving layer for batches `indices` (ascending) of portion `portion` of `workers` of
    `stream`, epoch `epoch`."""

    stream: str
    epoch: int
    portion: int
    workers: int
    indices: tuple


@dataclass(frozen=True)
class GoLive:
    """The consumer has caught up: send it the live stream from item `cursor` on."""

    cursor: int


@dataclass
class _Epoch:
    """What a catching-up consumer lacks of one epoch: per portion the indices, in order; the items
    gathered for them; the end to deliver after them (None: the epoch goes on live)."""

    epoch: int
    wants: dict[int, deque] = field(default_factory=dict)
    have: dict[tuple[int, int], Item] = field(default_factory=dict)
    end: Item | None = None

    def lacks(self) -> int:
        return sum(len(indices) for indices in self.wants.values())


@dataclass
class _Catching:
    """One catching-up consumer: its stream, its epochs in order, the cursor of its live part."""

    stream: str
    workers: int
    epochs: deque
    cursor: int

    def epoch(self, number: int) -> _Epoch:
        """Its plan of epoch `number` (appended when the live stream reached a new epoch)."""
        for plan in self.epochs:
            if plan.epoch == number:
                return plan
        plan = _Epoch(number)
        self.epochs.append(plan)
        return plan


class CatchUp:
    """The live positions of a stream's portions and the consumers catching up (module docstring)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int, int], int] = {}  # (stream, epoch, v) -> batches that entered
        self.workers: dict[str, int] = {}  # stream -> V
        self.catching: dict[Any, _Catching] = {}
        self.regenerating = 0  # batches asked of the catch-up worker and not yet arrived
        self._newest = -1  # the newest epoch counted

    def index(self, stream: str, epoch: int, portion: int) -> int:
        """The index the next batch of (stream, epoch, portion) takes when it has none of its own."""
        return self.counts.get((stream, epoch, portion), 0)

    def passing(self, item: Item) -> None:
        """`item` entered the stream: count its portion's batch."""
        if item.portion is None:
            return
        stream, v, workers, index = item.portion
        key = (stream, item.epoch, v)
        self.counts[key] = max(self.counts.get(key, 0), index + 1)
        self.workers[stream] = workers
        if item.epoch > self._newest:  # a new epoch: forget the counts of the oldest
            self._newest = item.epoch
            self.counts = {k: n for k, n in self.counts.items() if k[1] > item.epoch - MAX_EPOCHS}

    def join(self, peer: Any, record: dict, buffered: list, head: int, live_epoch: int,
             used: Any = frozenset()) -> list | None:
        """`peer` joined with `record` (a consumer state) while the buffer holds `buffered` (items,
        oldest first), the next item is `head` and the stream is in `live_epoch`: the regenerations to
        ask for, or None when the record has nothing to catch up on here (or is not a consumer state:
        a consumer's message must not stop the server). `used`: keys (Item.key) of batches it does
        not lack although its record lacks them (split: other ranks have them)."""
        try:
            names = [name for name in record["streams"] if name in self.workers]
            resume = ResumePlan.from_state(record, names[0]) if names else None
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        if resume is None or resume.portions != self.workers[resume.stream]:
            return None
        first = max([resume.epoch, *(e for e, v in resume.consumed if len(resume.taken(e, v)))])
        if first > live_epoch:
            return None
        catching = _Catching(resume.stream, resume.portions, deque(), head)
        for epoch in range(first, live_epoch + 1):
            plan = catching.epoch(epoch)
            for v in range(resume.portions):
                missing = resume.taken(epoch, v).missing(self.index(resume.stream, epoch, v))
                plan.wants[v] = deque(i for i in missing if (resume.stream, epoch, v, i) not in used)
            if epoch < live_epoch:
                plan.end = Item(-1, epoch, sum(self.index(resume.stream, epoch, v) for v in range(resume.portions)))
        while len(catching.epochs) > 1 and not catching.epochs[0].lacks():
            catching.epochs.popleft()  # it had all of that epoch (its end too: it went on to the next)
        self.catching[peer] = catching
        for item in buffered:
            self._gather(catching, item)
        return self._regenerations(catching)

    def _gather(self, catching: _Catching, item: Item) -> bool:
        """Keep `item` for `catching` when it is one it lacks (an end closes its epoch's plan)."""
        if item.is_end:
            for plan in catching.epochs:
                if plan.epoch == item.epoch and plan.end is not None:
                    plan.end = item
                    return True
            return False
        if item.portion is None or item.portion[0] != catching.stream:
            return False
        v, index = item.portion[1], item.portion[3]
        for plan in catching.epochs:
            if plan.epoch == item.epoch and index in plan.wants.get(v, ()):
                plan.have[(v, index)] = item
                return True
        return False

    def _regenerations(self, catching: _Catching) -> list[Regenerate]:
        asks = []
        for plan in catching.epochs:
            for v, indices in plan.wants.items():
                lacking = tuple(i for i in indices if (v, i) not in plan.have)
                if lacking:
                    asks.append(Regenerate(catching.stream, plan.epoch, v, catching.workers, lacking))
                    self.regenerating += len(lacking)
        return asks

    def dropped(self, item: Item) -> None:
        """`item` left the replay buffer: a consumer catching up that would have had it live keeps it."""
        for catching in self.catching.values():
            if item.index < catching.cursor:
                continue
            catching.cursor = item.index + 1
            plan = catching.epoch(item.epoch)
            if item.is_end:
                plan.end = item
            elif item.portion is not None and item.portion[0] == catching.stream:
                v, index = item.portion[1], item.portion[3]
                plan.wants.setdefault(v, deque()).append(index)
                plan.have[(v, index)] = item

    def regenerated(self, item: Item) -> None:
        """A batch the catch-up worker made again: to each catching-up consumer that lacks it."""
        self.regenerating = max(self.regenerating - 1, 0)
        for catching in self.catching.values():
            self._gather(catching, item)

    def give_up(self, asks: list[Regenerate]) -> int:
        """Those batches cannot be made again: nobody waits for them; returns how many were lacked."""
        lost = 0
        for ask in asks:
            self.regenerating = max(self.regenerating - len(ask.indices), 0)
            for catching in self.catching.values():
                for plan in catching.epochs:
                    if plan.epoch == ask.epoch and catching.stream == ask.stream and ask.portion in plan.wants:
                        kept = deque(i for i in plan.wants[ask.portion]
                                     if i not in ask.indices or (ask.portion, i) in plan.have)
                        lost += len(plan.wants[ask.portion]) - len(kept)
                        plan.wants[ask.portion] = kept
        return lost

    def sends(self, peer: Any, free: int) -> list:
        """What to deliver to `peer` now, in order: batches (at most `free`) and ends; GoLive last
        when it has everything it lacked."""
        catching = self.catching[peer]
        out: list = []
        while catching.epochs:
            plan = catching.epochs[0]
            for v, indices in plan.wants.items():
                while indices and (v, indices[0]) in plan.have and free > 0:
                    out.append(plan.have.pop((v, indices.popleft())))
                    free -= 1
            if plan.lacks():
                return out
            if plan.end is not None:
                out.append(plan.end)
            catching.epochs.popleft()
        del self.catching[peer]
        return [*out, GoLive(catching.cursor)]

    def remaining(self, peer: Any) -> int | None:
        """Batches `peer` still lacks (None: it is not catching up)."""
        catching = self.catching.get(peer)
        return None if catching is None else sum(plan.lacks() for plan in catching.epochs)

    def first_epoch(self, peer: Any, default: int) -> int:
        """The epoch `peer` catches up from (`default` when it lacks nothing)."""
        catching = self.catching.get(peer)
        return catching.epochs[0].epoch if catching is not None and catching.epochs else default

    def forget(self, peer: Any) -> None:
        self.catching.pop(peer, None)


def latest(record: dict) -> dict:
    """`record` (a consumer state) with, per stream, only what the catch-up reads: the shares of the
    epochs from the latest one it took a batch of (the rule above), so that the join that carries it
    stays small however long the job ran."""
    streams = {}
    for name, entry in record.get("streams", {}).items():
        shares = entry.get("shares", [])
        first = max([entry.get("epoch", 0), *(s["epoch"] for s in shares if s.get("batches"))])
        streams[name] = {**entry, "epoch": first, "shares": [s for s in shares if s["epoch"] >= first]}
    return {**record, "streams": streams}
