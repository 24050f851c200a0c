"""Share mode's book (`zshare`): every consumer gets every item, from a replay buffer; the rules are
in tensorcom.transport.sharing.books. A consumer that joins with its record catches up first
(tensorcom.transport.sharing.catch_up). Pure (no zmq)."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from tensorcom.transport.sharing._book import _Book
from tensorcom.transport.sharing._records import Consumer, Item, Send, Welcome

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

    def head_index(self) -> int:
        return self.head

    def join(self, peer: Any, name: str, credit: int) -> Welcome:
        """Add a consumer; it starts at the oldest buffered item of the current epoch."""
        consumer = self._new_consumer(peer, name, credit)
        base = self.buffer[0].index if self.buffer else self.head
        consumer.cursor = max(self.epoch_start, base)
        first = self.buffer[consumer.cursor - base] if consumer.cursor < self.head else None
        epoch, pos = (first.epoch, first.pos) if first is not None else (self.epoch, self.pos)
        consumer.position = (epoch, pos)
        return Welcome(self.mode, epoch, pos)

    def remove(self, peer: Any) -> Consumer | None:
        """Forget a consumer that left or died; count what it had not acknowledged."""
        consumer = self.consumers.pop(peer, None)
        if consumer is not None:
            self.lost_batches += consumer.pending_batches()
        return consumer

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
        return bool(self.consumers) and all(c.first_needed() > front for c in self.consumers.values())

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
                if consumer.first_needed() <= front:
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
        while len(self.buffer) > self.replay and self._front_free():
            self.buffer.popleft()

    def sends(self) -> list[Send]:
        """Everything that may be sent now: each consumer's next items, batches within its credit."""
        result = []
        base = self.buffer[0].index if self.buffer else self.head
        for consumer in self.consumers.values():
            if not consumer.up:
                continue
            result.extend(consumer.resends())
            while consumer.cursor < self.head and not consumer.resend:
                item = self.buffer[consumer.cursor - base]
                if not item.is_end and consumer.free <= 0:
                    break
                result.append(consumer.deliver(item))
                consumer.cursor += 1
        return result

    def done(self) -> bool:
        """The stream ended and every consumer has had and acknowledged all of it, its epoch ends too
        (an end lost in a reset is sent again when the consumer resumes, before the server says bye)."""
        return self.ended and all(c.cursor == self.head and c.settled() for c in self.consumers.values())

    def undelivered(self) -> dict[str, int]:
        """Per consumer name: batches not yet acknowledged (sent or not)."""
        base = self.buffer[0].index if self.buffer else self.head
        result = {}
        for c in self.consumers.values():
            unsent = sum(1 for item in list(self.buffer)[max(c.cursor - base, 0):] if not item.is_end)
            if unsent + c.pending_batches():
                result[c.name] = unsent + c.pending_batches()
        return result
