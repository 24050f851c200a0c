"""Keras 3 adapter: a Connection or a Pipeline as a `keras.utils.PyDataset`, for `model.fit`.

    import tensorcom
    train = tensorcom.keras.StreamDataset(conn, batches_per_epoch=63, transform=tensorcom.keras.images_to_float)
    model.fit(train, epochs=5, shuffle=False)

`StreamDataset(source, ...)` reads batches from `source` — a Connection, a Pipeline, a ShardDataset,
anything that yields one pass (epoch) of batches each time it is iterated — and hands Keras
`(x,)`, `(x, y)` or `(x, y, sample_weight)` tuples of numpy arrays; any Keras backend then moves them
to its device. Keras asks for batch `index`, but a stream cannot be indexed: batches come in the
order they arrive, the index is ignored (so fit's `shuffle` changes nothing; pass shuffle=False to
avoid its warning for endless datasets).

Epoch length. Keras must know how many batches an epoch has before the epoch starts, while a pass
over a Connection ends only when its end-of-epoch marker arrives. So:
  * `batches_per_epoch=N`: each Keras epoch is one pass of the source, of N batches. The pass must
    have exactly N: one that ends sooner, or still has batches when Keras's epoch is over, is a
    ValueError giving the count seen (never a silent shift of every later epoch).
  * `batches_per_epoch=None` (default): the same, with N = len(source) when the source knows it
    (a Pipeline of known length, a list). A Connection does not (its len() is tensorcom 0.1's
    `epoch` bound, not the length of a pass), so it needs N, or:
  * `endless=True`: the source is one stream; passes follow each other without a break, and a Keras
    epoch is `batches_per_epoch` batches of it, or, with None, as many as fit's `steps_per_epoch`
    says. Use it for servers that send no markers (tensorcom 0.1) or epochs not tied to passes.

Fields: a list/tuple batch of 1 to 3 fields is taken as (x, y, sample_weight) in order (a bare array
as (x,)); otherwise `fields=` names them: indices for list batches, keys for dict batches ("jpg;png"
takes the first present, as everywhere in tensorcom), e.g. fields=("images", "labels"); an entry
that is itself a tuple of names gives a tuple of arrays (a multi-input model). `transform(*fields) -> tuple` runs on
the picked fields: `images_to_float` turns uint8 images into float32 in [0, 1].

Keras reads one batch to build the model before the first epoch of a fit (or evaluate) and then
starts the epoch over; a stream cannot start over, so that batch is served again as the first of the
epoch (an epoch that ended after one batch at the start of a pass is taken for that). An epoch cut
shorter than its pass otherwise (fit's steps_per_epoch) skips the rest of the pass with a warning.

The source is read in the thread that calls `__getitem__` (workers=1, no multiprocessing: the data
server is the worker pool, and a Connection is not to be shared between threads). keras is imported
when StreamDataset is first looked up, by `import_keras()`: `choose_backend()`, then keras.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from typing import Any, Callable, Iterable

import numpy as np

FALLBACK_BACKEND = "torch"  # the backend tensorcom[keras] installs


def choose_backend(preferred: str = FALLBACK_BACKEND) -> str | None:
    """Set KERAS_BACKEND=`preferred` (before keras is imported) when the user has chosen no backend
    that can run: $KERAS_BACKEND unset and keras.json naming none, or naming keras's default,
    tensorflow, without tensorflow installed. Returns the backend set, or None when the choice stands
    (or keras is already imported, when it is too late to choose)."""
    from tensorcom import settings

    if "keras" in sys.modules or settings.keras_backend() is not None:
        return None
    try:
        configured = json.loads((settings.keras_home() / "keras.json").read_text()).get("backend")
    except (OSError, ValueError, AttributeError):
        configured = None
    if configured and (configured != "tensorflow" or importlib.util.find_spec("tensorflow") is not None):
        return None
    os.environ["KERAS_BACKEND"] = preferred  # what keras reads when it is imported
    return preferred


def import_keras() -> Any:
    """keras, imported after `choose_backend()`; MissingDependency naming tensorcom[keras] without it."""
    from tensorcom.extras import require

    choose_backend()
    return require("keras")


def images_to_float(x: Any, *rest: Any) -> tuple:
    """A `transform`: x as float32 in [0, 1] when it is uint8 (x / 255), unchanged otherwise; the
    other fields unchanged."""
    if isinstance(x, np.ndarray) and x.dtype == np.uint8:
        x = x.astype(np.float32) * np.float32(1 / 255)
    return (x, *rest)


def check_fields(fields: Any) -> tuple | None:
    """`fields` as a tuple of 1 to 3 entries (an int, a str, or a tuple of them), or None."""
    if fields is None:
        return None
    if isinstance(fields, (str, int)) or not isinstance(fields, (list, tuple)) or not 1 <= len(fields) <= 3:
        raise ValueError(f"fields must be a tuple of 1 to 3 entries (x, y, sample_weight), got {fields!r}")
    for entry in fields:
        names = entry if isinstance(entry, (list, tuple)) else (entry,)
        if not names or not all(isinstance(name, (str, int)) and not isinstance(name, bool) for name in names):
            raise ValueError(f"a field is a list index, a dict key or a tuple of them, got {entry!r}")
    return tuple(tuple(entry) if isinstance(entry, list) else entry for entry in fields)


def pick(batch: Any, fields: tuple | None) -> tuple:
    """The (x[, y[, sample_weight]]) tuple of `batch` by `fields` (module docstring); ValueError
    naming the batch's fields when they do not match."""
    if fields is None:
        if isinstance(batch, (list, tuple)) and 1 <= len(batch) <= 3:
            return tuple(batch)
        if isinstance(batch, np.ndarray):
            return (batch,)
        if isinstance(batch, dict):
            raise ValueError(f"dict batches need fields=(x, y), e.g. fields=('images', 'labels'); "
                             f"this batch has {sorted(batch)}")
        if isinstance(batch, (list, tuple)):
            raise ValueError(f"a batch of {len(batch)} fields: give fields=(x, y) by index")
        raise TypeError(f"a batch must be a list, tuple, dict or array, not {type(batch).__name__}")
    return tuple(tuple(_field(batch, name) for name in entry) if isinstance(entry, tuple) else _field(batch, entry)
                 for entry in fields)


