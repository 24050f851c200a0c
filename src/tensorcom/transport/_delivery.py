"""What closing a plain-scheme sending socket reports (`_outbound.Outbound.finish`): a `Delivery`, which
raises `Undelivered` for what its receivers did not confirm."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorcom.errors import Undelivered


@dataclass
class Delivery:
    """The outcome of closing a sending socket: `peers` (receivers or connections at close),
    `troubled` (peer -> what happened, for those that did not confirm everything), `counts` (peer ->
    batches not confirmed), `undelivered` (batches not confirmed in all), `marker` (an end-of-epoch
    marker is among what was not confirmed)."""

    peers: int = 0
    troubled: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    undelivered: int = 0
    marker: bool = False

    def check(self, url: str) -> None:
        """Undelivered (`counts` per receiver, `.undelivered` the total) when anything was not confirmed."""
        if not self.troubled:
            return
        peers = "; ".join(f"{peer}: {why}" for peer, why in self.troubled.items())
        tail = " and the end-of-epoch marker" if self.marker else ""
        error = Undelivered(f"close: {self.undelivered} batch(es){tail} not confirmed by their receivers "
                            f"({peers}; {self.peers} attached at close)", url, counts=self.counts)
        error.undelivered = self.undelivered
        raise error
