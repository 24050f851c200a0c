"""The base of the sharing books (tensorcom.transport.sharing.books: the rules): consumers, the
min_consumers gate, reconnects and expiry, the counts both modes keep. Pure (no zmq)."""

from __future__ import annotations

from typing import Any

from tensorcom.checks import positive
from tensorcom.transport.sharing._records import Consumer, Welcome

MAX_DEPARTED = 64  # consumers whose window expired that the book still knows, should they come back


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

    def ack(self, peer: Any, upto: int, waited: tuple[float, float] | None = None) -> None:
        """A consumer's cumulative acknowledgement (unknown peers are ignored: e.g. a stale session's),
        with the data-wait totals (wait, step) it reported, when it did (its last ones are kept)."""
        consumer = self.consumers.get(peer)
        if consumer is not None:
            consumer.ack(upto)
            if waited is not None:
                consumer.waited.update(*waited)

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
