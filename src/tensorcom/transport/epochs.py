"""Where a receiver's epochs end: the end-of-epoch bookkeeping of a receiving `Connection`, without
sockets (no zmq import), so every rule is testable with plain `wire.Message` values.

Feed an `EpochBook` every decoded protocol-2 message in arrival order:

    verdict = book.admit(message)     # DELIVER, LATE (deliver, with a warning), HOLD, DROP or LOST_MARKER
    book.delivered(message)           # a batch handed to the caller: its sender is now mid-pass
    ended = book.marker(message)      # an end-of-epoch marker; True when it ends the pass
    message = book.release()          # after a pass ended: the held messages, oldest first, then None
    book.abandon(senders)             # the pass ends because these senders are unreachable (PeerLost)

The rules (docs/transport.md, "The end of an epoch"):
- A marker names its sender's `group` and `group_size` (a sender without a group is a group of its
  own). A group is complete when markers from `group_size` distinct senders of it have arrived.
- A pass ends when `expected` groups are complete and no sender that delivered batches in this pass
  is still in the middle of its epoch. Ending consumes one marker of every sender of every complete
  group; surplus markers (a fast sender's next epochs) count for the next passes.
- A message from a sender that has already ended the current pass is held back for the next pass
  (HOLD), up to `max_held_messages` / `max_held_bytes`; past that it is let through (LATE), so a
  receiver never stalls on a lagging peer.
- Lost markers (a lossy PUB/SUB link drops them like any message): every message carries its
  sender's epoch, and the book knows the epoch each sender is in. A batch of a later epoch from a
  sender midway through its epoch means the sender's marker was lost: admit() answers LOST_MARKER,
  puts the batch back (release() returns it next) and `stand_in` is a marker for the sender's
  current epoch to process in its place, which ends the pass if the rules say so (the batch then
  opens the next pass, or is held for it). From a sender at the start of an epoch (its marker came)
  it means whole epochs were lost: they open no pass. A marker of a later epoch stands for the lost
  ones before it; a marker of an epoch the sender has already ended (a duplicate) is dropped.
  `lost_markers` counts the markers that never arrived, `implicit_ends` the passes a stand-in ended.
  So a pass never mixes two epochs of one sender.
- A subscriber joins a stream in the middle (`joins_midstream`, set for SUB sockets): a sender's
  marker that comes before any batch of it ends an epoch the receiver saw nothing of, so it is
  dropped and ends no pass (a puller's first marker does end one: it was a peer for that epoch).
- A restarted sender is a new sender (a new id). A message whose `portion` (stream, worker) was sent so
  far by another id replaces that sender: the old one is retired (its markers, its place in the pass
  and its held messages are forgotten) and whatever still arrives from it is dropped (DROP).
- When senders are unreachable (`abandon`, after PeerLost) the pass ends there: the markers of the
  senders that had ended it are consumed, held messages released. Nothing of theirs is forgotten: a
  sender that comes back continues its epoch in the next pass.
- Protocol-1 messages (no sender) are always delivered and never end a pass.

`waiting_on()` names the senders a pass waits for (for timeout and peer-lost messages).
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from typing import Any, Iterable

MAX_HELD_MESSAGES = 100  # next-epoch messages kept back while other senders finish their epoch
MAX_HELD_BYTES = 1 << 30


def expected_groups(binds: list[bool], senders: int) -> int:
    """How many complete marker groups end a pass of a socket attached to endpoints that bind or
    connect as `binds` says: one per endpoint it connects to, plus `senders` if any binds."""
    return sum(1 for bind in binds if not bind) + (senders if any(binds) else 0)


class Verdict(enum.Enum):
    """What a receiver does with an admitted message."""

    DELIVER = "deliver"  # process it now
    LATE = "late"  # process it now although it belongs to the next pass (held limits reached)
    HOLD = "hold"  # kept by the book for the next pass; see release()
    DROP = "drop"  # from a retired sender, or a duplicate marker: discard
    LOST_MARKER = "lost marker"  # process book.stand_in (a marker) instead; the message comes back from release()


class EpochBook:
    """The marker, pass and held-message state of one receiving connection (rules: module docstring).

    `expected` is how many complete groups end a pass (the Connection sets it: one per endpoint it
    connects to, plus `senders` if it binds). Holds messages it is given (HOLD) until release().
    """

    def __init__(self, expected: int = 1, *, max_held_messages: int = MAX_HELD_MESSAGES,
                 max_held_bytes: int = MAX_HELD_BYTES, joins_midstream: bool = False):
        self.expected = expected
        self.joins_midstream = joins_midstream  # a subscriber: a sender's first marker ends nothing
        self.heard: set[str] = set()  # senders any message was admitted from
        self.max_held_messages, self.max_held_bytes = max_held_messages, max_held_bytes
        self.markers: dict[Any, dict] = {}  # group key -> {"size": n, "senders": {sender: markers}}
        self.ended: set[str] = set()  # senders whose marker for the current pass has arrived
        self.active: set[str] = set()  # senders that delivered batches in this pass, not ended yet
        self.slots: dict[tuple[str, int], str] = {}  # (stream, worker) -> the sender sending it now
        self.retired: set[str] = set()  # senders replaced by a restarted one
        self.position: dict[str, int] = {}  # sender -> the epoch its next message belongs to
        self.midway: set[str] = set()  # senders with a batch of that epoch seen (not at its start)
        self.groups: dict[str, tuple[str | None, int]] = {}  # sender -> (group, group_size) of its markers
        self.held: list = []  # messages of ended senders, for the next pass
        self.held_bytes = 0
        self.backlog: deque = deque()  # released messages, to process before new ones
        self.stand_in: Any = None  # the marker to process after a LOST_MARKER verdict
        self.passes = 0  # passes ended by markers (real or standing in)
        self.lost_markers = 0  # markers known lost (epochs that went by without their marker)
        self.implicit_ends = 0  # passes ended by a marker standing in for a lost one
        self.abandoned = 0  # passes ended because their senders were gone

    def admit(self, message: Any) -> Verdict:
        """Decide what happens to `message` (a batch or a marker); HOLD keeps it here."""
        sender = message.sender
        if sender is None:
            return Verdict.DELIVER
        if sender in self.retired:
            return Verdict.DROP
        self._claim_slot(message)
        if self._joined_at_marker(message):
            return Verdict.DROP
        verdict = self._check_epoch(message)
        if verdict is not None:
            return verdict
        if sender not in self.ended:
            return Verdict.DELIVER
        if len(self.held) >= self.max_held_messages or self.held_bytes >= self.max_held_bytes:
            return Verdict.LATE
        self.held.append(message)
        self.held_bytes += message.nbytes
        return Verdict.HOLD

    def delivered(self, message: Any) -> None:
        """Record a batch handed to the caller: its sender is in the middle of this pass."""
        if message.sender is not None:
            self.active.add(message.sender)

    def marker(self, message: Any) -> bool:
        """Record an end-of-epoch marker; True when it ends the pass (then release() the held ones)."""
        sender = message.sender
        if message.epoch is not None:
            self.position[sender] = max(self.position.get(sender, 0), message.epoch + 1)
        self.midway.discard(sender)
        if message is not self.stand_in:
            self.groups[sender] = (message.group, message.group_size)
        self.ended.add(sender)
        self.active.discard(sender)
        key = ("group", message.group) if message.group is not None else ("sender", sender)
        entry = self.markers.setdefault(key, {"size": message.group_size, "senders": {}})
        entry["senders"][sender] = entry["senders"].get(sender, 0) + 1
        complete = [e for e in self.markers.values() if len(e["senders"]) >= e["size"]]
        if len(complete) < self.expected or self.active:
            return False
        self._end_pass({sender for entry in complete for sender in entry["senders"]})
        self.passes += 1
        self.implicit_ends += message is self.stand_in
        return True

    def release(self) -> Any:
        """The next released message to process (admit it again), or None."""
        return self.backlog.popleft() if self.backlog else None

    def waiting_on(self) -> list[str]:
        """The senders that delivered batches in this pass and have not ended it, sorted."""
        return sorted(self.active)

    def abandon(self, senders: Iterable[str]) -> None:
        """End the current pass because `senders` are unreachable (PeerLost): consume one marker of
        every sender that had ended the pass, release the held messages. The senders keep their
        place: one that comes back continues its epoch in the next pass (nothing is discarded)."""
        self._end_pass(set(self.ended))
        self.active.clear()
        self.abandoned += 1

    def retire(self, sender: str) -> None:
        """Forget `sender` (it was replaced by a restarted one): its markers, its place in the pass,
        its held messages; its later messages are dropped."""
        self.retired.add(sender)
        self._purge(sender)

    def _end_pass(self, senders: set[str]) -> None:
        """Consume one marker of each of `senders`; release the held messages."""
        for entry in self.markers.values():
            entry["senders"] = {s: n - (s in senders) for s, n in entry["senders"].items() if n > (s in senders)}
        self.markers = {k: e for k, e in self.markers.items() if e["senders"]}
        self.ended -= senders
        self.backlog.extendleft(reversed(self.held))  # held ones arrived before what is left there
        self.held.clear()
        self.held_bytes = 0

    def _check_epoch(self, message: Any) -> Verdict | None:
        """LOST_MARKER (with `stand_in` set) for a batch of an epoch past its sender's when the sender
        was midway through its epoch, DROP for a marker of an epoch the sender has ended; else None.
        Counts lost markers. (A sender at the start of an epoch whose next message is of a later
        epoch lost whole epochs: they open no pass.)"""
        sender, epoch = message.sender, message.epoch
        current = self.position.get(sender)
        if epoch is None:
            return None
        if message.kind == "end_of_epoch":
            if current is not None and epoch < current:
                return Verdict.DROP
            self.lost_markers += 0 if current is None else epoch - current
            return None
        if current is None or epoch <= current or sender not in self.midway:
            self.lost_markers += 0 if current is None else max(epoch - current, 0)
            self.position[sender] = max(epoch, current or 0)
            self.midway.add(sender)
            return None
        self.lost_markers += epoch - current
        group, size = self.groups.get(sender, (None, 1))
        self.stand_in = dataclasses.replace(message, kind="end_of_epoch", batch=None, epoch=current,
                                            group=group, group_size=size, nbytes=0)
        self.position[sender] = epoch
        self.backlog.appendleft(message)
        return Verdict.LOST_MARKER

    def _joined_at_marker(self, message: Any) -> bool:
        """True for the marker of a subscriber's first message from its sender (the epoch it ends was
        not seen): its sender is then placed at the next epoch. Records that the sender was heard."""
        first = message.sender not in self.heard
        self.heard.add(message.sender)
        if not (first and self.joins_midstream and message.kind == "end_of_epoch"):
            return False
        if message.epoch is not None:
            self.position[message.sender] = message.epoch + 1
        return True

    def _claim_slot(self, message: Any) -> None:
        """Make the message's sender the one sending its portion; retire the sender it replaces."""
        if message.portion is None:
            return
        slot = (message.portion.stream, message.portion.worker)
        previous = self.slots.get(slot)
        self.slots[slot] = message.sender
        if previous is not None and previous != message.sender:
            self.retire(previous)

    def _purge(self, sender: str) -> None:
        """Remove `sender` from the pass: its markers, its place, its held and released messages."""
        self.active.discard(sender)
        self.ended.discard(sender)
        self.position.pop(sender, None)
        self.midway.discard(sender)
        for entry in self.markers.values():
            entry["senders"].pop(sender, None)
        self.markers = {k: e for k, e in self.markers.items() if e["senders"]}
        self.held = [m for m in self.held if m.sender != sender]
        self.held_bytes = sum(m.nbytes for m in self.held)
        self.backlog = deque(m for m in self.backlog if m.sender != sender)
