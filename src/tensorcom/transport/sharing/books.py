"""Who gets which batch in the sharing schemes: the delivery rules of a `zshare` / `zsplit` server,
without sockets (no zmq import), so every rule is testable with plain values.

The server feeds a book the stream it serves and the consumers' messages, and sends what it says:

    book.join(peer, name, credit) -> Welcome       a consumer joined (credit: its prefetch depth)
    book.ack(peer, upto)                           it consumed its deliveries 1..upto
    book.remove(peer)                              it left or died (split: its batches go to others)
    book.can_take()                                may the server take the next item of its stream?
    book.add(item)                                 the next item: a batch or an epoch's end
    book.sends() -> [Send]                         what to send now, within every consumer's credit
    book.done()                                    the stream ended; everything, ends too, was acknowledged
    book.disconnect(peer, now, quiet)              its connection closed: nothing is sent to it meanwhile
    book.resume(peer, upto) -> Welcome | None      it reconnected: its session goes on (None: join anew)
    book.expire(now, window, hold) -> [peer]       remove those down for `window` s (kept as departed)

Reconnects: deliveries (batches and epoch ends) are numbered 1, 2, ... per consumer; after a
resume, what was delivered and not acknowledged is delivered again first, with the same numbers, so
the consumer drops what it has. A departed consumer that comes back goes on with its session when
it still can (share: the buffer still holds what it lacks; split: the batches it used are taken back
from the queue while nobody else has them, and its numbers go on after its old ones).

Split, held batches: a consumer that went quiet before its connection closed (a partition, a
pause) may have used batches whose acknowledgements the fault lost; only its return says which. So
they stay its own `hold` s past the window (the epoch's end waits): back in time, it keeps those up
to its `upto`, the rest go to others; after `hold` all go to others (what it used is then had
twice). One that left, was removed, or closed while talking (killed) gives them back at once.

Credit: a consumer joins with `credit` (its prefetch depth) and acknowledges each batch when it hands
it to its caller; a server never has more than `credit` unacknowledged batches out to one consumer, so
memory is bounded on both sides whatever the speeds (ends need no credit); acknowledgements are
cumulative.

Share mode (`ShareBook`): every consumer gets every item in stream order. Items live in a replay
buffer of at most `replay` items; the server takes a new item only when the buffer has room or its
oldest item is no longer needed (sent to and acknowledged by every consumer), so it paces to the
slowest consumer. With policy "detach" the consumers that still hold the oldest item of a full buffer
after `detach_after` seconds (an acknowledgement in flight is not falling behind) are detached
instead (`take_detached()`), so the others go on. A consumer that joins mid-epoch starts at
the oldest buffered item of the current epoch (the epoch's first batch when it is still buffered) and
its Welcome says which (epoch, position).

Split mode (`SplitBook`): each batch goes to exactly one consumer, the one with the most free credit.
At the end of an epoch the server waits until every batch of the epoch is acknowledged, then sends the
end to every consumer and only then starts the next epoch. Batches a removed consumer had not
acknowledged go back to the front of the queue, so the union over consumers is every batch, once.

Both: nothing is taken from the stream before `min_consumers` consumers have joined.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from tensorcom.checks import positive
from tensorcom.transport.sharing._records import Consumer, Item, Send, Welcome

__all__ = ["Consumer", "Item", "Send", "ShareBook", "SplitBook", "Welcome", "make_book"]

POLICIES = ("pace", "detach")
MAX_DEPARTED = 64  # consumers whose window expired that the book still knows, should they come back
DETACH_AFTER = 1.0  # seconds a full replay buffer may hold the stream before its holders are detached


class _Book:
    """What both modes share: consumers, the min_consumers gate, the stream's epoch count, and the
    counts of batches lost (share) or sent again (split) because a consumer was removed."""

    mode = ""

    def __init__(self, *, min_consumers: int = 1, replay: int = 16):
        self.min_consumers = positive("min_consumers", min_consumers)
        self.replay = positive("replay", replay)
        self.consumers: dict[Any, Consumer] = {}
        self.started = False  # min_consumers reached once: the stream flows from then on
        self.epoch = 0  # the epoch of the next batch taken from the stream
        self.pos = 0  # its position in that epoch
        self.ended = False  # the stream has no more items
        self.lost_batches = 0  # batches that a removed consumer still had unacknowledged (share mode)
        self.reassigned = 0  # batches sent again after their consumer was removed (split mode)
        self.detached: list[tuple[Any, str]] = []  # (peer, reason) detached since take_detached() (share mode)
        self.departed: dict[Any, Consumer] = {}  # consumers expired by expire(), oldest first

    def _gate_open(self) -> bool:
        if not self.started and len(self.consumers) >= self.min_consumers:
            self.started = True
        return self.started

    def _new_consumer(self, peer: Any, name: str, credit: int) -> Consumer:
        if peer in self.consumers:
            raise ValueError(f"consumer {peer!r} joined twice")
        consumer = Consumer(peer, name, positive("credit", credit))
        self.consumers[peer] = consumer
        self.departed.pop(peer, None)
        self._gate_open()
        return consumer

    def ack(self, peer: Any, upto: int) -> None:
        """A consumer's cumulative acknowledgement (unknown peers are ignored: e.g. a stale session's)."""
        consumer = self.consumers.get(peer)
        if consumer is not None:
            consumer.ack(upto)

    def disconnect(self, peer: Any, now: float, quiet: bool = True) -> None:
        """The consumer's connection closed: nothing is sent to it until it resumes (or expires).
        `quiet`: nothing came from it for a while before (split: its batches are held, see above)."""
        consumer = self.consumers.get(peer)
        if consumer is not None and consumer.up:
            consumer.up, consumer.down_since, consumer.quiet = False, now, quiet

    def resume(self, peer: Any, upto: int) -> Welcome | None:
        """A consumer that reconnected (its join names this server): its session goes on,
        acknowledged up to `upto`, what it lacks delivered again (a departed one's too, when it still
        can be); None when there is no session to go on with (it joins anew)."""
        consumer = self.consumers.get(peer)
        if consumer is not None:
            consumer.ack(upto)
            consumer.rewind()
        else:
            departed = self.departed.pop(peer, None)
            consumer = None if departed is None else self._revive(departed, upto)
            if consumer is None:
                return None
            self.consumers[peer] = consumer
        consumer.up, consumer.down_since = True, None
        return Welcome(self.mode, *consumer.position, resumed=True, n=consumer.acked)

    def expire(self, now: float, window: float, hold: float = 0.0) -> list:
        """Remove the consumers whose connection has been down for `window` seconds (kept as departed,
        should they come back; split: the batches of quiet ones held `hold` s more); returns their peers."""
        gone = [p for p, c in self.consumers.items() if not c.up and now - c.down_since >= window]
        for peer in gone:
            self.departed[peer] = self._depart(peer, now + hold if self.consumers[peer].quiet else now)
            while len(self.departed) > MAX_DEPARTED:
                self._release(self.departed.pop(next(iter(self.departed))))
        for consumer in self.departed.values():
            if consumer.held_until is not None and now >= consumer.held_until:
                self._release(consumer)
        return gone

    def _depart(self, peer: Any, held_until: float) -> Consumer | None:
        """Remove an expired consumer (split mode holds its batches until `held_until`)."""
        return self.remove(peer)

    def _release(self, consumer: Consumer) -> None:
        """A departed consumer's held batches go to others (split mode)."""

    def take_detached(self) -> list[tuple[Any, str]]:
        """Consumers detached since the last call, with the reason to tell them."""
        detached, self.detached = self.detached, []
        return detached

    def end_stream(self) -> None:
        """No more items will be added."""
        self.ended = True

    def reports(self) -> list[dict]:
        return [c.report(self.head_index()) for c in self.consumers.values()]

    def head_index(self) -> int | None:
        return None


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


