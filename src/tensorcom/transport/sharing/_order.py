"""The order of a sharing server's input: each sender's messages passed on in the order it sent
them, although a dropped connection makes some arrive later than what followed them (the sender
resends what the connection lost, `tensorcom.transport._outbound`). Pure (no zmq import).

    order = InputOrder()
    for message in order.arrive(message): ...   # the messages whose turn has come (none, one or several)

A sender's batches carry consecutive seqs and a marker the seq of the batch after it; every message
over tcp or ipc carries the sender's `reply.floor`, below which each of its batches is confirmed
(taken here, or given up by the sender). A batch or marker passes once every batch of its sender
with a lower seq has passed or is below the floor; until then it waits here (a marker before the
batch of the same seq, which was sent after it). A marker takes no seq of its own, so one that
was lost and comes after the next epoch's first batch cannot be waited for: the input's epoch book
then ends the epoch with a stand-in at that batch (epochs.py, lost markers) and drops the late
marker. Ticks only raise the floor. Duplicates never get
here (the input's `Inbound` drops them). Messages without a session (no sender or no `reply`:
inproc, tensorcom 0.1 and foreign senders) pass at once.

What waits is bounded by what a sender sends before its lost batches are resent (a sender resends
at its next send, or in close(), once a later transmission is confirmed) or given up (its floor
then passes them); what a sender that died with a gap left waiting is dropped when its portion is handed over
(`forget`), and its successor (a restarted worker) is a new sender.
"""

from __future__ import annotations

import heapq
from typing import Any


class _Sender:
    """One sender's order: `next`, the lowest seq of a batch that has not passed (and is not below
    the floor), and what waits, as a heap of (seq, 0 for a marker / 1 for a batch, arrival, message)."""

    def __init__(self, floor: int):
        self.next = floor
        self.waiting: list = []


class InputOrder:
    """The senders' orders (module docstring); `waiting`: messages held back now."""

    def __init__(self):
        self.senders: dict[str, _Sender] = {}
        self.waiting = 0
        self._arrivals = 0

    def arrive(self, message: Any) -> list:
        """`message` (a wire.Message, not a duplicate) arrived: the messages to pass on now, in order."""
        reply = message.reply
        if message.sender is None or reply is None:
            return [message]
        sender = self.senders.get(message.sender)
        if sender is None:
            sender = self.senders[message.sender] = _Sender(reply.floor)
        sender.next = max(sender.next, reply.floor)
        if message.kind != "tick":
            heapq.heappush(sender.waiting, (message.seq, message.kind == "batch", self._arrivals, message))
            self._arrivals += 1
            self.waiting += 1
        return self._release(sender)

    def forget(self, sender: str) -> None:
        """`sender` is retired (a dead worker handed over): drop what of it waits."""
        gone = self.senders.pop(sender, None)
        if gone is not None:
            self.waiting -= len(gone.waiting)

    def _release(self, sender: _Sender) -> list:
        out = []
        while sender.waiting and sender.waiting[0][0] <= sender.next:
            seq, is_batch, _, message = heapq.heappop(sender.waiting)
            out.append(message)
            if is_batch:
                sender.next = max(sender.next, seq + 1)
        self.waiting -= len(out)
        return out
