"""A sharing server's producer in a thread of the test process, for the sharing tests."""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from tensorcom import Connection


def ids_batch(start: int, n: int = 4) -> dict:
    """Batch of sample ids start .. start+n-1."""
    return {"id": np.arange(start, start + n, dtype=np.int32)}


def serve_in_thread(conn: Connection, batches: int, errors: list, *, epochs: int = 1,
                    make_batch: Callable[[int], Any] = lambda i: ids_batch(4 * i)) -> threading.Thread:
    """Send `epochs` epochs of `batches` batches (make_batch(i), i counting over all epochs) through
    `conn`, each epoch ended, then close it; an exception lands in `errors`."""
    def run():
        try:
            for epoch in range(epochs):
                for i in range(batches):
                    conn.send(make_batch(epoch * batches + i))
                conn.end_epoch()
            conn.close(linger=20)
        except Exception as exc:  # reported to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
