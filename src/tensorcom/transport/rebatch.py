"""Rebatching: batches of one size in, batches of another size out, the same samples in the same
order. Pure (numpy only). A consumer of a sharing server that asks for its own `batch_size` uses it.

    rebatcher = Rebatcher(32)
    rebatcher.push(batch, token)     # a received batch (list/tuple/dict of fields with rows)
    out, done = rebatcher.pop()      # a batch of 32 samples (or None), and the tokens of the
                                     # received batches it used up completely
    out, done = rebatcher.flush()    # at the end of a pass: what is left (fewer samples), or None

Fields with rows are numpy arrays (rank >= 1; cut and joined along axis 0) and lists/tuples (one item
per sample). A batch whose fields differ in number of rows, or has a field without rows (a plain
value, which cannot be divided among samples), raises ValueError naming the field; so does a batch
whose fields (keys, or number of fields) are not those of the batch before it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from tensorcom.transport.batches import _rows_of, batch_size
from tensorcom.checks import positive


def _keys(batch: Any) -> list:
    """The batch's field keys: a dict's keys, a list's or tuple's indices."""
    if isinstance(batch, dict):
        return list(batch)
    if isinstance(batch, (list, tuple)):
        return list(range(len(batch)))
    raise ValueError(f"cannot rebatch a batch of type {type(batch).__name__}")


def _check(batch: Any, keys: list) -> int:
    """The batch's number of samples; ValueError unless every field has exactly that many rows."""
    rows = batch_size(batch)
    for key in keys:
        count = _rows_of(batch[key])
        if count != rows:
            raise ValueError(f"cannot rebatch field {key!r}: it has {'no rows' if count is None else count} "
                             f"where the batch has {rows} samples")
    return rows


def _join(parts: list) -> Any:
    if isinstance(parts[0], np.ndarray):
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    joined = [x for part in parts for x in part]
    return tuple(joined) if isinstance(parts[0], tuple) else joined


class Rebatcher:
    """Re-cut a stream of batches into batches of `size` samples (module docstring)."""

    def __init__(self, size: int):
        self.size = positive("batch_size", size)
        self.queue: deque = deque()  # [batch, rows, offset, token]
        self.available = 0
        self.keys: list | None = None  # the fields of the first batch (every batch has these)

    def push(self, batch: Any, token: Any = None) -> None:
        """Add a received batch; `token` comes back from pop()/flush() once all of it was handed out."""
        keys = _keys(batch)
        if self.keys is not None and set(keys) != set(self.keys):
            raise ValueError(f"cannot rebatch a batch with fields {keys} after batches with fields {self.keys}")
        rows = _check(batch, keys)
        self.keys = keys if self.keys is None else self.keys
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
            pieces.append((batch, offset, offset + n))
            entry[2] += n
            count -= n
            self.available -= n
            if entry[2] == rows:
                self.queue.popleft()
                done.append(token)
        return self._assemble(pieces), done

    def _assemble(self, pieces: list) -> Any:
        """One batch of the rows [start, stop) of each (batch, start, stop) piece, of the first's type."""
        joined = {key: _join([batch[key][start:stop] for batch, start, stop in pieces]) for key in self.keys}
        first = pieces[0][0]
        return joined if isinstance(first, dict) else type(first)(joined.values())
