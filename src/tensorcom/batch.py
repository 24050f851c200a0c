"""The batch model: what a batch is, how many samples (rows) it holds, its rows, cutting and joining.

    batch_size(batch)          number of rows; lenient, never fails on a batch (for counters and rates)
    rows(batch, what)          the samples of a batch, in order (dict batch → dicts, list/tuple → tuples)
    cut(batch, start, stop)    the batch of rows [start, stop), of the same container type
    join(batches, what)        one batch of the rows of `batches` in order (field by field)
    default_collate(samples)   samples → one batch (the inverse of rows)

What a batch is (the same on the wire, in a Pipeline and in a Connection):
- a dict, list or tuple of FIELDS; a field is an array or tensor with one row per sample on axis 0
  (rank >= 1), or a list/tuple with one item per sample. A list batch is never a list of samples:
  `[images, labels]` holds two fields, and its rows are (image, label) tuples;
- or a bare array or tensor, whose rows are its leading dimension.

Ragged and plain values:
- A field whose samples differ in shape is a list with one array per sample (default_collate makes
  one); joining a list part with an array part, or arrays whose shapes past axis 0 differ, gives a list.
- A plain value (str, bytes, number, None, 0-d array, dict) has no rows. `batch_size` skips it (a
  dict's `__`-prefixed fields are consulted last) and counts a batch of plain values only as 1
  sample, an empty container as 0, and never checks that fields agree: counting must not fail.
- rows / cut / join are strict: every field must have exactly batch_size(batch) rows, else ValueError
  "cannot <what> field <key>: it has ... where the batch has N samples" (`what` names the caller's
  operation: "unbatch", "rebatch"...). A 0-d bare array has no rows either.

Pure: numpy only. Arrays of other libraries (torch) are counted and cut by their own shape and
slicing; joining converts them with numpy.asarray.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterator

import numpy as np


def batch_size(batch: Any) -> int:
    """Number of samples (rows) in `batch` (module docstring: the lenient counting rule).

    TypeError for anything that is not a batch (a plain value, an object without a shape)."""
    if isinstance(batch, dict):
        fields = sorted(batch.items(), key=lambda item: str(item[0]).startswith("__"))
        values = [value for _, value in fields]
    elif isinstance(batch, (list, tuple)):
        values = batch
    elif getattr(batch, "shape", None) is not None:
        return int(batch.shape[0]) if len(batch.shape) else 1
    else:
        raise TypeError(f"cannot tell the number of samples in a batch of type {type(batch).__name__}: {batch!r:.80}")
    if not values:
        return 0
    for value in values:
        count = rows_of(value)
        if count is not None:
            return count
    return 1


def rows_of(field: Any) -> int | None:
    """A field's number of rows (leading dimension, or len of a list/tuple), or None for a plain value."""
    shape = getattr(field, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    if isinstance(field, (list, tuple)):
        return len(field)
    return None


def fields(batch: Any) -> list:
    """The keys of a batch's fields: a dict's keys, a list's or tuple's indices; TypeError otherwise."""
    if isinstance(batch, dict):
        return list(batch)
    if isinstance(batch, (list, tuple)):
        return list(range(len(batch)))
    raise TypeError(f"a batch of fields is a dict, list or tuple, not {type(batch).__name__}")


def checked_size(batch: Any, what: str = "split") -> int:
    """batch_size(batch) when every field has exactly that many rows (strict rule), else ValueError."""
    if not isinstance(batch, (dict, list, tuple)):
        if len(getattr(batch, "shape", ())) == 0:
            raise ValueError(f"cannot {what} a batch of type {type(batch).__name__}: it has no rows")
        return int(batch.shape[0])
    size = batch_size(batch)
    for key in fields(batch):
        count = rows_of(batch[key])
        if count != size:
            raise ValueError(f"cannot {what} field {key!r}: it has {'no rows' if count is None else count} where the "
                             f"batch has {size} samples (a list batch is a list of fields, not of samples)")
    return size


def rows(batch: Any, what: str = "unbatch") -> Iterator[Any]:
    """The samples of `batch` in order: dicts for a dict batch, tuples for a list or tuple batch, the
    rows of a bare array; the inverse of default_collate. Checked first (strict rule, `what` in errors)."""
    size = checked_size(batch, what)
    if isinstance(batch, dict):
        return ({key: value[i] for key, value in batch.items()} for i in range(size))
    if isinstance(batch, (list, tuple)):
        return (tuple(value[i] for value in batch) for i in range(size))
    return (batch[i] for i in range(size))


def cut(batch: Any, start: int, stop: int) -> Any:
    """The rows [start, stop) of a checked batch (checked_size), as the same container type."""
    if isinstance(batch, dict):
        return {key: value[start:stop] for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(value[start:stop] for value in batch)
    return batch[start:stop]


def join(batches: list, what: str = "join") -> Any:
    """One batch of the rows of `batches` in order, of the first one's container type, joined field by
    field (join_field). ValueError (naming `what`) when a batch's fields are not the first one's or a
    batch breaks the strict rule."""
    first = batches[0]
    for batch in batches:
        checked_size(batch, what)
    if not isinstance(first, (dict, list, tuple)):
        return join_field(batches)
    keys = fields(first)
    for batch in batches[1:]:
        if sorted(map(str, fields(batch))) != sorted(map(str, keys)):
            raise ValueError(f"cannot {what} a {type(batch).__name__} batch with fields {fields(batch)} "
                             f"and one with fields {keys}")
    joined = {key: join_field([batch[key] for batch in batches]) for key in keys}
    return joined if isinstance(first, dict) else type(first)(joined.values())


def join_field(parts: list) -> Any:
    """The rows of `parts` (pieces of one field) in order: one array when every part is an array with
    the same shape past axis 0, else a list (a tuple when the first part is one) of the rows."""
    if all(getattr(part, "shape", None) is not None for part in parts):
        arrays = [np.asarray(part) for part in parts]
        if all(a.shape[1:] == arrays[0].shape[1:] for a in arrays):
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
    items = [item for part in parts for item in part]
    return tuple(items) if isinstance(parts[0], tuple) else items


def default_collate(samples: list) -> Any:
    """Collate a list of samples into a batch.

    Dicts collate field by field to a dict, tuples/lists position by position to a tuple; arrays of one
    shape stack into one array; numbers (Python or numpy scalars) become one array; anything else
    (str, bytes, ragged arrays, None) becomes a list.
    """
    first = samples[0]
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return tuple(default_collate(list(column)) for column in zip(*samples))
    if isinstance(first, np.ndarray):
        if all(isinstance(s, np.ndarray) and s.shape == first.shape for s in samples):
            return np.stack(samples)
        return list(samples)
    if isinstance(first, (numbers.Number, np.generic)) and not isinstance(first, (str, bytes)):
        return np.asarray(samples)
    return list(samples)
