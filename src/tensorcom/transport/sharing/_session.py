"""A consumer's session with one sharing server (zjoin), as the consumer sees it: which server, the
last delivery it took, whether the connection is up and since when it is not. Pure (no zmq): the
joiner feeds it connection events, the server's welcomes and the numbers of its deliveries, with
the time, and does what it answers.

    session.connected(now) -> bool        the connection is up (handshake done); True: send a join again
    session.join_fields() -> dict         what the join says of the session: {server, upto} once it has one
    session.heard(now)                    a message of the server arrived (a sign of life)
    session.disconnected(now, silence)    the connection closed; the session waits for it
    session.joining() -> int              a join is sent: its number (its welcome echoes it)
    session.answers(j) -> bool            is a welcome answering join j the one to wait for?
    session.rejoin()                      join again on a live connection (after a pause): wait for it
    session.welcome(server, resumed, n)   the server's welcome -> CONTINUED or NEW (a new session)
    session.accept(n) -> bool             take delivery n? (False: a duplicate, a gap, an old session's)
    session.restart()                     the consumer starts over with a new session (its record)
    session.unreachable(now, liveness)    no sign of life for the whole liveness window, and down
    session.excuse(now)                   PeerLost was raised: the next verdict waits another window

Numbers: the server numbers its deliveries (batches and epoch ends) 1, 2, ... per session and, after
a reconnect, sends again what was not acknowledged, with the same numbers. So the consumer takes
delivery `last + 1` only: a lower number is a duplicate, a higher one follows a gap that the server
fills when it sends again (what it sent into a connection that closed). Between a reconnect and the
server's answer (`resuming`) nothing is taken: those deliveries came through the old connection and
are sent again if the session goes on, or belong to a session that is over. The same holds after
a pause of the consumer (`rejoin`: it joins again on a live connection): the server may have given
the session up meanwhile (split: handed what waits in the queue to other consumers). A
welcome that goes on with the session never moves `last` back (two joins answered in turn: the
second one's resends are duplicates).

The liveness clock counts from the server's last sign of life, not from the moment the connection
was found dead: a connection dropped because it stayed silent for `silence` seconds (the heartbeat
timeout: a partition, a vanished host) was last alive that long before, or when its last message
came, whichever is later. So PeerLost comes `liveness` seconds after the peer went quiet.
"""

from __future__ import annotations

from typing import Any

CONTINUED = "continued"
NEW = "new"


class ServerSession:
    """One server's session as a consumer sees it (module docstring). `server`: the id of the
    server the session is with (None before the first welcome and after the server said bye)."""

    def __init__(self) -> None:
        self.server: str | None = None
        self.last = 0  # the number of the last delivery taken
        self.up = False  # the connection is up (ZMTP handshake done)
        self.down_since: float | None = None  # the server's last sign of life before the connection closed
        self.heard_at: float | None = None  # when the server's last message came (or the connection came up)
        self.resuming = False  # reconnected and joined again; the server's answer has not come
        self.connects = 0
        self.joins = 0  # joins sent (numbered: a welcome names the one it answers)

    def connected(self, now: float) -> bool:
        """The connection is up; True when this is a reconnect (send `join` again)."""
        self.connects += 1
        self.up, self.down_since, self.heard_at = True, None, now
        self.resuming = self.connects > 1
        return self.resuming

    @property
    def down(self) -> bool:
        """The connection closed and has not come back."""
        return not self.up and self.down_since is not None

    def rejoin(self) -> None:
        """The consumer joins again on a live connection (it may have been paused past the window):
        nothing is taken until the server answers."""
        if self.server is not None:
            self.resuming = True

    def join_fields(self) -> dict:
        """What a join says of the session: the server it is with and the last delivery it took."""
        return {} if self.server is None else {"server": self.server, "upto": self.last}

    def heard(self, now: float) -> None:
        """A message of the server arrived."""
        self.heard_at = now

    def disconnected(self, now: float, silence: float = 0.0) -> None:
        """The connection closed (ZeroMQ reconnects by itself); a dead connection is dropped after
        `silence` s without a sign of life, so the server was last alive at the later of `now - silence`
        and its last message."""
        if self.up or self.down_since is None:
            last = now - silence if self.heard_at is None else max(self.heard_at, now - silence)
            self.up, self.down_since = False, min(last, now)

    def joining(self) -> int:
        """A join is sent: its number (the server's welcome says which join it answers)."""
        self.joins += 1
        return self.joins

    def answers(self, j: int | None) -> bool:
        """Whether a welcome answering join `j` is the answer to wait for (None: a server that does
        not say: taken); an older join's answer is followed by the later join's."""
        return j is None or j == self.joins

    def welcome(self, server: str, resumed: bool, n: int) -> str:
        """The server's welcome: CONTINUED when it goes on with this session (it has deliveries up to
        `n`: everything later comes again), NEW otherwise (a restarted server, a server that gave
        the session up, or the first welcome)."""
        continued = resumed and server == self.server
        self.server, self.last, self.resuming = server, max(self.last, n) if continued else 0, False
        return CONTINUED if continued else NEW

    def accept(self, n: int | None) -> bool:
        """Whether to take delivery `n` (None: an unnumbered one from an older server: taken)."""
        if self.resuming or self.server is None:
            return False
        if n is None:
            return True
        if n != self.last + 1:
            return False
        self.last = n
        return True

    def restart(self) -> None:
        """The consumer starts over (restarted from its record): its next join asks for a new
        session, and nothing is taken until the server answers it."""
        self.server, self.last, self.resuming = None, 0, False

    def finished(self) -> None:
        """The server said bye: the session is over."""
        self.server = None

    def unreachable(self, now: float, liveness: float | None) -> bool:
        """True when the connection is down and the server's last sign of life is a whole liveness
        window old."""
        return liveness is not None and not self.up and self.down_since is not None and now - self.down_since >= liveness

    def excuse(self, now: float) -> None:
        """PeerLost was raised for this session: the next verdict waits another liveness window."""
        if not self.up:
            self.down_since = now


def check_liveness(liveness: Any) -> None:
    """ValueError for a liveness that is neither None nor a positive number of seconds."""
    if liveness is not None and (isinstance(liveness, bool) or not isinstance(liveness, (int, float))
                                 or liveness <= 0):
        raise ValueError(f"liveness must be a positive number of seconds or None, got {liveness!r}")
