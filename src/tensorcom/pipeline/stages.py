"""Pipeline stages as nodes: each takes its upstream node and yields items, with a state of its own.

    Mapped(up, fn, rng_key=None)     fn(sample), or fn(sample, rng) with the rng of (rng_key, position)
    Filtered(up, predicate)          the samples for which predicate(sample) is true
    Batched(up, size, partial, collate)   collate(list of `size` samples)
    Unbatched(up)                    the rows of each batch (tensorcom.batch.rows, the inverse of collate)
    Repeated(build, epochs, first)   the chain build(first), build(first + 1), ... one after the other
    FieldSelector(spec), FieldTuple(spec)       the functions of select() / to_tuple() ("jpg;png cls")

The shuffle buffer is tensorcom.pipeline._shuffle, the stages that run on worker threads or processes
tensorcom.pipeline._pooled, take/slice tensorcom.pipeline._sliced. A sample is whatever the source yields: usually a dict (`"__key__"` plus
fields), a tuple, or an array. Randomness comes in as an explicit `numpy.random.Generator` that is a
pure function of (seed, epoch, worker, stage, position) (`sample_rng`), never from global state.

Class names end in -ed on purpose: nothing here shadows the builtins `map`, `filter` or `slice`.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np

from tensorcom.batch import default_collate, rows
from tensorcom.fieldspec import Spec, parse_fields, pick_fields, select_fields
from tensorcom.pipeline._node import Counting, Node, Passing, State, skip, upstream_state

Sample = Any
Collate = Callable[[list], Any]
RngKey = tuple[int, int, int, int]  # (seed, epoch, worker, stage); the position completes it


def sample_rng(seed: int, epoch: int, worker: int, stage: int, position: int) -> np.random.Generator:
    """The Generator for one sample: a pure function of (seed, epoch, worker, stage, position).

    `worker` is the shard index from `Pipeline.shard`, `stage` the stage's index in the pipeline and
    `position` the sample's index in that stage's input for this epoch; the same five numbers always
    give the same random stream, whichever thread or process evaluates it.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, worker, stage, position])))


def sample_key(sample: Sample) -> str | None:
    """The `__key__` of a dict sample (as str), else None."""
    if isinstance(sample, dict):
        key = sample.get("__key__")
        return None if key is None else str(key)
    return None


def note_key(exc: BaseException, sample: Sample) -> None:
    """Attach the sample's key to `exc` (attribute `tensorcom_key` and a note in its traceback)."""
    key = sample_key(sample)
    if key is not None and getattr(exc, "tensorcom_key", None) is None:
        exc.tensorcom_key = key  # type: ignore[attr-defined]
        exc.add_note(f"while processing sample {key!r}")


def call(fn: Callable, sample: Sample, rng_key: RngKey | None, position: int) -> Any:
    """fn(sample), or fn(sample, rng) with the rng of (rng_key, position); the key noted on an error."""
    try:
        return fn(sample) if rng_key is None else fn(sample, sample_rng(*rng_key, position))
    except Exception as exc:
        note_key(exc, sample)
        raise


class Mapped(Counting):
    """fn applied to each sample; `position` counts the samples taken, for their rngs."""

    def __init__(self, up: Node, fn: Callable, rng_key: RngKey | None = None):
        self.up, self.fn, self.rng_key = up, fn, rng_key
        self.position = 0

    def __next__(self) -> Any:
        sample = next(self.up)
        self.position += 1
        return call(self.fn, sample, self.rng_key, self.position - 1)

    def pass_over(self, count: int) -> int:
        """Skip `count` samples without calling fn (the next sample's rng is keyed by its position
        all the same); returns how many there were."""
        done = skip(self.up, count)
        self.position += done
        return done


class Filtered(Passing):
    """The samples for which predicate(sample) is true; no state of its own."""

    def __init__(self, up: Node, predicate: Callable[[Any], bool]):
        self.up, self.predicate = up, predicate

    def __next__(self) -> Any:
        while True:
            sample = next(self.up)
            if self.predicate(sample):
                return sample


