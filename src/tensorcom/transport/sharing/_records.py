"""What a sharing book (tensorcom.transport.sharing.books) records: the items of the served stream, the
sends it orders, the welcome it answers a join with, and each consumer's deliveries, numbers,
acknowledgements and credit across reconnects. Pure (no zmq)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tensorcom.rates import Rates
from tensorcom.transport.data_wait import ReportedWait


@dataclass(frozen=True)
class Item:
    """One item of the served stream: a batch (`frames`: its wire message) or the end of an epoch
    (`frames` None). `index` counts items from 0 over the stream's life (-1: a batch made again for a
    consumer catching up, or an end made for it); `pos` is the batch's position in its epoch (for an
    end: the number of batches of the epoch); `portion`: (stream, v, V, index within (epoch, v)) of a
    batch of a served stream."""

    index: int
    epoch: int
    pos: int
    frames: Any = None
    samples: int = 0
    nbytes: int = 0
    portion: tuple | None = None

    @property
    def is_end(self) -> bool:
        return self.frames is None

    @property
    def key(self) -> tuple | None:
        """(stream, epoch, v, index) of a batch of a served stream, else None."""
        return None if self.portion is None else (self.portion[0], self.epoch, self.portion[1], self.portion[3])


@dataclass(frozen=True)
class Welcome:
    """What a joining consumer is told: the mode, where it starts (epoch, position in it); for a
    session that goes on after a reconnect, `resumed` and `n`, the last delivery it has."""

    mode: str
    epoch: int
    pos: int
    resumed: bool = False
    n: int = 0


@dataclass(frozen=True)
class Send:
    """Send `item` to `peer`; `number` is the delivery number of a batch (0 for an epoch's end)."""

    peer: Any
    item: Item
    number: int


@dataclass
class Consumer:
    """A joined consumer as the book sees it: its credit, deliveries and acknowledgements, whether its
    connection is up, and what the server reports of it (position, rate)."""

    peer: Any
    name: str
    credit: int
    sent: int = 0  # the last delivery number (batches and ends are numbered alike)
    acked: int = 0  # deliveries acknowledged (cumulative)
    unacked: deque = field(default_factory=deque)  # (number, item) of delivered, unacknowledged items
    resend: deque = field(default_factory=deque)  # items to deliver again, first, after a reconnect
    outstanding: int = 0  # unacknowledged batches (what credit counts; ends need none)
    batches: int = 0  # batches acknowledged
    cursor: int = 0  # share mode: index of the next item to send
    samples: int = 0  # samples acknowledged
    position: tuple[int, int] = (0, 0)  # (epoch, pos) of the last item sent
    up: bool = True  # its connection is there (else nothing is sent to it)
    down_since: float | None = None
    quiet: bool = False  # nothing came from it for a while before its connection closed
    held_until: float | None = None  # split, departed: its unacknowledged batches are held for it until then
    catching: int | None = None  # batches it lacks while it catches up (None: it is live)
    used: set | None = None  # split: the keys (Item.key) of the batches it acknowledged, recent epochs
    rates: Rates = field(default_factory=Rates)  # its acknowledged batches and samples (tensorcom.rates)
    waited: ReportedWait = field(default_factory=ReportedWait)  # the data wait it last reported

    @property
    def free(self) -> int:
        """Credit not in use: batches the server may still send now."""
        return self.credit - self.outstanding

    def deliver(self, item: Item) -> Send:
        """Record sending `item` (the next delivery number) to this consumer and return the Send."""
        self.position = (item.epoch, item.pos)
        self.sent += 1
        self.unacked.append((self.sent, item))
        self.outstanding += not item.is_end
        return Send(self.peer, item, self.sent)

    def ack(self, upto: int) -> list[Item]:
        """Acknowledge deliveries up to `upto` (ignoring stale or future numbers); returns the batches."""
        done = []
        while self.unacked and self.unacked[0][0] <= min(upto, self.sent):
            item = self.unacked.popleft()[1]
            if not item.is_end:
                done.append(item)
        self.acked = max(self.acked, min(upto, self.sent))
        self.outstanding -= len(done)
        if self.used is not None:
            self.used.update(item.key for item in done if item.key is not None)
        samples = sum(item.samples for item in done)
        self.batches, self.samples = self.batches + len(done), self.samples + samples
        if done:
            self.rates.add(len(done), samples, sum(item.nbytes for item in done))
        return done

    def rewind(self) -> None:
        """After a reconnect: what was delivered and not acknowledged is delivered again, first, with
        the same numbers (acked + 1, ...), so the consumer can drop what it already has."""
        self.resend = deque([item for _, item in self.unacked] + list(self.resend))
        self.unacked.clear()
        self.sent, self.outstanding = self.acked, 0

    def resends(self) -> list[Send]:
        """Deliver what rewind() queued, within credit."""
        result = []
        while self.resend and (self.resend[0].is_end or self.free > 0):
            result.append(self.deliver(self.resend.popleft()))
        return result

    def pending_batches(self) -> int:
        """Batches delivered or to deliver again, not acknowledged."""
        return self.outstanding + sum(not item.is_end for item in self.resend)

    def settled(self) -> bool:
        """Everything delivered to this consumer, epoch ends too, was acknowledged."""
        return not self.unacked and not self.resend

    def first_needed(self) -> int:
        """Share mode: the lowest item index this consumer still needs (unacknowledged or unsent)."""
        if self.unacked:
            return self.unacked[0][1].index
        return self.resend[0].index if self.resend else self.cursor

    def report(self, head: int | None = None) -> dict:
        """Position, lag (items behind the stream's head, share mode), batches and samples acknowledged
        since it joined ("acked", "samples"), its samples_per_s over the window of tensorcom.rates, and
        credit, "catching_up" (batches a restarted consumer still lacks; 0 when live), and the data wait
        it reported ("data_wait": recent fraction, "data_wait_s": total; 0 until it reports), for reports."""
        return {"name": self.name, "epoch": self.position[0], "pos": self.position[1],
                "lag": None if head is None else max(head - self.cursor, 0), "acked": self.batches,
                "samples": self.samples, "samples_per_s": self.rates.as_dict()["samples_per_s"],
                "credit": self.credit, "free": self.free, "catching_up": self.catching or 0,
                **self.waited.as_dict()}
