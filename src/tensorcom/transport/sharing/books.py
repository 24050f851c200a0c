"""Who gets which batch in the sharing schemes: the delivery rules of a `zshare` / `zsplit` server,
without sockets (no zmq import), so every rule is testable with plain values.

The server feeds a book the stream it serves and the consumers' messages, and sends what it says:

    book.join(peer, name, credit) -> Welcome       a consumer joined (credit: its prefetch depth)
    book.ack(peer, upto, waited)                   it consumed its deliveries 1..upto; its data wait
                                                   (wait, step) s, when reported (the last kept per consumer)
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

Split mode, a restarted rank (a join with its consumer state, tensorcom.transport.sharing.catch_up):
it lacks the batches of its epochs that its record lacks, that no consumer has or will have (in the
queue, unacknowledged or held) and that no consumer up or gone by leaving acknowledged: the batches
its crashed predecessor used after the checkpoint. They are made again for it (`take_regenerations`)
and the epoch's end waits for them; then it takes from the queue as the others do. So the job's
union stays every batch once. Each consumer keeps the keys of what it acknowledged for that (this
epoch and the one before).

Both: nothing is taken from the stream before `min_consumers` consumers have joined.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from tensorcom.transport.sharing._book import MAX_DEPARTED, _Book
from tensorcom.transport.sharing._records import Consumer, Item, Send, Welcome
from tensorcom.transport.sharing.catch_up import CatchUp, GoLive, Regenerate
from tensorcom.transport.sharing.share_book import ShareBook

__all__ = ["MAX_DEPARTED", "Consumer", "Item", "Send", "ShareBook", "SplitBook", "Welcome", "make_book"]


class SplitBook(_Book):
    """Split mode: each batch goes to exactly one consumer (module docstring)."""

    mode = "split"

    def __init__(self, *, min_consumers: int = 1, replay: int = 16):
        super().__init__(min_consumers=min_consumers, replay=replay)
        self.pending: deque[Item] = deque()  # batches not yet sent (or sent to a consumer now gone)
        self.closing: Item | None = None  # the current epoch's end, once the stream reached it
        self.catch_up = CatchUp()  # the portions' live positions and the restarted ranks catching up
        self.regenerations: list[Regenerate] = []  # asked since take_regenerations()
        self.used_left: set = set()  # keys of the batches acknowledged by consumers that left or were removed

    def join(self, peer: Any, name: str, credit: int, record: dict | None = None) -> Welcome:
        """Add a consumer; with `record` (a restarted rank's state) it first gets what the job lacks."""
        consumer = self._new_consumer(peer, name, credit)
        consumer.used = set()
        consumer.position = (self.epoch, self.pos)
        open_epoch = self.epoch if self.closing is None else self.closing.epoch  # its end is still to come
        asks = None if not record else self.catch_up.join(peer, record, [], 0, open_epoch, self._had(peer))
        if asks is not None:
            self.regenerations.extend(asks)
            consumer.catching = self.catch_up.remaining(peer)
            consumer.position = (self.catch_up.first_epoch(peer, self.epoch), 0)
        return Welcome(self.mode, *consumer.position)

    def _had(self, peer: Any) -> set:
        """Keys of the batches some consumer other than `peer` has, used, or will have (module docstring)."""
        keys = set(self.used_left)
        consumers = [*self.consumers.values(), *self.departed.values()]
        for c in consumers:
            keys |= c.used if c.up and c.peer != peer and c.used else set()
            keys |= {item.key for item in [*(i for _, i in c.unacked), *c.resend] if item.key is not None}
        return keys | {item.key for item in self.pending if item.key is not None}

    def take_regenerations(self) -> list[Regenerate]:
        """The batches to make again for restarted ranks, asked since the last call."""
        asks, self.regenerations = self.regenerations, []
        return asks

    def regenerated(self, item: Item) -> None:
        self.catch_up.regenerated(item)

    def give_up(self, asks: list[Regenerate]) -> None:
        """Batches that cannot be made again: the restarted ranks go on without them."""
        self.catch_up.give_up(asks)

    def remove(self, peer: Any) -> Consumer | None:
        """Forget a consumer; its unacknowledged batches go back to the front of the queue."""
        consumer = self.consumers.pop(peer, None)
        self.catch_up.forget(peer)
        if consumer is not None:
            self._give_back(consumer)
            self.used_left |= consumer.used or set()
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
        self.catch_up.passing(item)
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
        for c in up:
            result.extend(self._catching_up(c) if c.catching is not None and not c.resend else [])
        up = [c for c in up if c.catching is None]
        while self.pending and up:
            consumer = max(up, key=lambda c: (c.free, -c.sent))
            if consumer.free <= 0:
                break
            result.append(consumer.deliver(self.pending.popleft()))
        if (self.closing is not None and not self.pending and self.consumers and not self._outstanding()
                and not self._held() and not self.catch_up.catching):
            self._forget_used(self.closing.epoch - 1)
            for consumer in self.consumers.values():  # one that is away gets it when it is back
                if consumer.up:
                    result.append(consumer.deliver(self.closing))
                else:
                    consumer.resend.append(self.closing)
            self.closing = None
        return result

    def _catching_up(self, consumer: Consumer) -> list[Send]:
        """A restarted rank: what the job lacks, within its credit; then it takes from the queue."""
        result = []
        for action in self.catch_up.sends(consumer.peer, consumer.free):
            if isinstance(action, GoLive):
                consumer.catching = None
            else:
                result.append(consumer.deliver(action))
        if consumer.catching is not None:
            consumer.catching = self.catch_up.remaining(consumer.peer)
        return result

    def _forget_used(self, before: int) -> None:
        """Keys of epochs before `before` are no longer needed."""
        for c in [*self.consumers.values(), *self.departed.values()]:
            c.used = None if c.used is None else {key for key in c.used if key[1] >= before}
        self.used_left = {key for key in self.used_left if key[1] >= before}

    def done(self) -> bool:
        """The stream ended, every batch was acknowledged and every consumer acknowledged its ends."""
        return (not self.catch_up.catching and self.ended and self.closing is None and not self.pending and not self._held()
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
