"""Pipeline stages: plain generator functions from an iterator of samples to an iterator of samples.

Every stage takes its upstream iterator first and yields samples; none keeps state between calls, so
a stage chain is rebuilt for each epoch. A sample is whatever the source yields: usually a dict
(`"__key__"` plus fields), a tuple, or an array. Randomness always comes in as an explicit
`numpy.random.Generator` (see `sample_rng`), never from global state, so results are reproducible.

Names end in -ed / -ing on purpose: nothing here shadows the builtins `map`, `filter` or `slice`.
"""

from __future__ import annotations

import itertools
import numbers
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from tensorcom.transport.batches import batch_size  # the one row count

Sample = Any
Collate = Callable[[list], Any]


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


def mapping(source: Iterable[Sample], fn: Callable, rngs: Callable[[int], np.random.Generator] | None = None) -> Iterator[Sample]:
    """Yield fn(sample), or fn(sample, rngs(i)) for the i-th sample when `rngs` is given.

    An exception from `fn` propagates unchanged, with the sample key noted on it.
    """
    for position, sample in enumerate(source):
        try:
            yield fn(sample) if rngs is None else fn(sample, rngs(position))
        except Exception as exc:
            note_key(exc, sample)
            raise


def filtering(source: Iterable[Sample], predicate: Callable[[Sample], bool]) -> Iterator[Sample]:
    """Yield the samples for which predicate(sample) is true."""
    for sample in source:
        if predicate(sample):
            yield sample


def _pick(sample: dict, spec: str) -> Any:
    """The value of the first field named in `spec` ("jpg;png") present in `sample`."""
    for name in spec.split(";"):
        if name in sample:
            return sample[name]
    raise KeyError(f"sample {sample_key(sample)!r} has none of the fields {spec!r} (it has {sorted(sample)})")


def selecting(source: Iterable[dict], fields: Sequence[str]) -> Iterator[dict]:
    """Yield dicts with only `fields` (each may list alternatives "jpg;png"; stored under its first
    name) plus `__key__` when present. A sample lacking a field raises KeyError naming it."""
    for sample in source:
        out = {spec.split(";")[0]: _pick(sample, spec) for spec in fields}
        if "__key__" in sample:
            out["__key__"] = sample["__key__"]
        yield out


def tupling(source: Iterable[dict], fields: Sequence[str]) -> Iterator[tuple]:
    """Yield tuple(sample[f] for f in fields); a field may list alternatives ("jpg;png")."""
    for sample in source:
        yield tuple(_pick(sample, spec) for spec in fields)


def shuffling(source: Iterable[Sample], bufsize: int, rng: np.random.Generator) -> Iterator[Sample]:
    """Shuffle through a buffer: fill it with `bufsize` samples, then for each new sample yield a random
    buffered one and put the new one in its place; at the end yield the rest in random order."""
    buffer: list = []
    for sample in source:
        if len(buffer) < bufsize:
            buffer.append(sample)
            continue
        index = int(rng.integers(bufsize))
        chosen, buffer[index] = buffer[index], sample
        yield chosen
    for index in rng.permutation(len(buffer)):
        yield buffer[index]


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


def batching(source: Iterable[Sample], size: int, partial: bool = True, collate: Collate = default_collate) -> Iterator[Any]:
    """Yield collate(list of `size` samples); a last, smaller batch only when `partial`."""
    iterator = iter(source)
    while True:
        group = list(itertools.islice(iterator, size))
        if not group or (len(group) < size and not partial):
            return
        yield collate(group)


def _rows(batch: Any) -> Iterator[Any]:
    """The samples of one batch, the inverse of default_collate."""
    if isinstance(batch, dict):
        n = batch_size(batch)
        for i in range(n):
            yield {k: v[i] for k, v in batch.items()}
    elif isinstance(batch, tuple):
        n = batch_size(batch)
        for i in range(n):
            yield tuple(column[i] for column in batch)
    else:
        yield from batch


def unbatching(source: Iterable[Any]) -> Iterator[Sample]:
    """Yield the samples of each batch in turn (dict batches → dicts, tuple batches → tuples,
    arrays → rows, lists → items)."""
    for batch in source:
        yield from _rows(batch)


def rebatching(source: Iterable[Any], size: int, partial: bool = True, collate: Collate = default_collate) -> Iterator[Any]:
    """Regroup batches of any sizes into batches of `size` samples."""
    return batching(unbatching(source), size, partial, collate)


def taking(source: Iterable[Sample], count: int) -> Iterator[Sample]:
    """Yield the first `count` samples."""
    return itertools.islice(source, count)


def striding(source: Iterable[Sample], worker: int, num_workers: int) -> Iterator[Sample]:
    """Yield samples worker, worker + num_workers, ...: this worker's disjoint share of a stream."""
    return itertools.islice(source, worker, None, num_workers)
