"""Share mode's book (`zshare`): every consumer gets every item, from a replay buffer; the rules are
in tensorcom.transport.sharing.books. A consumer that joins with its record catches up first
(tensorcom.transport.sharing.catch_up). Pure (no zmq)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from tensorcom.transport.sharing._book import _Book
from tensorcom.transport.sharing._records import Consumer, Item, Send, Welcome
from tensorcom.transport.sharing.catch_up import CatchUp, GoLive, Regenerate

POLICIES = ("pace", "detach")
DETACH_AFTER = 1.0  # seconds a full replay buffer may hold the stream before its holders are detached


class ShareBook(_Book):
    """Share mode: every consumer gets every item (module docstring)."""

    mode = "share"

    def __init__(self, *, min_consumers: int = 1, replay: int = 16, policy: str = "pace",
                 detach_after: float = DETACH_AFTER, clock: Any = time.monotonic):
        super().__init__(min_consumers=min_consumers, replay=replay)
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy, self.detach_after, self.clock = policy, detach_after, clock
        self.blocked_since: float | None = None  # when a full buffer last started to hold the stream
        self.buffer: deque[Item] = deque()
        self.head = 0  # index of the next item to be added
        self.epoch_start = 0  # index of the first item of the current (newest) epoch
        self.catch_up = CatchUp()  # the portions' live positions and the consumers catching up
        self.regenerations: list[Regenerate] = []  # asked since take_regenerations()

    def head_index(self) -> int:
        return self.head

    def join(self, peer: Any, name: str, credit: int, record: dict | None = None) -> Welcome:
        """Add a consumer; it starts at the oldest buffered item of the current epoch, or, joining
        with `record` (its consumer state) that names this stream, catches up first (catch_up)."""
        consumer = self._new_consumer(peer, name, credit)
        asks = None if not record else self.catch_up.join(peer, record, list(self.buffer), self.head, self.epoch)
        if asks is not None:
            self.regenerations.extend(asks)
            consumer.catching = self.catch_up.remaining(peer)
            consumer.cursor = self.head
            consumer.position = (self.catch_up.first_epoch(peer, self.epoch), 0)
            return Welcome(self.mode, *consumer.position)
        base = self.buffer[0].index if self.buffer else self.head
        consumer.cursor = max(self.epoch_start, base)
        first = self.buffer[consumer.cursor - base] if consumer.cursor < self.head else None
        epoch, pos = (first.epoch, first.pos) if first is not None else (self.epoch, self.pos)
        consumer.position = (epoch, pos)
        return Welcome(self.mode, epoch, pos)

    def remove(self, peer: Any) -> Consumer | None:
        """Forget a consumer that left or died; count what it had not acknowledged."""
        consumer = self.consumers.pop(peer, None)
        self.catch_up.forget(peer)
        if consumer is not None:
            self.lost_batches += consumer.pending_batches()
        return consumer

    def take_regenerations(self) -> list[Regenerate]:
        """The batches to make again for consumers catching up, asked since the last call."""
        asks, self.regenerations = self.regenerations, []
        return asks

    def give_up(self, asks: list[Regenerate]) -> None:
        """Batches that cannot be made again (no catch-up worker): the consumers go on without them
        (counted in lost_batches)."""
        self.lost_batches += self.catch_up.give_up(asks)

    def regenerated(self, item: Item) -> None:
        """A batch made again (its `portion` says which) for the consumers catching up."""
        self.catch_up.regenerated(item)

    def _revive(self, consumer: Consumer, upto: int) -> Consumer | None:
        """A departed consumer back: its session goes on while the buffer still holds what it lacks."""
        lost = consumer.pending_batches()
        consumer.ack(upto)
        consumer.rewind()
        if consumer.first_needed() < (self.buffer[0].index if self.buffer else self.head):
            return None
        self.lost_batches -= lost
        return consumer

    def _front_free(self) -> bool:
        front = self.buffer[0].index  # with no consumer at all, the buffer waits for one
        return bool(self.consumers) and all(c.first_needed() > front for c in self._live())

    def _live(self) -> list[Consumer]:
        """The consumers that hold the buffer: all but those catching up."""
        return [c for c in self.consumers.values() if c.catching is None]

    def can_take(self) -> bool:
        """True when a new item may be added: the stream flows, and the buffer has room or its front
        is consumed by everyone. With policy "detach", consumers that block a full buffer are
        detached here (see take_detached)."""
        if self.ended or not self._gate_open():
            return False
        if len(self.buffer) < self.replay or self._front_free():
            self.blocked_since = None
            return True
        now = self.clock()
        self.blocked_since = now if self.blocked_since is None else self.blocked_since
        if self.policy == "detach" and now - self.blocked_since >= self.detach_after:
            self.blocked_since = None
            front = self.buffer[0].index
            for peer, consumer in list(self.consumers.items()):
                if consumer.catching is None and consumer.first_needed() <= front:
                    self.remove(peer)
                    self.detached.append((peer, f"fell {self.replay} batches behind the stream (policy detach)"))
            return self._front_free()
        return False

    def add(self, item: Item) -> None:
        """Append the stream's next item (its index must be `head`); drop the front when over `replay`."""
        if item.index != self.head:
            raise ValueError(f"item {item.index} added where item {self.head} was expected")
        self.buffer.append(item)
        self.head += 1
        if item.is_end:
            self.epoch, self.pos, self.epoch_start = item.epoch + 1, 0, self.head
        else:
            self.epoch, self.pos = item.epoch, item.pos + 1
        self.catch_up.passing(item)
        while len(self.buffer) > self.replay and self._front_free():
            self.catch_up.dropped(self.buffer.popleft())

    def sends(self) -> list[Send]:
        """Everything that may be sent now: each consumer's next items, batches within its credit."""
        result = []
        base = self.buffer[0].index if self.buffer else self.head
        for consumer in self.consumers.values():
            if not consumer.up:
                continue
            result.extend(consumer.resends())
            if consumer.catching is not None and not consumer.resend:
                result.extend(self._catching_up(consumer))
            while consumer.catching is None and consumer.cursor < self.head and not consumer.resend:
                item = self.buffer[consumer.cursor - base]
                if not item.is_end and consumer.free <= 0:
                    break
                result.append(consumer.deliver(item))
                consumer.cursor += 1
        return result

    def _catching_up(self, consumer: Consumer) -> list[Send]:
        """A consumer catching up: what it lacks, within its credit; then it goes live."""
        result = []
        for action in self.catch_up.sends(consumer.peer, consumer.free):
            if isinstance(action, GoLive):
                consumer.cursor, consumer.catching = action.cursor, None
            else:
                result.append(consumer.deliver(action))
        if consumer.catching is not None:
            consumer.catching = self.catch_up.remaining(consumer.peer)
        return result

    def done(self) -> bool:
        """The stream ended and every consumer has had and acknowledged all of it, its epoch ends too
        (an end lost in a reset is sent again when the consumer resumes, before the server says bye)."""
        return self.ended and all(c.catching is None and c.cursor == self.head and c.settled()
                                  for c in self.consumers.values())

    def undelivered(self) -> dict[str, int]:
        """Per consumer name: batches not yet acknowledged (sent or not)."""
        base = self.buffer[0].index if self.buffer else self.head
        result = {}
        for c in self.consumers.values():
            unsent = sum(1 for item in list(self.buffer)[max(c.cursor - base, 0):] if not item.is_end)
            unsent += c.catching or 0
            if unsent + c.pending_batches():
                result[c.name] = unsent + c.pending_batches()
        return result
