"""Where a receiver's epochs end: the end-of-epoch bookkeeping of a receiving `Connection`, without
sockets (no zmq import), so every rule is testable with plain `wire.Message` values.

Feed an `EpochBook` every decoded protocol-2 message in arrival order:

    verdict = book.admit(message)     # DELIVER, LATE (deliver, with a warning), HOLD or DROP
    book.delivered(message)           # a batch handed to the caller: its sender is now mid-pass
    ended = book.marker(message)      # an end-of-epoch marker; True when it ends the pass
    message = book.release()          # after a pass ended: the held messages, oldest first, then None

The rules (docs/transport.md, "The end of an epoch"):
- A marker names its sender's `group` and `group_size` (a sender without a group is a group of its
  own). A group is complete when markers from `group_size` distinct senders of it have arrived.
- A pass ends when `expected` groups are complete and no sender that delivered batches in this pass
  is still in the middle of its epoch. Ending consumes one marker of every sender of every complete
  group; surplus markers (a fast sender's next epochs) count for the next passes.
- A message from a sender that has already ended the current pass is held back for the next pass
  (HOLD), up to `max_held_messages` / `max_held_bytes`; past that it is let through (LATE), so a
  receiver never stalls on a lagging peer.
- A restarted sender is a new sender (a new id). A message whose `share` (stream, worker) was sent so
  far by another id replaces that sender: the old one is retired (its markers, its place in the pass
  and its held messages are forgotten) and whatever still arrives from it is dropped (DROP).
- Protocol-1 messages (no sender) are always delivered and never end a pass.

`waiting_on()` names the senders a pass waits for (for timeout and peer-lost messages).
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

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
    DROP = "drop"  # from a retired sender: discard


class EpochBook:
    """The marker, pass and held-message state of one receiving connection (rules: module docstring).

    `expected` is how many complete groups end a pass (the Connection sets it: one per endpoint it
    connects to, plus `senders` if it binds). Holds messages it is given (HOLD) until release().
    """

    def __init__(self, expected: int = 1, *, max_held_messages: int = MAX_HELD_MESSAGES,
                 max_held_bytes: int = MAX_HELD_BYTES):
        self.expected = expected
        self.max_held_messages, self.max_held_bytes = max_held_messages, max_held_bytes
        self.markers: dict[Any, dict] = {}  # group key -> {"size": n, "senders": {sender: markers}}
        self.ended: set[str] = set()  # senders whose marker for the current pass has arrived
        self.active: set[str] = set()  # senders that delivered batches in this pass, not ended yet
        self.slots: dict[tuple[str, int], str] = {}  # (stream, worker) -> the sender sending it now
        self.retired: set[str] = set()  # senders replaced by a restarted one
        self.held: list = []  # messages of ended senders, for the next pass
        self.held_bytes = 0
        self.backlog: deque = deque()  # released messages, to process before new ones
        self.passes = 0  # passes ended

    def admit(self, message: Any) -> Verdict:
        """Decide what happens to `message` (a batch or a marker); HOLD keeps it here."""
        sender = message.sender
        if sender is None:
            return Verdict.DELIVER
        if sender in self.retired:
            return Verdict.DROP
        self._claim_slot(message)
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
        self.ended.add(message.sender)
        self.active.discard(message.sender)
        key = ("group", message.group) if message.group is not None else ("sender", message.sender)
        entry = self.markers.setdefault(key, {"size": message.group_size, "senders": {}})
        entry["senders"][message.sender] = entry["senders"].get(message.sender, 0) + 1
        complete = [e for e in self.markers.values() if len(e["senders"]) >= e["size"]]
        if len(complete) < self.expected or self.active:
            return False
        for entry in complete:  # consume one marker of each sender of each complete group
            self.ended.difference_update(entry["senders"])
            entry["senders"] = {s: n - 1 for s, n in entry["senders"].items() if n > 1}
        self.markers = {k: e for k, e in self.markers.items() if e["senders"]}
        self.backlog.extendleft(reversed(self.held))  # held ones arrived before what is left there
        self.held.clear()
        self.held_bytes = 0
        self.passes += 1
        return True

    def release(self) -> Any:
        """The next released message to process (admit it again), or None."""
        return self.backlog.popleft() if self.backlog else None

    def waiting_on(self) -> list[str]:
        """The senders that delivered batches in this pass and have not ended it, sorted."""
        return sorted(self.active)

    def _claim_slot(self, message: Any) -> None:
        """Make the message's sender the one sending its share; retire the sender it replaces."""
        if message.share is None:
            return
        slot = (message.share.stream, message.share.worker)
        previous = self.slots.get(slot)
        self.slots[slot] = message.sender
        if previous is not None and previous != message.sender:
            self.retire(previous)

    def retire(self, sender: str) -> None:
        """Forget `sender` (it was replaced by a restarted one): its markers, its place in the pass,
        its held messages; its later messages are dropped."""
        self.retired.add(sender)
        self.active.discard(sender)
        self.ended.discard(sender)
        for entry in self.markers.values():
            entry["senders"].pop(sender, None)
        self.markers = {k: e for k, e in self.markers.items() if e["senders"]}
        self.held = [m for m in self.held if m.sender != sender]
        self.held_bytes = sum(m.nbytes for m in self.held)
        self.backlog = deque(m for m in self.backlog if m.sender != sender)
