"""Rebatching: batches of one size in, batches of another size out, the same samples in the same
order. Pure (numpy only). A consumer of a sharing server that asks for its own `batch_size` uses it.

    rebatcher = Rebatcher(32)
    rebatcher.push(batch, token)     # a received batch (list/tuple/dict of fields with rows)
    out, done = rebatcher.pop()      # a batch of 32 samples (or None), and the tokens of the
                                     # received batches it used up completely
    out, done = rebatcher.flush()    # at the end of a pass: what is left (fewer samples), or None

A batch is what tensorcom.batch says (a dict, list or tuple of fields with rows, or a bare array);
batches are cut and joined by tensorcom.batch.cut / join, so a consumer's rebatched stream has the
rows that Pipeline.rebatch and Pipeline.unbatch give for the same batches. A batch that breaks the
strict rule there (fields with different numbers of rows, a plain value that cannot be divided among
samples) raises ValueError naming the field; so does a batch whose fields (keys, or number of fields)
are not those of the batch before it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from tensorcom.batch import checked_size, cut, fields, join
from tensorcom.checks import positive


def _keys(batch: Any) -> list | None:
    """The batch's field keys (sorted as text), None for a bare array."""
    return sorted(map(str, fields(batch))) if isinstance(batch, (dict, list, tuple)) else None


class Rebatcher:
    """Re-cut a stream of batches into batches of `size` samples (module docstring)."""

    def __init__(self, size: int):
        self.size = positive("batch_size", size)
        self.queue: deque = deque()  # [batch, rows, offset, token]
        self.available = 0
        self.keys: list | None = None  # the fields of the batches buffered (every one has these)

    def push(self, batch: Any, token: Any = None) -> None:
        """Add a received batch; `token` comes back from pop()/flush() once all of it was handed out."""
        rows = checked_size(batch, "rebatch")
        keys = _keys(batch)
        if self.queue and keys != self.keys:
            raise ValueError(f"cannot rebatch a batch with fields {keys} after batches with fields {self.keys}")
        self.keys = keys
        self.queue.append([batch, rows, 0, token])
        self.available += rows

    def pop(self) -> tuple[Any, list]:
        """A batch of exactly `size` samples when that many are buffered, else (None, [])."""
        if self.available < self.size:
            return None, []
        return self._take(self.size)

    def flush(self) -> tuple[Any, list]:
        """Whatever is buffered as one (smaller) batch, or (None, []) when nothing is."""
        if not self.available:
            done = [entry[3] for entry in self.queue]
            self.queue.clear()
            return None, done
        return self._take(self.available)

    def _take(self, count: int) -> tuple[Any, list]:
        pieces, done = [], []
        while count:
            entry = self.queue[0]
            batch, rows, offset, token = entry
            n = min(count, rows - offset)
            pieces.append(cut(batch, offset, offset + n))
            entry[2] += n
            count -= n
            self.available -= n
            if entry[2] == rows:
                self.queue.popleft()
                done.append(token)
        return join(pieces, "rebatch"), done
