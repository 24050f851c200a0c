"""Liveness of a receiver's senders on the plain schemes: which connections are open, which senders
were heard on which, and when a pass waits on senders that are gone. Pure (no zmq import): the
receiving socket's side (`tensorcom.transport._receiving`) feeds a `PeerWatch` and asks it.

    watch.opened(fd, now) / watch.closed(fd, now)    the socket monitor's connection events
    watch.heard(sender, fd, now)                     a protocol-2 message of `sender` came over fd
    verdict = watch.lost(waiting, ended, now, quiet, waited)   None, or (senders, reason): PeerLost
    watch.forget(senders, now)                       after PeerLost

The rules (docs/transport.md, "Liveness"), with `liveness` seconds. They are applied only while
recv() waits with nothing readable, so whatever a dead sender's connection had delivered to this
socket is handed out first.
- A connection is *live* while it is open and not *quiet*: quiet means nothing at all arrived on it
  for `liveness` s (`quiet[fd]`, from the kernel; every sending Connection's ZeroMQ emits a ZMTP
  heartbeat every HEARTBEAT_IVL s, whatever its Python code is doing) after recv() has waited at
  least `grace` s (so that this socket's own full queue, which stops reading, cannot be mistaken
  for a quiet peer). Quietness is known on TCP connections under Linux; elsewhere a connection is
  live until ZeroMQ or the kernel closes it (a heartbeat TTL, TCP keepalive).
- A sender is *present* while some connection it was heard on is live.
1. The pass waits on named senders (`waiting`: EpochBook.waiting_on(), they delivered batches in it
   and sent no marker yet) and none of them is present → PeerLost naming them, at once.
2. The pass waits on no named sender, a protocol-2 sender has been heard on this socket, and for
   `liveness` s no connection has been live but those whose senders all ended this pass (`ended`)
   → PeerLost: nobody left could end the pass.
- A receiver that never heard a protocol-2 sender waits, as tensorcom 0.1 does (a trainer started
  before its server; a 0.1 server, whose messages name no sender).
- A connection that closes and reconnects (network trouble) is a new connection: its sender counts
  again from its next message.
"""

from __future__ import annotations

from typing import Iterable


class PeerWatch:
    """Connections by file descriptor and the senders heard on each; rules in the module docstring.

    `liveness`: seconds; `grace`: seconds recv() must have waited before a quiet connection counts.
    """

    def __init__(self, liveness: float, grace: float = 1.0):
        self.liveness, self.grace = liveness, min(grace, liveness)
        self.open: dict[int, set[str]] = {}  # fd -> senders heard on it
        self.where: dict[str, set[int]] = {}  # sender -> open fds it was heard on
        self.heard_any = False  # a protocol-2 sender was heard on some connection
        self.last_useful: float | None = None  # when a connection that could end the pass was last live

    def opened(self, fd: int, now: float) -> None:
        """A connection opened (a new one, though its descriptor number may be reused)."""
        self._drop(fd)
        self.open[fd] = set()
        self.last_useful = now

    def closed(self, fd: int, now: float) -> None:
        """A connection closed (or a connection attempt failed: unknown descriptors are ignored); it
        was open until about `now`, which starts rule 2's clock."""
        if fd in self.open:
            self.last_useful = now
        self._drop(fd)

    def heard(self, sender: str, fd: int, now: float) -> None:
        """A message of `sender` arrived over connection `fd`."""
        self.open.setdefault(fd, set()).add(sender)
        self.where.setdefault(sender, set()).add(fd)
        self.heard_any = True
        self.last_useful = now

    def forget(self, senders: Iterable[str], now: float) -> None:
        """Stop counting `senders` (after PeerLost); rule 2's clock starts again."""
        for sender in senders:
            for fd in self.where.pop(sender, set()):
                self.open.get(fd, set()).discard(sender)
        self.last_useful = now

    def lost(self, waiting: list[str], ended: set[str], now: float, quiet: dict[int, float | None],
             waited: float) -> tuple[list[str], str] | None:
        """None while the pass can go on; else (senders to name, why) for PeerLost (rules 1 and 2).
        `quiet[fd]`: seconds nothing arrived on fd (None or missing: unknown); `waited`: seconds the
        current recv() has waited with nothing readable."""
        live = {fd for fd in self.open if not self._quiet(quiet.get(fd), waited)}
        if waiting:
            heard = [s for s in waiting if s in self.where]  # never placed on a connection: unknown, present
            if len(heard) < len(waiting) or any(self.where[s] & live for s in heard):
                return None
            return waiting, "; ".join(f"{s}: {self._why(s, quiet)}" for s in waiting)
        if any(not self.open[fd] or not self.open[fd] <= ended for fd in live):
            self.last_useful = now
            return None
        if not self.heard_any or self.last_useful is None or now - self.last_useful < self.liveness:
            return None
        gone = sorted(s for s, fds in self.where.items() if not fds & live and s not in ended)
        return gone, (f"for {now - self.last_useful:.1f} s no sender has been connected that could end "
                      f"this pass" + (f" (gone: {', '.join(gone)})" if gone else ""))

    def _quiet(self, seconds: float | None, waited: float) -> bool:
        return seconds is not None and waited >= self.grace and seconds >= self.liveness

    def _why(self, sender: str, quiet: dict[int, float | None]) -> str:
        fds = self.where.get(sender, set())
        if not fds:
            return "its connection closed"
        return f"nothing received from it for {max(quiet.get(fd) or 0.0 for fd in fds):.1f} s"

    def _drop(self, fd: int) -> None:
        for sender in self.open.pop(fd, set()):
            self.where.get(sender, set()).discard(fd)
