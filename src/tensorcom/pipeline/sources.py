"""Sources: where a Pipeline's samples come from, split disjointly between workers, ordered per epoch.

A source has one method, `iterate(*, seed, epoch, worker, num_workers)`, returning an iterator over
its share (`worker` of `num_workers`) of the samples of that epoch, and `length(worker, num_workers)`,
the size of that share or None when unknown. Every source is picklable when what it was built from
is, so a Pipeline can be sent to a spawned serving process.

    IterableSource(items)          any re-iterable (list, range, dataset...); shares are strides
    ShardSource(urls, ...)         tar shards through tensorcom.shards.samples; shares are whole shards
    PathSource(paths, ...)         files or URLs read with gopen: {"__key__", "__url__", EXT: bytes}
    FetchSource(urls, threads=8)   like PathSource, the reads done by a thread pool (HTTP downloads)

ImageFolder trees are a source of the images layer: `tensorcom.images.ImageFolderSource`.
List-like sources take `shuffle=True` for a fresh permutation each epoch, a pure function of
(seed, epoch); it is applied before the split, so the shares stay disjoint.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from tensorcom.pipeline.stages import striding
from tensorcom.pipeline.workers import parallel_map


class Source:
    """Base class: subclasses implement `iterate` and, when they can, `length`."""

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        """This worker's samples for `epoch`."""
        raise NotImplementedError

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        """Number of samples in this worker's share, or None when unknown."""
        return None


def share_length(total: int, worker: int, num_workers: int) -> int:
    """Size of stride `worker` of `num_workers` over `total` items."""
    return len(range(worker, total, num_workers))


def epoch_order(count: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray | range:
    """Indices 0..count-1, permuted by a Generator seeded with (seed, epoch) when `shuffle`."""
    if not shuffle:
        return range(count)
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(count)


def epoch_share(items: Sequence[Any], shuffle: bool, seed: int, epoch: int, worker: int,
                num_workers: int) -> Iterator[Any]:
    """The items of share `worker` of `num_workers` of a sequence, in `epoch_order` for (seed, epoch)."""
    order = epoch_order(len(items), shuffle, seed, epoch)
    return (items[int(i)] for i in striding(order, worker, num_workers))


class IterableSource(Source):
    """Any iterable that can be iterated once per epoch (lists, ranges, datasets); a one-shot
    iterator (a generator) works for a single epoch. `shuffle=True` needs a sequence."""

    def __init__(self, items: Iterable[Any], *, shuffle: bool = False):
        if not hasattr(items, "__iter__"):
            raise TypeError(f"a source must be iterable, got {type(items).__name__}: {items!r}")
        if shuffle and not (hasattr(items, "__getitem__") and hasattr(items, "__len__")):
            raise TypeError(f"shuffle=True needs a sequence (len and indexing), got {type(items).__name__}")
        self.items = items
        self.shuffle = shuffle

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        if self.shuffle:
            return epoch_share(self.items, True, seed, epoch, worker, num_workers)
        return striding(self.items, worker, num_workers)

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        try:
            return share_length(len(self.items), worker, num_workers)
        except TypeError:
            return None


class ShardSource(Source):
    """Samples of tar shards via `tensorcom.shards.samples(urls, ...)`; each worker reads whole shards.

    Keyword options (handler, shuffle_shards, rank, world_size, ...) go to `samples` unchanged.
    """

    def __init__(self, urls: str | Sequence[str], **options: Any):
        self.urls = urls
        self.options = options

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        from tensorcom.shards import samples

        return samples(self.urls, seed=seed, epoch=epoch, worker=worker, num_workers=num_workers, **self.options)


def read_bytes(url: str) -> bytes:
    """The whole content of a path or URL, read with tensorcom.shards.gopen."""
    from tensorcom.shards.gopen import gopen

    with gopen(url) as stream:
        return stream.read()


def field_name(path: str) -> str:
    """The sample field for a file: its extension, lowercased ("jpg"), or "data" when it has none."""
    base = str(path).rsplit("/", 1)[-1]
    ext = base.rsplit(".", 1)[-1].lower() if "." in base.lstrip(".") else ""
    return ext or "data"


def path_sample(url: str, read: bool) -> dict:
    """{"__key__": url, "__url__": url} plus the content under its field name when `read`."""
    sample: dict[str, Any] = {"__key__": str(url), "__url__": str(url)}
    if read:
        sample[field_name(url)] = read_bytes(str(url))
    return sample


class PathSource(Source):
    """A list of paths or URLs; each sample is {"__key__": url, "__url__": url, EXT: bytes}.

    With `read=False` the bytes are left out, e.g. to read them later in a parallel `map`.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], *, read: bool = True, shuffle: bool = False):
        if isinstance(paths, (str, bytes)):
            raise TypeError(f"PathSource takes a list of paths or URLs, not one string: {paths!r}")
        self.paths = [os.fspath(p) for p in paths]
        self.read = read
        self.shuffle = shuffle

    def _urls(self, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[str]:
        return epoch_share(self.paths, self.shuffle, seed, epoch, worker, num_workers)

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        return (path_sample(url, self.read) for url in self._urls(seed, epoch, worker, num_workers))

    def length(self, worker: int = 0, num_workers: int = 1) -> int | None:
        return share_length(len(self.paths), worker, num_workers)


class FetchSource(PathSource):
    """PathSource whose reads run on `threads` threads at once (for HTTP); `ordered=False` yields
    samples as their downloads finish. A failed read raises WorkerError naming the URL."""

    def __init__(self, urls: Sequence[str], *, threads: int = 8, ordered: bool = True, shuffle: bool = False):
        super().__init__(urls, read=True, shuffle=shuffle)
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads!r}")
        self.threads = threads
        self.ordered = ordered

    def iterate(self, *, seed: int, epoch: int, worker: int, num_workers: int) -> Iterator[Any]:
        # keyed dicts, so that a failed read's WorkerError names its URL
        urls = ({"__key__": url} for url in self._urls(seed, epoch, worker, num_workers))
        return parallel_map(urls, _fetch_keyed, workers=self.threads, ordered=self.ordered, buffer=2 * self.threads)


def _fetch_keyed(sample: dict) -> dict:
    """path_sample of the URL under `__key__`, with its bytes read."""
    return path_sample(sample["__key__"], True)


