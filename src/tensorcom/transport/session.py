"""Sessions of the plain schemes (zpush/zpull, zrpush/zrpull, zpub/zsub, zrpub/zrsub between protocol-2
peers): what a sender has sent and its receivers confirmed, and what a receiver has from each sender.
Pure (no zmq import): the socket code (`_outbound`, `_inbound`) feeds these and acts on their answers.

A session belongs to a sender's id, not to a TCP connection: ZeroMQ re-establishes dropped
connections, and a session outlives any of them. Each protocol-2 message a sender sends over
tcp or ipc carries a `reply` field (docs/protocol.md 4.3): the addresses of the sender's
acknowledgement socket, a token, the sender's `floor` (every batch with a lower seq is confirmed)
and the message's transmission number `tx` (one per send, resends included). A receiver connects
to that socket, confirms the transmissions it took from its data socket, and reports the highest
it has seen.

    log = SendLog()                           # sender side
    tx = log.transmit(key, frames, nbytes)    # before each send: the tx to write into the message
    log.attach(receiver) / log.detach(receiver)
    log.confirm(receiver, txs, high)          # an acknowledgement arrived
    log.connections = n                       # data connections open now (the socket monitor's)
    log.leave(receiver)                       # its link went down (it is back with its next ack)
    log.settle(tx)                            # the liveness window passed since transmission tx
    for entry in log.lost(): ...              # resend entry.frames with a new log.transmit(...)

The resend rule: ZeroMQ delivers each data connection's messages in order, so a receiver that saw a
transmission later than t and not t never will: t was on a connection that dropped. A message is
lost when every attached receiver has seen a later transmission than its last one and none
confirmed it, and every data connection has an attached receiver (a peer that does not acknowledge,
a tensorcom 0.1 receiver, makes nothing provable: nothing is resent, and nothing is kept past the
log's limits).

Connections are counted, not named: the sender cannot tell which receiver is behind which data
connection. So a transmission sent while some data connection had no present receiver (one that
has not confirmed anything yet, or whose link is down: `leave`) may have gone to that one, which
may have taken it and not told yet; when that connection drops and the others saw later, nothing
proves it lost (another receiver that reported since may have been one that was not connected
then). Such a transmission is `stuck`: it is confirmed when its taker reports, or it waits until
the liveness window passed since it was sent (`settle`): a receiver that took it and is still
alive has reported by then (it links to the sender with its first message), so if none confirmed
it the rule above applies (a receiver that took it and died took it with it: it is resent to the
others). (What counting cannot see: a present receiver whose data connection alone is down while a
newcomer's connection is open; the newcomer then passes for it until it confirms.) A message that
was the oldest one proven lost MAX_SENDS - 1 times is given up
(counted in `refused`): its receivers refuse it (a frame over their max_message_size makes ZeroMQ drop
the connection it came on, and what follows it on that connection); so such a suspect is resent
alone, and only the oldest loss of a proof counts against a message. Markers
are entries too; a batch resent after its epoch's marker reaches the receiver in its next pass.

    arrivals = Arrivals()                     # receiver side, one per sender
    fresh = arrivals.arrive(seq, floor, tx)   # False: a duplicate (a resend of what came), drop it
    txs, high = arrivals.take()               # what to confirm now (taken batches again until the floor passes)
    arrivals.lift(floor)                      # the sender told its floor over the link
"""

from __future__ import annotations

import dataclasses
from typing import Any

MAX_MESSAGES = 1024  # messages a sender keeps for resending before it waits for confirmations
MAX_BYTES = 256 << 20
MAX_SENDS = 6  # lost transmissions of one message, each the oldest lost, before it is given up


@dataclasses.dataclass
class Entry:
    """One message a sender keeps until it is confirmed: `key` (the caller's: ("batch", seq) or
    ("marker", seq)), its `frames` as sent, `nbytes`, and `tx`, its latest transmission."""

    key: tuple
    frames: list
    nbytes: int
    tx: int
    sends: int = 1
    losses: int = 0  # transmissions of it that were the oldest message proven lost
    counted: int = -1  # the transmission whose loss was counted last
    unsure: bool = False  # its latest transmission went out while some connection had no present receiver


