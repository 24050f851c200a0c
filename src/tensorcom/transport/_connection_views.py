"""The parts of a Connection that read what its end and its intake know, mixed into
tensorcom.transport.connection.Connection (which holds `_end` and `_intake`):

    conn.consumers / consumer_status() / server_report / joined_at    the sharing views
    conn.state_dict() / load_state_dict() / save_state(path)          the consumer record (resume)
"""

from __future__ import annotations

from typing import Any

from tensorcom.transport.ends import JoinerEnd, SharingServerEnd
from tensorcom.transport.resume import save_state

SHARING_ENDS = (SharingServerEnd, JoinerEnd)


class ConnectionViews:
    """Sharing views and the resume record of a Connection (module docstring)."""

    _end: Any
    _intake: Any

    # ---- sharing ------------------------------------------------------------------------------

    @property
    def consumers(self) -> list[dict]:
        """A sharing server's consumers: name, epoch, pos, lag, samples_per_s, credit, free (refreshed
        about every second); for a consumer (zjoin), the last status an observer received."""
        return self._end.consumers if isinstance(self._end, SHARING_ENDS) else []

    def consumer_status(self, wait: float = 1.0) -> list[dict]:
        """A consumer's (zjoin) view of its servers' consumers after reading for `wait` seconds (join
        with observe=True to watch without taking batches); a server's own `consumers` at once."""
        if isinstance(self._end, JoinerEnd):
            return self._end.consumer_status(wait)
        return self.consumers

    @property
    def server_report(self) -> dict | None:
        """An observer's (zjoin, observe=True) last server record: the serving process's report with
        its status (rates, "stages", "verdict"); None without one."""
        return self._end.server_report if isinstance(self._end, JoinerEnd) else None

    @property
    def joined_at(self) -> dict:
        """A consumer's (epoch, position) where its session with each server started (URL -> pair)."""
        return self._end.joined_at if isinstance(self._end, JoinerEnd) else {}

    # ---- resume ---------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """What this receiver has been handed of each `tensorcom.serve` stream (per stream, epoch and
        worker: batches, samples, whether the worker ended the epoch) and its completed passes; a
        JSON-ready dict (layout in tensorcom.transport.resume). `tensorcom.serve(..., resume=STATE)`
        and `--resume FILE` continue from it."""
        return self._intake.consumed.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Continue the record of `state` (from state_dict(), e.g. in a restarted training job), so a
        later state_dict() counts what was consumed before it too. ValueError for a malformed state."""
        self._intake.load_state_dict(state)

    def save_state(self, path: Any) -> None:
        """Write state_dict() as JSON to `path` (atomically), for `tensorcom serve --resume FILE`."""
        save_state(self.state_dict(), path)