class SplitBook(_Book):
    """Split mode: each batch goes to exactly one consumer (module docstring)."""

    mode = "split"

    def __init__(self, *, min_consumers: int = 1, replay: int = 16):
        super().__init__(min_consumers=min_consumers, replay=replay)
        self.pending: deque[Item] = deque()  # batches not yet sent (or sent to a consumer now gone)
        self.closing: Item | None = None  # the current epoch's end, once the stream reached it

    def join(self, peer: Any, name: str, credit: int) -> Welcome:
        consumer = self._new_consumer(peer, name, credit)
        consumer.position = (self.epoch, self.pos)
        return Welcome(self.mode, self.epoch, self.pos)

    def remove(self, peer: Any) -> Consumer | None:
        """Forget a consumer; its unacknowledged batches go back to the front of the queue."""
        consumer = self.consumers.pop(peer, None)
        if consumer is not None:
            self._give_back(consumer)
        return consumer

    def _depart(self, peer: Any, held_until: float) -> Consumer:
        consumer = self.consumers.pop(peer)
        consumer.held_until = held_until
        return consumer

    def _release(self, consumer: Consumer) -> None:
        if consumer.held_until is not None:
            consumer.held_until = None
            self._give_back(consumer)

    def _give_back(self, consumer: Consumer) -> None:
        """A consumer's unacknowledged batches go back to the front of the queue."""
        returned = [item for item in [*(item for _, item in consumer.unacked), *consumer.resend] if not item.is_end]
        self.reassigned += len(returned)
        self.pending.extendleft(reversed(returned))

    def _held(self) -> int:
        """Batches held for departed consumers (module docstring)."""
        return sum(c.pending_batches() for c in self.departed.values() if c.held_until is not None)

    def _revive(self, consumer: Consumer, upto: int) -> Consumer:
        """A departed consumer back: the batches it had up to `upto` are its own (it used them): still
        held, they count as acknowledged; given to others, they are taken back from the queue while
        nobody else has them yet. The rest go to others. Its numbers go on past everything it was
        sent, so it drops its old copies; ends it lacks are sent again."""
        if consumer.held_until is not None:
            consumer.ack(upto)
            self._release(consumer)
        delivered = [*consumer.unacked, *((None, item) for item in consumer.resend)]
        for number, item in delivered:
            if number is not None and number <= upto and not item.is_end and item in self.pending:
                self.pending.remove(item)
                self.reassigned -= 1
        consumer.resend = deque(item for number, item in delivered if item.is_end and not (number and number <= upto))
        consumer.unacked.clear()
        consumer.acked, consumer.outstanding = consumer.sent, 0
        return consumer

    def can_take(self) -> bool:
        """True when the next item may be added: the stream flows, the epoch is not closing, and
        fewer than `replay` batches wait unsent."""
        return (not self.ended and self._gate_open() and self.closing is None
                and len(self.pending) < self.replay)

    def add(self, item: Item) -> None:
        if item.is_end:
            self.closing = item
            self.epoch, self.pos = item.epoch + 1, 0
        else:
            self.pending.append(item)
            self.epoch, self.pos = item.epoch, item.pos + 1

    def _outstanding(self) -> int:
        return sum(c.pending_batches() for c in self.consumers.values())

    def sends(self) -> list[Send]:
        """Pending batches to the consumers with the most free credit; the epoch's end to everyone
        once all of its batches are acknowledged."""
        up = [c for c in self.consumers.values() if c.up]
        result = [send for c in up for send in c.resends()]
        while self.pending and up:
            consumer = max(up, key=lambda c: (c.free, -c.sent))
            if consumer.free <= 0:
                break
            result.append(consumer.deliver(self.pending.popleft()))
        if (self.closing is not None and not self.pending and self.consumers and not self._outstanding()
                and not self._held()):
            for consumer in self.consumers.values():  # one that is away gets it when it is back
                if consumer.up:
                    result.append(consumer.deliver(self.closing))
                else:
                    consumer.resend.append(self.closing)
            self.closing = None
        return result

    def done(self) -> bool:
        """The stream ended, every batch was acknowledged and every consumer acknowledged its ends."""
        return (self.ended and self.closing is None and not self.pending and not self._held()
                and all(c.settled() for c in self.consumers.values()))

    def undelivered(self) -> dict[str, int]:
        """Batches not acknowledged by anyone: pending ones under "(nobody)", the rest per consumer."""
        result: dict[str, int] = {}
        for c in [*self.consumers.values(), *(c for c in self.departed.values() if c.held_until is not None)]:
            if c.pending_batches():
                result[c.name] = result.get(c.name, 0) + c.pending_batches()
        if self.pending:
            result["(nobody)"] = len(self.pending)
        return result


def make_book(mode: str, **options: Any) -> ShareBook | SplitBook:
    """The book of `mode` ("share" or "split") with `options` (min_consumers, replay; policy for share)."""
    if mode == "share":
        return ShareBook(**options)
    if mode == "split":
        options.pop("policy", None)
        return SplitBook(**options)
    raise ValueError(f"mode must be 'share' or 'split', got {mode!r}")
