"""The transport layer: the only code that owns ZeroMQ sockets.

    Connection(urls, ...)         send and receive batches (tensorcom 0.1's API, extended)
    Statistics, SequenceTracker   rates and dropped-batch counts of a connection
    epochs.EpochBook              where a receiver's epochs end (pure: markers, held batches, restarts)
    resume                        what a consumer consumed; what a restarted server skips (pure)
    batches, converters           pure batch helpers and 0.1's per-field converters (no ZeroMQ)

Names are imported on first use, so the pure helper modules can be imported without ZeroMQ. See
docs/transport.md.
"""

from __future__ import annotations

from tensorcom.lazy import lazy_names

_EXPORTS = {"Connection": "tensorcom.transport.connection", "SequenceTracker": "tensorcom.transport.stats",
            "Statistics": "tensorcom.transport.stats"}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
