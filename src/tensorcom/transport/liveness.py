"""Liveness of a receiver's senders on the plain schemes: which senders are reachable, and when a pass
waits on senders that are gone. Pure (no zmq import): the receiving side (`tensorcom.transport._inbound`)
feeds a `PeerWatch` and asks it.

    watch.heard(sender, now)                 a protocol-2 message of `sender` arrived
    watch.linked(sender, up, now)            its session link (the acknowledgement connection) came up / went down
    verdict = watch.lost(waiting, ended, now)   None, or (senders, reason): PeerLost
    watch.excused(now)                       after PeerLost: the clock starts again

A sender is *tracked* once it named a session link (its messages carry `reply`: every tensorcom sender
over tcp or ipc). Its link is a ZeroMQ connection with ZMTP heartbeats, answered by the sender's
I/O thread whatever its Python code does; the link goes down when the sender's process is killed or
stopped, its host vanishes, or the network between them stays silent for half the liveness window.
A tracked sender is *present* while its link is up; *gone* once it has been neither linked nor heard
for `liveness` seconds. A data connection that drops and comes back is not a departure: the session
outlives it, and nothing in these rules looks at data connections.

The rules (docs/transport.md, "Liveness"), applied only while recv() waits with nothing readable, so
whatever a sender delivered is handed out first:
1. The pass waits on named senders (`waiting`: EpochBook.waiting_on(): they delivered batches in it
   and sent no marker yet), every tracked one among them is gone, and none is untracked
   → PeerLost naming them.
2. The pass waits on no named sender, a tracked sender has been heard, and for `liveness` s no
   tracked sender has been present but those that ended this pass (`ended`) → PeerLost: nobody left
   could end the pass.
- Untracked senders (tensorcom 0.1, whose messages name no sender; foreign protocol-2 senders without
  `reply`) are waited for, as tensorcom 0.1 does; so is a pass before any sender was heard (a
  trainer started before its server).
- After PeerLost nothing is forgotten: a sender that comes back continues its session.
"""

from __future__ import annotations


class PeerWatch:
    """Senders' presence (module docstring); `liveness`: seconds."""

    def __init__(self, liveness: float):
        self.liveness = liveness
        self.up: set[str] = set()  # tracked senders whose link is up
        self.last_seen: dict[str, float] = {}  # tracked sender -> when it was last linked or heard
        self.last_useful: float | None = None  # when a sender that could end the pass was last present

    def track(self, sender: str, now: float) -> None:
        """`sender` named a session link: liveness applies to it from now on."""
        self.last_seen.setdefault(sender, now)

    def heard(self, sender: str, now: float) -> None:
        """A message of tracked or untracked `sender` arrived."""
        if sender in self.last_seen:
            self.last_seen[sender] = now

    def linked(self, sender: str, up: bool, now: float) -> None:
        """The link of tracked `sender` came up (`up`) or went down."""
        self.track(sender, now)
        if up or sender in self.up:  # a failed reconnect attempt of a link already down is no sign of life
            self.last_seen[sender] = now
        if up:
            self.up.add(sender)
        else:
            self.up.discard(sender)

    def gone(self, sender: str, now: float) -> bool:
        """Tracked `sender` has been unreachable for the liveness window."""
        seen = self.last_seen.get(sender)
        return seen is not None and sender not in self.up and now - seen >= self.liveness

    def excused(self, now: float) -> None:
        """After PeerLost: rule 2's clock starts again (the senders keep their sessions)."""
        self.last_useful = now

    def lost(self, waiting: list[str], ended: set[str], now: float) -> tuple[list[str], str] | None:
        """None while the pass can go on; else (senders to name, why) for PeerLost (rules 1 and 2)."""
        if waiting:
            if all(self.gone(s, now) for s in waiting):
                return waiting, "; ".join(f"{s}: {self._why(s, now)}" for s in waiting)
            return None
        candidates = [s for s in self.last_seen if s not in ended]
        if any(s in self.up for s in candidates):
            self.last_useful = now
            return None
        if not self.last_seen:
            return None
        latest = max((self.last_seen[s] for s in candidates), default=None)
        if latest is not None:
            self.last_useful = latest if self.last_useful is None else max(self.last_useful, latest)
        elif self.last_useful is None:
            self.last_useful = now
        if now - self.last_useful < self.liveness:
            return None
        gone = sorted(candidates)
        return gone, (f"for {now - self.last_useful:.1f} s no sender has been reachable that could end "
                      f"this pass" + (f" (gone: {', '.join(gone)})" if gone else ""))

    def _why(self, sender: str, now: float) -> str:
        return f"unreachable for {now - self.last_seen[sender]:.1f} s"