def _field(batch: Any, name: Any) -> Any:
    """One field of a list or dict batch by index or key ("a;b" alternatives for dicts)."""
    if isinstance(batch, dict):
        from tensorcom.shards import find_field

        found = find_field(batch, name) if isinstance(name, str) else ((name, batch[name]) if name in batch else None)
        if found is None:
            raise ValueError(f"field {name!r} is not in the batch, whose fields are {sorted(map(str, batch))}")
        return found[1]
    if isinstance(batch, (list, tuple)) and isinstance(name, int) and -len(batch) <= name < len(batch):
        return batch[name]
    raise ValueError(f"field {name!r} is not in a batch of {type(batch).__name__} with "
                     f"{len(batch) if hasattr(batch, '__len__') else '?'} fields")


def epoch_length(source: Any, batches_per_epoch: int | None, endless: bool) -> int | None:
    """The Keras epoch length (num_batches): `batches_per_epoch`, else len(source) unless endless or a
    Connection (None for endless); ValueError when a pass-aligned dataset cannot know it."""
    if batches_per_epoch is not None:
        if isinstance(batches_per_epoch, bool) or not isinstance(batches_per_epoch, int) or batches_per_epoch < 1:
            raise ValueError(f"batches_per_epoch must be a positive int or None, got {batches_per_epoch!r}")
        return batches_per_epoch
    if endless:
        return None
    from tensorcom.transport.connection import Connection

    if not isinstance(source, Connection):
        try:
            length = len(source)
        except TypeError:
            length = None
        if length == 0:
            raise ValueError("the source is empty (len 0): a Keras epoch needs at least one batch")
        if length is not None:
            return length
    raise ValueError(f"Keras needs the number of batches of an epoch before it starts, and {type(source).__name__} "
                     "does not tell it: give batches_per_epoch=N (the batches of one pass), or endless=True and "
                     "fit(steps_per_epoch=...)")


class PassReader:
    """Batches of `source`, pass after pass: `next_in_pass()` (None at the pass's end), `next_any()`
    (crossing into the next pass), `finish_pass()` (the batches left in the open pass, read and
    dropped). Counts the batches of the open pass in `taken`, the passes begun in `passes`, every
    batch in `delivered`."""

    def __init__(self, source: Iterable[Any]):
        if not hasattr(source, "__iter__"):
            raise TypeError(f"the source must be iterable (a Connection, a Pipeline, ...), got {type(source).__name__}")
        self.source, self.current = source, None
        self.taken = self.passes = self.delivered = 0

    def next_in_pass(self) -> Any:
        if self.current is None:
            self.current, self.taken = iter(self.source), 0
            self.passes += 1
        batch = next(self.current, None)
        if batch is None:
            self.current = None
        else:
            self.taken += 1
            self.delivered += 1
        return batch

    def next_any(self) -> Any:
        for _ in range(2):  # a pass that ends, then a fresh one
            batch = self.next_in_pass()
            if batch is not None:
                return batch
        raise ValueError(f"the source yielded no batch in a whole pass ({type(self.source).__name__})")

    def finish_pass(self) -> int:
        left = 0
        while self.current is not None and self.next_in_pass() is not None:
            left += 1
        return left


