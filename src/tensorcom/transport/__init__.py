"""The transport layer: the only code that owns ZeroMQ sockets.

    Connection(urls, ...)         send and receive batches (tensorcom 0.1's API, extended)
    Statistics, SequenceTracker   rates and dropped-batch counts of a connection
    converters                    0.1's per-field converters ("torch", "numpy", ...)

See docs/transport.md.
"""

from tensorcom.transport.connection import Connection
from tensorcom.transport.stats import SequenceTracker, Statistics

__all__ = ["Connection", "SequenceTracker", "Statistics"]