class Batched(Passing):
    """collate(list of `size` samples); a last, smaller batch only when `partial`. A batch is taken
    whole within one next(), so the position between batches is the upstream's."""

    def __init__(self, up: Node, size: int, partial: bool = True, collate: Collate = default_collate):
        self.up, self.size, self.partial, self.collate = up, size, partial, collate

    def __next__(self) -> Any:
        group = list(itertools.islice(self.up, self.size))
        if not group or (len(group) < self.size and not self.partial):
            raise StopIteration
        return self.collate(group)

    def pass_over(self, count: int) -> int:
        """Skip `count` batches without collating them (their samples passed over upstream); returns
        how many batches there were."""
        done = skip(self.up, count * self.size)
        whole, rest = divmod(done, self.size)
        return whole + (1 if rest and self.partial else 0)


class Unbatched(Node):
    """The rows of each batch in turn (tensorcom.batch.rows: dict batches → dicts, list and tuple
    batches, which hold fields, → tuples, arrays → rows). State: the upstream's position before the
    current batch, and the rows taken from it."""

    def __init__(self, up: Node):
        self.up = up
        self.rows: list = []
        self.row = 0
        self.before: State | None = None

    def __next__(self) -> Any:
        while self.row >= len(self.rows):
            self.before = self.up.state_dict()
            self.rows, self.row = list(rows(next(self.up))), 0
        self.row += 1
        return self.rows[self.row - 1]

    def state_dict(self) -> State:
        if self.row >= len(self.rows):
            return {"up": self.up.state_dict(), "row": 0}
        return {"up": self.before, "row": self.row}

    def load_state_dict(self, state: State | None) -> None:
        self.up.load_state_dict(upstream_state(state))
        self.rows, self.row = [], 0
        if state is not None and state["row"]:
            self.before = state["up"]
            self.rows, self.row = list(rows(next(self.up))), int(state["row"])


class Repeated(Node):
    """The chains build(first), build(first + 1), ..., `epochs` of them (None: until a pass yields
    nothing). State: the pass, whether it has yielded yet, and its chain's state."""

    def __init__(self, build: Callable[[int], Node], epochs: int | None, first: int):
        self.build, self.epochs, self.first = build, epochs, first
        self.done, self.yielded = 0, False
        self.inner: Node | None = None
        self.pending: State | None = None

    def __next__(self) -> Any:
        while self.epochs is None or self.done < self.epochs:
            if self.inner is None:
                self.inner = self.build(self.first + self.done)
                self.inner.load_state_dict(self.pending)
                self.pending = None
            try:
                item = next(self.inner)
            except StopIteration:
                if not self.yielded:
                    self.epochs = self.done  # an empty pass: a one-shot source has ended for good
                    break
                self.close()
                self.done, self.yielded = self.done + 1, False
                continue
            self.yielded = True
            return item
        raise StopIteration

    def state_dict(self) -> State:
        inner = self.inner.state_dict() if self.inner is not None else self.pending
        return {"pass": self.done, "yielded": self.yielded, "inner": inner}

    def load_state_dict(self, state: State | None) -> None:
        self.close()
        self.done = 0 if state is None else int(state["pass"])
        self.yielded = False if state is None else bool(state["yielded"])
        self.pending = None if state is None else state["inner"]

    def close(self) -> None:
        inner, self.inner = self.inner, None
        if inner is not None:
            inner.close()


class FieldSelector:
    """dict samples → dicts with only the fields of `spec` (tensorcom.fieldspec: "jpg;png cls"), each
    under its first name, plus `__key__` / `__url__` when present; SampleError names a missing field."""

    def __init__(self, spec: Spec):
        self.fields = parse_fields(spec)

    def __call__(self, sample: dict) -> dict:
        return select_fields(sample, self.fields)


class FieldTuple:
    """dict samples → tuple of the fields of `spec` (tensorcom.fieldspec: "jpg;png cls")."""

    def __init__(self, spec: Spec):
        self.fields = parse_fields(spec)

    def __call__(self, sample: dict) -> tuple:
        return pick_fields(sample, self.fields)