class SendLog:
    """The sender's side of its sessions (module docstring). `max_messages` / `max_bytes`: how much
    it keeps before `full` says the sender must wait for confirmations (or, when some data
    connection has no acknowledging receiver, before it stops keeping the oldest)."""

    def __init__(self, *, max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES):
        self.max_messages, self.max_bytes = max_messages, max_bytes
        self.entries: dict[Any, Entry] = {}  # by key, in the order first sent
        self.by_tx: dict[int, Any] = {}  # transmission -> key, for entries still kept
        self.receivers: dict[str, int] = {}  # attached receiver -> highest tx it has seen (-1: none)
        self.connections = 0  # data connections open now
        self.tx = 0  # the next transmission's number
        self.nbytes = 0  # bytes kept
        self.resent = 0  # transmissions that were resends
        self.abandoned = 0  # entries dropped unconfirmed (no acknowledging receiver could vouch)
        self.refused = 0  # batches given up after MAX_SENDS transmissions were all lost
        self.away: set[str] = set()  # attached receivers whose link is down
        self.present = 0  # attached receivers not away
        self.settled = 0  # transmissions before this one were sent a liveness window ago
        self.unsure: list[int] = []  # unsure transmissions not yet settled, in order

    def transmit(self, key: Any, frames: list, nbytes: int) -> int:
        """Record a transmission of message `key` (new, or a resend of a kept entry); returns its tx."""
        tx, self.tx = self.tx, self.tx + 1
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = Entry(key, frames, nbytes, tx)
            self.nbytes += nbytes
        else:
            self.by_tx.pop(entry.tx, None)
            entry.tx, entry.frames, entry.sends = tx, frames, entry.sends + 1
            self.resent += 1
        entry.unsure = self.connections > self.present
        if entry.unsure:
            self.unsure.append(tx)
        self.by_tx[tx] = key
        return tx

    def attach(self, receiver: str) -> None:
        """An acknowledging receiver said hello (or came back): present."""
        if receiver not in self.receivers:
            self.receivers[receiver] = -1
            self.present += 1
        elif receiver in self.away:
            self.away.discard(receiver)
            self.present += 1

    def leave(self, receiver: str) -> None:
        """`receiver`'s link went down: still attached (a proof still waits for it to see later), but
        it vouches for no data connection until it confirms again."""
        if receiver in self.receivers and receiver not in self.away:
            self.away.add(receiver)
            self.present -= 1

    def detach(self, receiver: str) -> None:
        """A receiver left for good (it said bye, or stayed away past the liveness window)."""
        if self.receivers.pop(receiver, None) is not None and receiver not in self.away:
            self.present -= 1
        self.away.discard(receiver)

    def settle(self, tx: int) -> bool:
        """The liveness window passed since transmission `tx - 1` was sent: `stuck` transmissions
        before `tx` become provable. True when some did (the resend rule may have changed)."""
        self.settled = max(self.settled, tx)
        settled = 0
        while settled < len(self.unsure) and self.unsure[settled] < self.settled:
            settled += 1
        del self.unsure[:settled]
        return settled > 0

    def confirm(self, receiver: str, txs: list[int], high: int) -> None:
        """`receiver` took transmissions `txs` and has seen none later than `high`."""
        self.attach(receiver)
        self.receivers[receiver] = max(self.receivers[receiver], high)
        for tx in txs:
            key = self.by_tx.pop(tx, None)
            if key is not None:
                self.nbytes -= self.entries.pop(key).nbytes

    @property
    def vouched(self) -> bool:
        """Every data connection may have an acknowledging receiver behind it (and there is one)."""
        return bool(self.receivers) and len(self.receivers) >= self.connections

    def lost(self) -> list[Entry]:
        """The entries no attached receiver will ever take (the resend rule), oldest first."""
        if not self.vouched:
            return []
        seen = min(self.receivers.values())
        lost = [entry for entry in self.entries.values()
                if entry.tx < seen and (not entry.unsure or entry.tx < self.settled)]
        while lost and lost[0].losses + 1 >= MAX_SENDS:  # its receivers refuse it (a frame over their
            self._drop(lost[0].key)  # max_message_size makes ZeroMQ drop the connection it came on)
            self.refused += lost[0].key[0] == "batch"
            lost.pop(0)
        if lost and lost[0].counted != lost[0].tx:  # each transmission's loss counts once (a resend that
            lost[0].losses, lost[0].counted = lost[0].losses + 1, lost[0].tx  # could not go yet is none)
            # only the oldest loss counts: the others may have been behind it
        return lost[:1] if lost and lost[0].losses > 1 else lost  # a suspect goes alone

    def stuck(self) -> list[Entry]:
        """Entries that would be lost but were sent while some connection had no present receiver,
        and not a liveness window ago: the receiver of that connection may have taken them."""
        if not self.vouched:
            return []
        seen = min(self.receivers.values())
        return [entry for entry in self.entries.values()
                if entry.tx < seen and entry.unsure and entry.tx >= self.settled]

    @property
    def full(self) -> bool:
        """As much is kept as the limits allow."""
        return len(self.entries) >= self.max_messages or self.nbytes >= self.max_bytes

    def drop_oldest(self) -> None:
        """Stop keeping the oldest entry (it can no longer be resent); counts it in `abandoned`."""
        self._drop(next(iter(self.entries)))

    def _drop(self, key: Any) -> None:
        entry = self.entries.pop(key)
        self.by_tx.pop(entry.tx, None)
        self.nbytes -= entry.nbytes
        self.abandoned += 1

    def outstanding(self, kind: str | None = None) -> int:
        """Entries not yet confirmed (of `kind`, the first item of their key, when given)."""
        return sum(1 for key in self.entries if kind is None or key[0] == kind)

    def floor(self, next_seq: int) -> int:
        """The lowest seq of an unconfirmed batch (`next_seq` when none): receivers forget below it."""
        return next((key[1] for key in self.entries if key[0] == "batch"), next_seq)  # first sent: lowest


