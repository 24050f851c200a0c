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

import importlib
from typing import Any

_EXPORTS = {"Connection": "tensorcom.transport.connection", "SequenceTracker": "tensorcom.transport.stats",
            "Statistics": "tensorcom.transport.stats"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tensorcom.transport' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