def _make_dataset_class() -> type:
    """Define StreamDataset on first use (it subclasses keras.utils.PyDataset)."""
    PyDataset = import_keras().utils.PyDataset

    class StreamDataset(PyDataset):
        """A keras PyDataset over the passes of `source` (module docstring: epochs, fields, transform).

        source: a Connection, Pipeline or other iterable yielding one pass per iteration.
        batches_per_epoch: batches of one pass (checked), or of one Keras epoch with `endless`.
        endless: read the source as one stream across passes. fields, transform: see the module.
        max_queue_size: Keras's; batches are produced in the calling thread (workers=1).
        """

        def __init__(self, source: Iterable[Any], *, fields: Any = None, batches_per_epoch: int | None = None,
                     endless: bool = False, transform: Callable[..., tuple] | None = None, max_queue_size: int = 10):
            super().__init__(workers=1, use_multiprocessing=False, max_queue_size=max_queue_size)
            if transform is not None and not callable(transform):
                raise TypeError(f"transform must be callable, got {transform!r}")
            self.reader = PassReader(source)
            self.fields, self.transform, self.endless = check_fields(fields), transform, bool(endless)
            self.length = epoch_length(source, batches_per_epoch, self.endless)
            self.served, self.last, self.replay, self.replayed = 0, None, None, False

        @property
        def num_batches(self) -> int | None:
            return self.length

        def on_epoch_begin(self) -> None:
            self.served = 0

        def __getitem__(self, index: int) -> tuple:
            """The next batch of the stream as Keras's tuple (`index` is ignored: see the module)."""
            if self.replay is not None:
                picked, self.replay, self.replayed = self.replay, None, True
            else:
                picked, self.replayed = self._read(), False
            self.served, self.last = self.served + 1, picked
            return picked

        def _read(self) -> tuple:
            batch = self.reader.next_any() if self.endless else self.reader.next_in_pass()
            if batch is None:
                raise ValueError(f"the source's pass ended after {self.reader.taken} batches, but an epoch is "
                                 f"{self.length} (batches_per_epoch={self.reader.taken} fits this source)")
            picked = pick(batch, self.fields)
            if self.transform is not None:
                picked = self.transform(*picked)
                picked = picked if isinstance(picked, tuple) else (picked,)
            return picked

        def on_epoch_end(self) -> None:
            """Keep Keras's epochs on the source's passes: a peek is served again, a finished pass
            is checked to have ended, an epoch cut short skips the rest of its pass (with a warning)."""
            served, self.served = self.served, 0
            if self._peeked(served):
                self.replay = self.last
                return
            if self.endless or self.reader.current is None:
                return
            taken, left = self.reader.taken, self.reader.finish_pass()
            if taken < self.length:
                warnings.warn(f"a Keras epoch ended after {taken} of the pass's {self.length} batches; the rest "
                              f"of the pass ({left} batches) was skipped. With fit(steps_per_epoch=...) use "
                              "endless=True", RuntimeWarning, stacklevel=2)
            elif left:
                raise ValueError(f"the source's pass has {taken + left} batches, but an epoch is {self.length} "
                                 f"(batches_per_epoch={taken + left} fits this source)")

        def _peeked(self, served: int) -> bool:
            """True when the epoch that ended was Keras reading one batch to build the model (before
            starting over): one fresh batch, the first of a pass (of all, when endless)."""
            if served != 1 or self.replayed:
                return False
            if self.endless:
                return self.reader.delivered == 1
            return self.reader.taken == 1 and (self.length > 1 or self.reader.passes == 1)

        def __repr__(self) -> str:
            return (f"StreamDataset({type(self.reader.source).__name__}, fields={self.fields!r}, "
                    f"batches_per_epoch={self.length}, endless={self.endless})")

    StreamDataset.__qualname__ = "StreamDataset"
    return StreamDataset


def __getattr__(name: str) -> Any:
    if name == "StreamDataset":
        cls = _make_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'tensorcom.adapters.keras' has no attribute {name!r}")