class Arrivals:
    """What a receiver took from one sender: batch seqs (for dropping duplicates), transmissions to
    confirm, and the highest transmission seen."""

    def __init__(self):
        self.floor = 0
        self.seen: dict[int, int] = {}  # batch seq >= floor taken -> the transmission it came in
        self.pending: list[int] = []  # transmissions of markers and ticks not yet confirmed
        self.fresh = False  # something was taken since the last take()
        self.high = -1
        self.duplicates = 0

    def arrive(self, seq: int | None, floor: int, tx: int) -> bool:
        """Record a transmission (`seq` None for a marker or tick); False when it is a batch already
        taken (its new transmission is confirmed too)."""
        self.high, self.fresh = max(self.high, tx), True
        self.lift(floor)
        if seq is None:
            self.pending.append(tx)
            return True
        if seq < self.floor or seq in self.seen:
            self.duplicates += 1
            self.pending.append(tx)
            return False
        self.seen[seq] = tx
        return True

    def lift(self, floor: int) -> None:
        """The sender's floor is `floor` (from a transmission, or told over the link): forget the
        batches below it (every receiver's copy of them was confirmed). It never goes down."""
        if floor > self.floor:
            self.floor = floor
            self.seen = {s: t for s, t in self.seen.items() if s >= floor}

    def take(self) -> tuple[list[int], int]:
        """(transmissions to confirm, highest seen). Batches are confirmed again in every take until
        the sender's floor passes them (an ack lost with its link is repeated: cumulative acks);
        markers and ticks once."""
        txs, self.pending, self.fresh = [*self.seen.values(), *self.pending], [], False
        return txs, self.high

    @property
    def owed(self) -> bool:
        """Something was taken since the last take(): an ack is due."""
        return self.fresh or bool(self.pending)

    def keep(self, txs: list[int]) -> None:
        """`txs` (from take()) could not be sent: owe them again (batches are repeated anyway)."""
        batches = set(self.seen.values())
        self.pending[:0] = [tx for tx in txs if tx not in batches]
        self.fresh = True
